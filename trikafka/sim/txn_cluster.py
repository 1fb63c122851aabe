"""The broker side of the transactions world (docs/simulation.md, "Transactions"): data partitions and
the transaction coordinator, each a small class over the real sans-I/O parts.

``SimPartition`` plays one Kafka-format partition's leader as ``broker/kafka/produce.py`` and
``log/log.py`` glue it: a transactional batch is verified with its coordinator first (KIP-890,
docs/protocol.md §19.5.7), then checked against the real ``ProducerStates`` (§19.3: duplicates,
sequence gaps, fencing), given its offsets by the real ``assign_offsets`` and recorded; acks -1 is
answered once the in-sync replicas have it.  A read is ``broker/kafka/fetch.py``'s: up to the LSO
for read_committed with the aborted list of ``aborted_between``, which the reader's real
``committed_batches`` applies.  A leader failover keeps the replicated prefix and folds the
producer state again from those batches, as a recovering log does (``ProducerStates.fold``).

``SimTxnCoordinator`` mirrors ``broker/kafka/transactions/coordinator.py``: each request is decided
by the real ``machine`` on the real ``TxnPartition``; a ``Write`` is appended as real
``__transaction_state`` records to a ``ReplicatedLog`` and applied only once committed; a committed
PrepareCommit/PrepareAbort starts its markers (real ``build_marker`` batches, as
``broker/kafka/markers.py`` writes them) and then the Complete* write.  A request the machine answers
CONCURRENT_TRANSACTIONS while a write of its id or its markers are under way waits for their end and
is decided again, up to ``COMPLETION_WAIT_MS`` (§19.5.3).  A coordinator built after a failover loads
the committed records alone and resumes what they left undecided (§19.5.6); the requests that waited
on the one that died are never answered, as a killed broker's are not.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.errors import BATCH_TO_KAFKA
from trikafka.broker.kafka.transactions import machine
from trikafka.broker.kafka.transactions.machine import Outcome, Write
from trikafka.broker.kafka.transactions.state import TxnPartition
from trikafka.kafka.batch import CONTROL, BatchError, BatchHeader, assign_offsets, walk_headers
from trikafka.kafka.markers import build_marker
from trikafka.kafka.read_committed import committed_batches
from trikafka.kafka.records import Record, decode_batches
from trikafka.kafka.txn_records import TxnKey, TxnState, TxnValue, decode_record, encode_key, encode_value
from trikafka.log.producer_state import ProducerStates, SegmentProducers
from trikafka.log.verification_guard import VerificationGuard

from .determinism import Trace
from .kafka_coordinator import ReplicatedLog

Acked = Callable[[ErrorCode, int], None]  # (error, base offset) once the in-sync replicas have the batch
Answer = Callable[[ErrorCode], None]
MARKER_RETRY_MS = 300  # between two rounds of markers for the partitions that failed (MARKER_RETRY_S)
EXPIRE_EVERY_MS = 500  # transaction.abort.timed.out.transaction.cleanup.interval.ms
# transaction.completion.wait.ms: below the clients' request timeout, as the real 5 s is below theirs.
COMPLETION_WAIT_MS = 1000


class TxnClusterView(Protocol):
    """What partitions and the coordinator see of the world (``txn_world.TransactionsWorld``)."""

    now_ms: int
    trace: Trace

    def at(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None:
        """Call ``callback(*args)`` at ``when_ms`` (Any: each callback's own arguments)."""

    def replication_delay_ms(self) -> int: ...
    def wall_ms(self) -> int: ...
    def new_producer_id(self) -> int: ...
    def decided(self, transactional_id: str, value: TxnValue) -> None: ...
    def write_marker(self, topic_partition: tuple[str, int], value: TxnValue, coordinator_epoch: int,
                     answer: Answer) -> None: ...


class SimPartition:
    """One partition's leader and its in-sync replicas (see the module docstring)."""

    def __init__(self, world: TxnClusterView, name: tuple[str, int]):
        self.world, self.name = world, name
        self.batches: list[bytes] = []  # the leader's log, one batch each, offsets assigned
        self.replicated = 0  # how many of ``batches`` every in-sync replica has
        self.leader_epoch = 0
        self.electing = False  # no leader until the election ends: NOT_LEADER_OR_FOLLOWER
        self.states = ProducerStates()
        self._waiting: list[tuple[int, Acked, int]] = []  # (batches needed, its answer, base offset)
        self._last_commit_ms = 0
        self.duplicates = 0  # retries the producer state recognised

    @property
    def log_end(self) -> int:
        return _next_offset(self.batches[-1]) if self.batches else 0

    @property
    def high_watermark(self) -> int:
        return _next_offset(self.batches[self.replicated - 1]) if self.replicated else 0

    def append(self, data: bytes, acked: Acked, guard: VerificationGuard | None = None) -> None:
        """The leader's append of produced batches or a marker (§19.3); ``acked`` once replicated.
        ``guard``: the verification guard a batch opening a transaction presents (§19.5.7)."""
        if self.electing:
            acked(ErrorCode.not_leader_or_follower, -1)
            return
        headers = list(walk_headers(data))
        try:
            duplicate = self.states.check(headers, guard)
        except BatchError as exc:
            acked(BATCH_TO_KAFKA[exc.kind], -1)
            return
        if duplicate is not None:  # answered as written, once the copy in the log is replicated
            self.duplicates += 1
            where = next(i for i, b in enumerate(self.batches) if _base_offset(b) == duplicate)
            self._when_replicated(where + 1, acked, duplicate)
            return
        buffer = bytearray(data)
        base = self.log_end
        assign_offsets(buffer, headers, base, self.leader_epoch, None)
        self.states.record(list(walk_headers(buffer)), buffer)
        self.batches.append(bytes(buffer))
        self._when_replicated(len(self.batches), acked, base)
        epoch = self.leader_epoch
        self._last_commit_ms = max(self._last_commit_ms, self.world.now_ms + self.world.replication_delay_ms())
        self.world.at(self._last_commit_ms, self._replicate, len(self.batches), epoch)

    def _when_replicated(self, count: int, acked: Acked, base: int) -> None:
        if count <= self.replicated:
            acked(ErrorCode.none, base)
        else:
            self._waiting.append((count, acked, base))

    def _replicate(self, count: int, epoch: int) -> None:
        if epoch != self.leader_epoch:
            return  # the leader that appended it crashed first
        self.replicated = max(self.replicated, count)
        done = [w for w in self._waiting if w[0] <= self.replicated]
        self._waiting = [w for w in self._waiting if w[0] > self.replicated]
        for _, acked, base in done:
            acked(ErrorCode.none, base)

    def crash_leader(self) -> int:
        """The leader dies: an in-sync replica leads with the replicated prefix, its producer state
        folded from its own batches; the batches lost."""
        lost = len(self.batches) - self.replicated
        del self.batches[self.replicated:]
        waiting, self._waiting = self._waiting, []
        for _, acked, _base in waiting:  # the acks -1 waits end with the leadership
            acked(ErrorCode.not_leader_or_follower, -1)
        self.leader_epoch += 1
        segment = SegmentProducers()
        for batch in self.batches:
            for header in walk_headers(batch):
                segment.add(header, batch)
        self.states = ProducerStates.fold([segment])
        return lost

    def read(self, offset: int, committed: bool) -> tuple[list[tuple[int, bytes]], int]:
        """A Fetch from ``offset``: the (offset, value) records delivered and the next offset to read.
        read_committed reads below the LSO and drops aborted transactions (§19.6, §19.7)."""
        hw = self.high_watermark
        visible = self.states.last_stable_offset(hw) if committed else hw
        chosen = [b for b in self.batches[:self.replicated] if _base_offset(b) >= offset and _next_offset(b) <= visible]
        if not chosen:
            return [], offset
        decoded: list[tuple[BatchHeader, list[Record]]] = [d for b in chosen for d in decode_batches(b)]
        if committed:
            aborted = [(a.producer_id, a.first_offset) for a in self.states.aborted_between(offset, visible)]
            decoded = list(committed_batches(decoded, aborted))
        records = [(r.offset, r.value or b"") for header, rs in decoded if not header.attributes & CONTROL for r in rs]
        return records, _next_offset(chosen[-1])


def _base_offset(batch: bytes) -> int:
    return next(walk_headers(batch)).base_offset


def _next_offset(batch: bytes) -> int:
    return next(walk_headers(batch)).next_offset


class SimTxnCoordinator:
    """One broker's transaction coordinator of the ``__transaction_state`` partition, from its load to
    its broker's crash (see the module docstring)."""

    def __init__(self, world: TxnClusterView, broker: int, log: ReplicatedLog):
        self.world, self.broker, self.log = world, broker, log
        self.part = TxnPartition(0, log.leader_epoch)
        self.loaded = False
        self.alive = True
        self._completing: set[str] = set()
        self._waiting: dict[str, list[Callable[[], None]]] = {}  # id -> the requests deciding again at its change

    def load(self) -> int:
        """Apply the committed records, then finish what they left undecided (§19.5.6)."""
        entries = self.log.committed_entries()
        for key, value in entries:
            self.part.apply(*decode_record(key, value))
        self.loaded = True
        for tid, write in self.part.rewrites_after_load(self.world.wall_ms()):
            self._commit(tid, write, _ignore)
        for tid in self.part.undecided_markers():
            self._start_completion(tid)
        self.world.at(self.world.now_ms + EXPIRE_EVERY_MS, self._expire)
        return len(entries)

    # ----------------------------------------------------------------- writes

    def _commit(self, tid: str, write: Write, answer: Answer) -> None:
        """Append ``write``; once committed apply it, start a decision's markers, answer (coordinator._commit)."""
        self.part.writing.add(tid)

        def written(_first: int) -> None:
            self.part.writing.discard(tid)
            if not self.alive:
                return
            self.part.apply(TxnKey(tid), write.value)
            self.world.decided(tid, write.value)
            if machine.needs_markers(write.value):
                self._start_completion(tid)
            answer(write.answer)
            self._changed(tid)

        self.log.append_encoded([(encode_key(TxnKey(tid)), encode_value(write.value))], self.world, written)

    def send_markers(self, value: TxnValue, partitions: list[tuple[str, int]],
                     done: Callable[[list[tuple[str, int]]], None]) -> None:
        """One round of WriteTxnMarkers for ``partitions``; ``done`` with those that failed."""
        failed: list[tuple[str, int]] = []
        remaining = set(partitions)
        if not remaining:
            done([])
            return
        for name in partitions:
            def answered(error: ErrorCode, name: tuple[str, int] = name) -> None:
                remaining.discard(name)
                if error != ErrorCode.none:
                    failed.append(name)
                if not remaining:
                    done(sorted(failed))

            self.world.write_marker(name, value, self.part.coordinator_epoch, answered)

    def _start_completion(self, tid: str) -> None:
        if tid not in self._completing:
            self._completing.add(tid)
            self._complete(tid, None)

    def _complete(self, tid: str, remaining: list[tuple[str, int]] | None) -> None:
        """Markers until every partition has one, then Complete* (coordinator._complete)."""
        value = self.part.value(tid)
        if value is None or not machine.needs_markers(value) or not self.alive:
            self._completing.discard(tid)
            self._changed(tid)
            return
        todo = list(value.partitions) if remaining is None else remaining

        def done(failed: list[tuple[str, int]]) -> None:
            if not self.alive:
                return
            if failed:
                self.world.at(self.world.now_ms + MARKER_RETRY_MS, self._complete, tid, failed)
                return
            self._completing.discard(tid)
            self._commit(tid, Write(machine.complete(value, self.world.wall_ms())), _ignore)

        self.send_markers(value, todo, done)

    def _expire(self) -> None:
        if not self.alive:
            return
        for tid, write in self.part.expired(self.world.wall_ms()):
            self.world.trace.add(f"coordinator {self.broker}: transaction {tid} timed out, aborting at epoch "
                                 f"{write.value.producer_epoch}")
            self._commit(tid, write, _ignore)
        self.world.at(self.world.now_ms + EXPIRE_EVERY_MS, self._expire)

    # ----------------------------------------------------------------- waiting for an id (§19.5.3)

    def _changed(self, tid: str) -> None:
        """A write of ``tid`` or its completion ended: its waiting requests are decided again."""
        for attempt in self._waiting.pop(tid, []):
            attempt()

    def _decide(self, tid: str, decide: Callable[[], Outcome], act: Callable[[Outcome], None],
                deadline_ms: int | None = None) -> None:
        """``act`` on ``decide``'s outcome, once it is not a CONCURRENT_TRANSACTIONS that a write or the
        markers under way may change, or once ``deadline_ms`` (default: ``COMPLETION_WAIT_MS`` from now)
        has passed (coordinator._decide)."""
        if deadline_ms is None:
            deadline_ms = self.world.now_ms + COMPLETION_WAIT_MS
        answered = False

        def attempt() -> None:
            nonlocal answered
            if answered or not self.alive:
                return
            outcome = decide()
            if machine.waits(outcome, tid in self.part.writing or tid in self._completing) \
                    and self.world.now_ms < deadline_ms:
                self._waiting.setdefault(tid, []).append(attempt)
                return
            answered = True
            act(outcome)

        attempt()
        if not answered:
            self.world.at(deadline_ms, attempt)

    # ----------------------------------------------------------------- requests (§19.5.4)

    def init_producer_id(self, tid: str, timeout_ms: int, reply: Callable[[ErrorCode, int, int], None]) -> None:
        fresh: int | None = None

        def decide() -> Outcome:
            nonlocal fresh
            current = self.part.value(tid)
            if fresh is None and machine.needs_new_producer_id(current):
                fresh = self.world.new_producer_id()
            return machine.init_producer_id(current, tid in self.part.writing, timeout_ms, self.world.wall_ms(),
                                            fresh)

        deadline_ms = self.world.now_ms + COMPLETION_WAIT_MS

        def act(outcome: Outcome) -> None:
            if isinstance(outcome, ErrorCode):
                reply(outcome, -1, -1)
                return

            def committed(error: ErrorCode) -> None:
                if machine.fenced(outcome, error) and self.world.now_ms < deadline_ms:
                    self._decide(tid, decide, act, deadline_ms)  # the fence's abort is under way
                elif error == ErrorCode.none:
                    reply(error, outcome.value.producer_id, outcome.value.producer_epoch)
                else:
                    reply(error, -1, -1)

            self._commit(tid, outcome, committed)

        self._decide(tid, decide, act, deadline_ms)

    def add_partitions(self, tid: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]],
                       reply: Answer) -> None:
        self._decide(tid, lambda: machine.add_partitions(self.part.value(tid), tid in self.part.writing, producer_id,
                                                         producer_epoch, partitions, self.world.wall_ms()),
                     lambda outcome: self._act(tid, outcome, reply))

    def end_transaction(self, tid: str, producer_id: int, producer_epoch: int, commit: bool, reply: Answer) -> None:
        self._decide(tid, lambda: machine.end_transaction(self.part.value(tid), tid in self.part.writing, producer_id,
                                                          producer_epoch, commit, self.world.wall_ms()),
                     lambda outcome: self._act(tid, outcome, reply))

    def _act(self, tid: str, outcome: Outcome, reply: Answer) -> None:
        """Answer an error at once, or commit a write and answer once it is committed."""
        if isinstance(outcome, ErrorCode):
            reply(outcome)
        else:
            self._commit(tid, outcome, reply)

    def verify(self, tid: str, producer_id: int, producer_epoch: int, topic_partition: tuple[str, int]) -> ErrorCode:
        """KIP-890 part 1 (§19.5.7), as the partition side asks it before a transactional append."""
        return self.part.verify(tid, producer_id, producer_epoch, *topic_partition)


def marker_batch(value: TxnValue, coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """The marker a decided ``value`` writes on each of its partitions (§19.6)."""
    return build_marker(value.producer_id, value.producer_epoch, value.state == TxnState.PREPARE_COMMIT,
                        coordinator_epoch, timestamp_ms)


def _ignore(_error: ErrorCode) -> None:
    return None
