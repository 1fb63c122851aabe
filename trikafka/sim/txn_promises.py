"""The promises the transactions world holds producers, partitions and the coordinator to, in the
style of Jepsen's Kafka workload (docs/simulation.md, "Transactions").

``PROMISES`` is the table: each promise's name and the sentence it checks.  ``TxnHistory`` keeps what
clients were told and what the read_committed reader was shown, and judges each event as it
happens (and the whole history at the end, ``finish``).

A record's value names where it came from: ``<txn label>|<input partition>|<input index>`` for a
copier's output (the label is unique to one transaction of one producer incarnation), or
``idem|<n>`` for the idempotent producer's n-th record.  A transaction's outcome is the decision the
coordinator made durable (PrepareCommit or PrepareAbort committed to ``__transaction_state``): a
decision at (producer id, epoch) belongs to the transaction opened at that epoch, or, for an abort
that fenced the producer (the epoch bumped), at the epoch before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checker import Violation

ABORTED_READ = "no aborted read"
LOST_WRITE = "no lost committed write"
DUPLICATE = "no duplicated write"
TORN = "no torn transaction"
UNCOMMITTED_READ = "no read of uncommitted data"
ORDER = "each partition's order per producer kept"
CYCLE = "no cycle through consumed offsets"
SETTLES = "every transaction ends"

# name -> the sentence it checks
PROMISES = {
    ABORTED_READ: "read_committed never returns a record of a transaction whose decision is abort",
    LOST_WRITE: "every acknowledged record of a transaction whose commit was acknowledged, and every "
                "acknowledged idempotent record, is read by a reader that reads to the end",
    DUPLICATE: "no record is read twice: retries of idempotent and transactional batches are stored once",
    TORN: "a transaction with some records visible to read_committed has all its acknowledged records visible",
    UNCOMMITTED_READ: "read_committed returns a transaction's record only after its commit decision is durable",
    ORDER: "on each partition, each producer's records are read in the order it wrote them",
    CYCLE: "the consumed offsets a transaction commits are visible exactly when its outputs are: each "
           "input record below its partition's committed offset is copied once, none above it",
    SETTLES: "once the faults stop, no transactional id is left Ongoing or Prepare* and every partition's LSO "
             "is its high watermark (txn_world.TransactionsWorld judges it at the end of the run)",
}

IDEMPOTENT = "idem"


@dataclass
class TxnHistory:
    """What was acknowledged, decided and read; each method returns the violation it finds, if any."""

    open_txn: dict[tuple[int, int], str] = field(default_factory=dict)  # (producer id, epoch) -> open label
    outcome: dict[str, bool] = field(default_factory=dict)  # label -> committed (the durable decision)
    written: dict[str, set[tuple[int, bytes]]] = field(default_factory=dict)  # label -> acked (partition, value)
    commit_acked: set[str] = field(default_factory=set)  # labels whose EndTxn commit was answered NONE
    idempotent_acked: set[tuple[int, bytes]] = field(default_factory=set)
    seen: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset) read
    seen_labels: set[str] = field(default_factory=set)
    last_read: dict[tuple[int, str], int] = field(default_factory=dict)  # (partition, producer) -> last index

    def begin(self, producer_id: int, epoch: int, label: str) -> None:
        self.open_txn[(producer_id, epoch)] = label

    def decided(self, producer_id: int, epoch: int, commit: bool) -> Violation | None:
        label = self.open_txn.pop((producer_id, epoch), None) or self.open_txn.pop((producer_id, epoch - 1), None)
        if label is None:
            return None
        self.outcome[label] = commit
        if not commit and label in self.seen_labels:
            return Violation(ABORTED_READ, f"transaction {label} aborted after read_committed read its records")
        return None

    def acknowledged(self, label: str, partition: int, values: list[bytes]) -> None:
        target = self.idempotent_acked if label == IDEMPOTENT else self.written.setdefault(label, set())
        target.update((partition, v) for v in values)

    def commit_acknowledged(self, label: str) -> None:
        self.commit_acked.add(label)

    def read(self, partition: int, offset: int, value: bytes) -> Violation | None:
        """The read_committed reader was shown ``value`` at ``offset`` of ``partition``."""
        if value in self.seen:
            where = self.seen[value]
            return Violation(DUPLICATE, f"{value.decode()} read at partition {where[0]} offset {where[1]} and at "
                             f"partition {partition} offset {offset}")
        self.seen[value] = (partition, offset)
        label, producer, index = _origin(value)
        if label != IDEMPOTENT:
            self.seen_labels.add(label)
            decided = self.outcome.get(label)
            if decided is None:
                return Violation(UNCOMMITTED_READ, f"{value.decode()} read at partition {partition} offset {offset} "
                                 f"before transaction {label} was decided")
            if not decided:
                return Violation(ABORTED_READ, f"{value.decode()} read at partition {partition} offset {offset}: "
                                 f"transaction {label} aborted")
        last = self.last_read.get((partition, producer), -1)
        if index <= last:
            return Violation(ORDER, f"partition {partition}: {producer}'s record {index} read after {last}")
        self.last_read[(partition, producer)] = index
        return None

    def finish(self, committed_offsets: dict[int, int]) -> Violation | None:
        """The end of the run, the reader at the end of every partition: ``committed_offsets`` is each
        input partition's offset as the read_committed view of its offsets partition shows it."""
        for label in sorted(self.written):
            missing = sorted(r for r in self.written[label] if r[1] not in self.seen)
            if missing and label in self.seen_labels:
                return Violation(TORN, f"transaction {label}: {len(self.written[label]) - len(missing)} records "
                                 f"visible, {missing[0][1].decode()} on partition {missing[0][0]} not")
            if missing and (label in self.commit_acked or self.outcome.get(label)):
                return Violation(LOST_WRITE, f"transaction {label} committed: {missing[0][1].decode()} on "
                                 f"partition {missing[0][0]} never read")
        for partition, value in sorted(self.idempotent_acked):
            if value not in self.seen:
                return Violation(LOST_WRITE, f"{value.decode()} acknowledged on partition {partition}, never read")
        copied: dict[int, list[int]] = {}
        for value in self.seen:
            label, producer, index = _origin(value)
            if label != IDEMPOTENT:
                copied.setdefault(int(producer), []).append(index)
        for source in sorted(set(copied) | set(committed_offsets)):
            indexes, position = sorted(copied.get(source, [])), committed_offsets.get(source, 0)
            if indexes != list(range(position)):
                wrong = sorted(set(indexes) ^ set(range(position)))
                return Violation(CYCLE, f"input partition {source}: committed offset {position}, input record "
                                 f"{wrong[0]} {'not ' if wrong[0] < position else ''}copied")
        return None


def _origin(value: bytes) -> tuple[str, str, int]:
    """(transaction label or ``idem``, producer key for ordering, index) of a record's value."""
    parts = value.decode().split("|")
    if parts[0] == IDEMPOTENT:
        return IDEMPOTENT, IDEMPOTENT, int(parts[1])
    return parts[0], parts[1], int(parts[2])


def copier_value(label: str, source: int, index: int) -> bytes:
    """The value a copier writes for input record ``index`` of input partition ``source``."""
    return f"{label}|{source}|{index}".encode()


def idempotent_value(n: int) -> bytes:
    return f"{IDEMPOTENT}|{n}".encode()
