"""The promises the Kafka world holds the shipped brokers and trikafka's Kafka client to
(docs/simulation.md, "The Kafka world").

``PROMISES`` is the table: each promise's name and the sentence it checks.  ``KafkaHistory`` keeps
what clients were told (acknowledgements, transaction outcomes, commits, assignments, records read)
and judges each event as it happens; ``KafkaHistory.finish`` judges it against what the logs hold
once the cluster healed (``FinalLogs``: each partition's records, read back by a fresh client).

Values name where they came from: ``idem|<producer>|<n>`` for an idempotent producer's n-th record
on the input topic, ``<input partition>|<input offset>|<label>`` for a copier's copy on the output
topic (the label names one transaction of one copier incarnation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checker import Violation

SURVIVE = "acknowledged records survive"
ONCE = "an idempotent producer's record is stored once"
WHOLE = "a committed transaction is seen whole"
ABORTED = "an aborted transaction is never seen"
PAST_LSO = "read_committed sees nothing past the last stable offset"
ENDS = "every transaction ends"
EXACTLY_ONCE = "a copier's output equals its input exactly once"
OWNERSHIP = "group members never own a partition at once"
FORWARD = "commits only move forward"
WHERE_TOLD = "offsets a consumer was told are where the record is"
ORDER = "each producer's acknowledged records keep its order"
AT_LEAST_ONCE = "every offset below a committed offset was consumed"
COMMITS_SURVIVE = "acknowledged commits survive"
SETTLES = "the groups settle"

# name -> the sentence it checks
PROMISES = {
    SURVIVE: "every record whose produce was acknowledged (acks -1) is, after healing, at the offset it was "
             "acknowledged at",
    ONCE: "no idempotent producer's record is stored twice on the input topic",
    WHOLE: "every record of a transaction whose commit was acknowledged is read by read_committed at the end",
    ABORTED: "no record of a transaction whose abort was acknowledged is ever read by read_committed, and "
             "a transaction's records are read by read_committed all or none",
    PAST_LSO: "every record a read_committed reader was shown is, at the end, committed at that offset",
    ENDS: "once the faults stop, no transactional id stays Ongoing or Prepare* and each output "
          "partition's last stable offset reaches its high watermark, and no transaction holds the copiers' "
          "committed offsets",
    EXACTLY_ONCE: "the copies committed on the output topic are exactly the input records below the copiers' "
                  "committed offsets, each once",
    OWNERSHIP: "in one generation of a group, no partition is assigned to two members",
    FORWARD: "a group's acknowledged commits of a partition never go below an earlier acknowledged one",
    WHERE_TOLD: "every record a consumer was handed at an offset is, at the end, that record at that offset",
    ORDER: "on each input partition, the records one incarnation of an idempotent producer had acknowledged are "
           "at offsets in the order it submitted them",
    AT_LEAST_ONCE: "a group's acknowledged commit of a partition is at most the offset below which every record "
                   "was handed to one of its members",
    COMMITS_SURVIVE: "after healing, a group's committed offset of each partition is at least the highest commit "
                     "acknowledged to it (a coordinator moving loses none)",
    SETTLES: "once the faults stop and the clients are gone, each group ends Empty: its coordinator, wherever it "
             "moved, expires every member and finishes every rebalance",
}


@dataclass
class FinalLogs:
    """What the healed cluster holds: per partition, offset -> value (data records of every batch, as
    read_uncommitted reads them) and the values read_committed reads; the groups' committed offsets."""

    inputs: dict[int, dict[int, bytes]]
    outputs_committed: dict[int, dict[int, bytes]]
    copier_offsets: dict[int, int]  # input partition -> the copiers' group's committed offset (0: none)
    open_transactions: list[str]  # transactional ids left Ongoing or Prepare*
    unstable: dict[int, tuple[int, int]]  # output partition -> (last stable offset reached, high watermark)
    # input partitions whose copiers' committed offset a transaction still holds (UNSTABLE_OFFSET_COMMIT)
    pending_offsets: list[int] = field(default_factory=list)
    # (group, input partition) -> the committed offset of a group that commits outside transactions (-1: none)
    group_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    unsettled_groups: list[str] = field(default_factory=list)  # each as "<group> <state> with <n> members"


@dataclass
class KafkaHistory:
    """What clients were told and shown; each method returns the violation it finds, if any."""

    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (input partition, offset) -> value
    txn_outputs: dict[str, set[tuple[int, bytes]]] = field(default_factory=dict)  # label -> (partition, value)
    outcome: dict[str, bool] = field(default_factory=dict)  # label -> committed (the client was told so)
    read_committed: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (out partition, offset) -> value
    handed: dict[tuple[str, int, int], bytes] = field(default_factory=dict)  # (topic, partition, offset) -> value
    owners: dict[tuple[str, int, int], str] = field(default_factory=dict)  # (group, generation, partition) -> member
    commits: dict[tuple[str, int], int] = field(default_factory=dict)  # (group, partition) -> highest acked
    incarnations: dict[bytes, int] = field(default_factory=dict)  # acked value -> its producer's incarnation
    # (group, partition) -> every offset below was handed to a member; the offsets handed above it
    consumed_below: dict[tuple[str, int], int] = field(default_factory=dict)
    consumed_above: dict[tuple[str, int], set[int]] = field(default_factory=dict)

    def acknowledged(self, partition: int, offset: int, value: bytes, incarnation: int = 0) -> Violation | None:
        """An idempotent producer's ``incarnation`` was told ``value`` is at ``offset`` of input ``partition``."""
        self.incarnations[value] = incarnation
        known = self.acked.setdefault((partition, offset), value)
        if known != value:
            return Violation(SURVIVE, f"input partition {partition} offset {offset} acknowledged for "
                             f"{known.decode()} and for {value.decode()}")
        return None

    def sent(self, label: str, partition: int, value: bytes) -> None:
        self.txn_outputs.setdefault(label, set()).add((partition, value))

    def ended(self, label: str, committed: bool) -> Violation | None:
        self.outcome[label] = committed
        if not committed:
            shown = sorted(k for k, v in self.read_committed.items() if _label(v) == label)
            if shown:
                return Violation(ABORTED, f"transaction {label} aborted after read_committed read it at output "
                                 f"partition {shown[0][0]} offset {shown[0][1]}")
        return None

    def read(self, partition: int, offset: int, value: bytes) -> Violation | None:
        """A read_committed reader of the output topic was shown ``value`` at ``offset``."""
        known = self.read_committed.setdefault((partition, offset), value)
        if known != value:
            return Violation(PAST_LSO, f"output partition {partition} offset {offset} read as {known.decode()} "
                             f"and as {value.decode()}")
        if self.outcome.get(_label(value)) is False:
            return Violation(ABORTED, f"{value.decode()} read at output partition {partition} offset {offset}: "
                             f"its transaction was aborted")
        return None

    def handed_out(self, topic: str, partition: int, offset: int, value: bytes,
                   group: str | None = None) -> Violation | None:
        """A consumer (a member of ``group``, whose commits are judged by ``committed``) was handed ``value``."""
        if group is not None:
            key = (group, partition)
            above = self.consumed_above.setdefault(key, set())
            above.add(offset)
            low = self.consumed_below.get(key, 0)
            while low in above:
                above.discard(low)
                low += 1
            self.consumed_below[key] = low
        known = self.handed.setdefault((topic, partition, offset), value)
        if known != value:
            return Violation(WHERE_TOLD, f"{topic}-{partition} offset {offset} handed out as {known.decode()} "
                             f"and as {value.decode()}")
        return None

    def assigned(self, group: str, generation: int, member: str, partitions: list[int]) -> Violation | None:
        for partition in partitions:
            owner = self.owners.setdefault((group, generation, partition), member)
            if owner != member:
                return Violation(OWNERSHIP, f"group {group} generation {generation}: partition {partition} "
                                 f"assigned to {owner} and to {member}")
        return None

    def committed(self, group: str, partition: int, offset: int) -> Violation | None:
        """A commit of ``offset`` was acknowledged to a member of ``group`` (its records were handed out
        through ``handed_out`` with the group)."""
        before = self.commits.get((group, partition), -1)
        if offset < before:
            return Violation(FORWARD, f"group {group} partition {partition}: commit of {offset} acknowledged "
                             f"after one of {before}")
        self.commits[(group, partition)] = offset
        consumed = self.consumed_below.get((group, partition), 0)
        if offset > consumed:
            return Violation(AT_LEAST_ONCE, f"group {group} partition {partition}: commit of {offset} acknowledged, "
                             f"but offset {consumed} was never handed to a member")
        return None

    def finish(self, logs: FinalLogs) -> Violation | None:
        """The promises judged on the healed cluster's logs."""
        for check in (self._survive, self._once, self._order, self._commits_survive, self._transactions, self._reads,
                      self._exactly_once, self._ends, self._settles):
            violation = check(logs)
            if violation is not None:
                return violation
        return None

    def _survive(self, logs: FinalLogs) -> Violation | None:
        for (partition, offset), value in sorted(self.acked.items()):
            stored = logs.inputs.get(partition, {}).get(offset)
            if stored != value:
                return Violation(SURVIVE, f"{value.decode()} acknowledged at input partition {partition} offset "
                                 f"{offset}; the log holds {stored!r} there")
        for (topic, partition, offset), value in sorted(self.handed.items()):
            if topic == "in" and logs.inputs.get(partition, {}).get(offset) != value:
                return Violation(WHERE_TOLD, f"{value.decode()} handed out at in-{partition} offset {offset}; the "
                                 f"log holds {logs.inputs.get(partition, {}).get(offset)!r} there")
        return None

    def _once(self, logs: FinalLogs) -> Violation | None:
        where: dict[bytes, tuple[int, int]] = {}
        for partition, records in sorted(logs.inputs.items()):
            for offset, value in sorted(records.items()):
                if value in where:
                    return Violation(ONCE, f"{value.decode()} stored at input partition {where[value][0]} offset "
                                     f"{where[value][1]} and at partition {partition} offset {offset}")
                where[value] = (partition, offset)
        return None

    def _order(self, logs: FinalLogs) -> Violation | None:
        last: dict[tuple[int, str, int], tuple[int, int]] = {}  # (partition, producer, incarnation) -> (offset, n)
        for (partition, offset), value in sorted(self.acked.items()):
            producer, n = _producer_index(value)
            key = (partition, producer, self.incarnations.get(value, 0))
            before = last.get(key)
            if before is not None and n < before[1]:
                return Violation(ORDER, f"producer {producer}: record {n} acknowledged at input partition {partition} "
                                 f"offset {offset}, after record {before[1]} at offset {before[0]}")
            last[key] = (offset, n)
        return None

    def _commits_survive(self, logs: FinalLogs) -> Violation | None:
        for (group, partition), acked in sorted(self.commits.items()):
            stored = logs.group_offsets.get((group, partition), -1)
            if stored < acked:
                return Violation(COMMITS_SURVIVE, f"group {group} partition {partition}: commit of {acked} "
                                 f"acknowledged, the coordinator answers {stored} after healing")
        return None

    def _transactions(self, logs: FinalLogs) -> Violation | None:
        visible = {value for records in logs.outputs_committed.values() for value in records.values()}
        for label, outputs in sorted(self.txn_outputs.items()):
            shown = sorted(v for _, v in outputs if v in visible)
            if self.outcome.get(label) is True and len(shown) < len(outputs):
                missing = sorted(v for _, v in outputs if v not in visible)
                return Violation(WHOLE, f"transaction {label} committed: {missing[0].decode()} never read")
            if self.outcome.get(label) is False and shown:
                return Violation(ABORTED, f"transaction {label} aborted: {shown[0].decode()} read")
            if shown and len(shown) < len(outputs):
                missing = sorted(v for _, v in outputs if v not in visible)
                return Violation(ABORTED, f"transaction {label}: {shown[0].decode()} read, {missing[0].decode()} not")
        return None

    def _reads(self, logs: FinalLogs) -> Violation | None:
        for (partition, offset), value in sorted(self.read_committed.items()):
            if logs.outputs_committed.get(partition, {}).get(offset) != value:
                return Violation(PAST_LSO, f"{value.decode()} read by read_committed at output partition "
                                 f"{partition} offset {offset}; at the end it is not committed there")
        return None

    def _exactly_once(self, logs: FinalLogs) -> Violation | None:
        copies: dict[tuple[int, int], bytes] = {}
        for partition, records in sorted(logs.outputs_committed.items()):
            for offset, value in sorted(records.items()):
                source = _source(value)
                if source in copies:
                    return Violation(EXACTLY_ONCE, f"input {source} copied twice: {copies[source].decode()} and "
                                     f"{value.decode()}")
                copies[source] = value
        for partition, records in sorted(logs.inputs.items()):
            if partition in logs.pending_offsets:
                continue  # its committed offset is unknown while a transaction holds it (judged by _ends)
            below = logs.copier_offsets.get(partition, 0)
            wanted = {(partition, offset) for offset in records if offset < below}
            copied = {source for source in copies if source[0] == partition}
            if wanted != copied:
                wrong = sorted(wanted ^ copied)[0]
                return Violation(EXACTLY_ONCE, f"input partition {partition}: committed offset {below}, record at "
                                 f"{wrong[1]} {'not ' if wrong in wanted else ''}copied")
        return None

    def _ends(self, logs: FinalLogs) -> Violation | None:
        if logs.open_transactions:
            return Violation(ENDS, f"transactional ids left open: {', '.join(logs.open_transactions)}")
        for partition, (stable, high_watermark) in sorted(logs.unstable.items()):
            return Violation(ENDS, f"output partition {partition}: last stable offset {stable} below the high "
                             f"watermark {high_watermark}")
        for partition in logs.pending_offsets:
            return Violation(ENDS, f"the copiers' committed offset of input partition {partition} is held by a "
                             f"transaction that never ended (UNSTABLE_OFFSET_COMMIT)")
        return None


    def _settles(self, logs: FinalLogs) -> Violation | None:
        if logs.unsettled_groups:
            return Violation(SETTLES, f"after healing: {', '.join(logs.unsettled_groups)}")
        return None


def idempotent_value(producer: int, n: int) -> bytes:
    return f"idem|{producer}|{n}".encode()


def copy_value(partition: int, offset: int, label: str) -> bytes:
    """The value a copier writes for the input record at ``offset`` of input ``partition``."""
    return f"{partition}|{offset}|{label}".encode()


def _producer_index(value: bytes) -> tuple[str, int]:
    """(producer, n) of ``idempotent_value(producer, n)``."""
    _, producer, n = value.decode().split("|")
    return producer, int(n)


def _label(value: bytes) -> str:
    return value.decode().split("|")[2]


def _source(value: bytes) -> tuple[int, int]:
    partition, offset, _ = value.decode().split("|")
    return int(partition), int(offset)
