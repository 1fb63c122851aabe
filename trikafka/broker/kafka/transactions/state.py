"""The transactional ids of one ``__transaction_state`` partition (docs/protocol.md §19.5.3,
§19.5.6), sans I/O.

``TxnPartition`` is what a partition's records say (each id's last record
wins, a tombstone removes it) plus which ids have a write in flight.  Loading
applies every record in log order; the coordinator applies its own once they
are committed.  It also says what a coordinator owes the partition's ids:
the markers of decisions not yet completed, the rewrites a load needs, and
the aborts of expired transactions.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.txn_records import TxnKey, TxnValue

from . import machine
from .machine import Write


class TxnPartition:
    """The transactional ids whose state lives in one partition of ``__transaction_state``;
    ``coordinator_epoch`` is the partition's leader epoch at the load (§19.5.1)."""

    def __init__(self, index: int, coordinator_epoch: int):
        self.index = index
        self.coordinator_epoch = coordinator_epoch
        self.ids: dict[str, TxnValue] = {}
        self.writing: set[str] = set()  # ids with a write in flight: CONCURRENT_TRANSACTIONS meanwhile

    def apply(self, key: TxnKey, value: TxnValue | None) -> None:
        """One record of the partition, in log order: the last record of an id wins."""
        if value is None:
            self.ids.pop(key.transactional_id, None)
        else:
            self.ids[key.transactional_id] = value

    def value(self, transactional_id: str) -> TxnValue | None:
        """The id's committed state, None when the partition holds nothing of it."""
        return self.ids.get(transactional_id)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode:
        """KIP-890 verification of a transactional Produce (§19.5.7)."""
        return machine.verify(self.ids.get(transactional_id), producer_id, producer_epoch, topic, partition)

    def undecided_markers(self) -> list[str]:
        """The ids whose decision is written but whose markers may not all be (§19.5.6)."""
        return sorted(tid for tid, value in self.ids.items() if machine.needs_markers(value))

    def rewrites_after_load(self, now_ms: int) -> list[tuple[str, Write]]:
        """The writes a coordinator makes first after loading the partition (§19.5.6)."""
        found = ((tid, machine.after_load(value, now_ms)) for tid, value in sorted(self.ids.items()))
        return [(tid, write) for tid, write in found if write is not None]

    def expired(self, now_ms: int) -> list[tuple[str, Write]]:
        """The aborts of Ongoing transactions past their timeout, epochs bumped (§19.5.3)."""
        found = ((tid, machine.expire(value, tid in self.writing, now_ms)) for tid, value in sorted(self.ids.items()))
        return [(tid, write) for tid, write in found if write is not None]

    def expired_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """The ids at rest and unused for ``expiration_ms``, whose state may be removed (§19.5.3)."""
        return sorted(tid for tid, value in self.ids.items()
                      if machine.id_expired(value, tid in self.writing, now_ms, expiration_ms))

    def next_deadline_ms(self) -> int | None:
        """When the earliest Ongoing transaction here times out (None: none is open)."""
        deadlines = [d for d in (machine.deadline_ms(value) for value in self.ids.values()) if d is not None]
        return min(deadlines, default=None)
