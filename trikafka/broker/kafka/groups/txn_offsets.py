"""Transactional offsets of one ``__consumer_offsets`` partition (docs/protocol.md §19.5.4,
TxnOffsetCommit), sans I/O.

A TxnOffsetCommit's offsets are written as a transactional batch of the
producer; until that producer's marker reaches the partition they are
*pending* for (group, producer id): OffsetFetch does not answer them, and a
``require_stable`` fetch of their partitions answers UNSTABLE_OFFSET_COMMIT.
A COMMIT marker hands them over to the groups' committed offsets, each with
the log offset of the record that carried it (so a plain commit written
after that record still wins, as ``CommittedOffsets.apply`` orders by log
offset); an ABORT marker drops them.
"""

from __future__ import annotations

from dataclasses import dataclass

from trikafka.kafka.group_records import OffsetValue

from .committed import TopicPartition


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """One offset of an open transaction: the group, the partition, the value and its record's offset."""

    group_id: str
    topic: str
    partition: int
    value: OffsetValue | None  # None: a tombstone in the transaction
    log_offset: int


class PendingTxnOffsets:
    """The offsets of open transactions in one partition, by producer id, then (group, partition)."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[tuple[str, str, int], PendingOffset]] = {}

    def add(self, producer_id: int, pending: PendingOffset) -> None:
        """A record of a transactional batch of ``producer_id``; a later record of the same key wins."""
        offsets = self._by_producer.setdefault(producer_id, {})
        key = (pending.group_id, pending.topic, pending.partition)
        current = offsets.get(key)
        if current is None or current.log_offset <= pending.log_offset:
            offsets[key] = pending

    def end(self, producer_id: int) -> list[PendingOffset]:
        """The producer's marker arrived: its pending offsets, now removed (the caller applies them
        on COMMIT and drops them on ABORT)."""
        return sorted(self._by_producer.pop(producer_id, {}).values(), key=lambda p: p.log_offset)

    def unstable(self, group_id: str, key: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of ``group_id`` for ``key``."""
        return any((group_id, *key) in offsets for offsets in self._by_producer.values())

    def groups(self) -> set[str]:
        """The groups that have an offset in an open transaction (they are not forgotten meanwhile)."""
        return {group_id for offsets in self._by_producer.values() for group_id, _, _ in offsets}

    def producers(self) -> list[int]:
        """The producer ids with an open transaction here."""
        return list(self._by_producer)
