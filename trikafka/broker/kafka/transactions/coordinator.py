"""The transaction coordinator: the transactional ids of the ``__transaction_state`` partitions
this broker leads (docs/protocol.md §19.5).

Each request is decided by ``machine`` on the id's committed state; a
``Write`` is committed to ``__transaction_state`` (acks -1) before the cache
changes or the client hears of it.  A committed decision (PrepareCommit,
PrepareAbort) starts a task that writes its markers through the
``TransactionMarkers`` seam, retrying the partitions that fail, and then
writes the Complete* state.  One task aborts expired transactions.

A request the machine answers CONCURRENT_TRANSACTIONS while something under
way will change its id (a write of the id in flight, its markers being
written) waits for that change and is decided again, up to
``transaction.completion.wait.ms`` (§19.5.3); each id's change is one
``trio.Event`` here, set when a write of the id ends, when its completion task
ends, and when its partition is dropped.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import TRANSACTION_STATE_TOPIC
from trikafka.kafka.txn_records import TxnKey, TxnState, TxnValue, decode_record, encode_key, encode_value
from trikafka.wire.metadata import BrokerAddress

from ...config import BrokerConfig
from ...engine.engine import ACKS_ALL, ACKS_LEADER
from ...engine.partition import ReadView
from ..coordinator_seams import TransactionMarkers
from ..internal_topic import InternalTopic
from ..partition_loads import PartitionLoads
from . import machine
from .machine import Outcome, Write
from .placement import transaction_partition
from .state import TxnPartition

logger = logging.getLogger(__name__)

MARKER_RETRY_S = 1.0  # between two rounds of markers for the partitions that failed (§19.5.3)
MS_PER_S = 1000


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker leads."""

    def __init__(self, topic: InternalTopic, config: BrokerConfig, clock_ms: Callable[[], int],
                 markers: TransactionMarkers, new_producer_id: Callable[[], Awaitable[int]]):
        self.topic = topic  # __transaction_state: the coordinator's one way to its partitions
        self._config = config
        self._clock_ms = clock_ms
        self._markers = markers
        self._new_producer_id = new_producer_id
        self.loads: PartitionLoads[TxnPartition] = PartitionLoads(topic, self._load, on_loaded=self._resume,
                                                                  on_drop=self._dropped)
        self._nursery: trio.Nursery | None = None
        # (partition, id) -> the load whose completion task writes the id's markers: a task of an
        # earlier load of the partition does not stand in for the current one's (it stops, not completing).
        self._completing: dict[tuple[int, str], TxnPartition] = {}
        # (partition, id) -> set at the id's next change; only ids a request waits on have one.
        self._changes: dict[tuple[int, str], trio.Event] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Loads, marker tasks and the timeout check run in ``nursery`` (the listener's)."""
        self._nursery = nursery
        self.loads.start(nursery)
        nursery.start_soon(self._abort_expired_periodically)
        nursery.start_soon(self._remove_expired_ids_periodically)

    # ----------------------------------------------------------------- placement and loading

    def on_role(self, topic: str, index: int, role: str) -> None:
        """Replication applied a state of ``topic``-``index`` here (§19.5.6)."""
        if topic == TRANSACTION_STATE_TOPIC:
            self.loads.on_role(index, role)

    async def coordinator_of(self, transactional_id: str) -> BrokerAddress | ErrorCode:
        """FindCoordinator key type 1: the leader of the id's partition, creating
        ``__transaction_state`` on first need (§19.5.1)."""
        return await self.topic.coordinator_of(transactional_id)

    async def partition_of(self, transactional_id: str) -> TxnPartition | ErrorCode:
        """The loaded partition of ``transactional_id``, or the coordinator error it answers."""
        count = self.topic.partition_count()
        if count is None:
            return ErrorCode.coordinator_not_available
        return await self.loads.serve(transaction_partition(transactional_id, count))

    async def describe(self, transactional_id: str) -> TxnValue | ErrorCode:
        """DescribeTransactions (§19.5.4): the id's committed state, or the error it answers."""
        part = await self.partition_of(transactional_id)
        if isinstance(part, ErrorCode):
            return part
        value = part.value(transactional_id)
        return ErrorCode.transactional_id_not_found if value is None else value

    def listing(self) -> tuple[ErrorCode, list[tuple[str, TxnValue]]]:
        """ListTransactions (§19.5.4): the ids of the partitions loaded here, by id; nothing but
        COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
        if self.loads.any_loading():
            return ErrorCode.coordinator_load_in_progress, []
        return ErrorCode.none, sorted((tid, value) for part in self.loads.states() for tid, value in part.ids.items())

    async def _load(self, index: int, view: ReadView) -> TxnPartition:
        part = TxnPartition(index, view.leader_epoch)
        for key, value, _, _ in await self.topic.read(view, decode_record):
            part.apply(key, value)
        return part

    def _resume(self, part: TxnPartition) -> None:
        """After a load: finish what the previous coordinator decided (§19.5.6)."""
        if self._nursery is None:
            return
        for tid, write in part.rewrites_after_load(self._clock_ms()):
            self._nursery.start_soon(self._commit, part, tid, write)
        for tid in part.undecided_markers():
            self._start_completion(part, tid)

    # ----------------------------------------------------------------- writes

    async def _commit(self, part: TxnPartition, tid: str, write: Write) -> ErrorCode:
        """Write ``write`` for ``tid``; once committed apply it and, for a decision, start its markers.
        The answer the request gets: ``write.answer``, or the write's error."""
        error = await self._write(part, tid, write.value)
        if error != ErrorCode.none:
            return error
        if machine.needs_markers(write.value):
            self._start_completion(part, tid)
        return write.answer

    async def _write(self, part: TxnPartition, tid: str, value: TxnValue | None) -> ErrorCode:
        """Commit ``tid``'s record (None: a tombstone) with acks -1, then apply it to the cache; a
        Complete* is applied once appended (acks 1, §19.5.3): the id's next write commits it."""
        part.writing.add(tid)
        acks = ACKS_LEADER if machine.committed_by_next_write(value) else ACKS_ALL
        try:
            written = await self.topic.write(part.index, [(encode_key(TxnKey(tid)), encode_value(value))],
                                             acks=acks)
            if not isinstance(written, ErrorCode):
                part.apply(TxnKey(tid), value)
        finally:
            part.writing.discard(tid)
            self._changed(part.index, tid)
        return written if isinstance(written, ErrorCode) else ErrorCode.none

    def _start_completion(self, part: TxnPartition, tid: str) -> None:
        if self._nursery is not None and self._completing.get((part.index, tid)) is not part:
            self._completing[(part.index, tid)] = part
            self._nursery.start_soon(self._complete, part, tid)

    async def _complete(self, part: TxnPartition, tid: str) -> None:
        """Write the decision's markers until every partition has one, then Complete* (§19.5.3)."""
        try:
            while True:
                value = part.value(tid)
                if value is None or not machine.needs_markers(value) or self.loads.get(part.index) is not part:
                    return  # completed, or this broker no longer coordinates the partition
                remaining = list(value.partitions)
                while remaining:
                    errors = await self._markers.write_markers(
                        value.producer_id, value.producer_epoch, value.state == TxnState.PREPARE_COMMIT,
                        part.coordinator_epoch, remaining)
                    if ErrorCode.transaction_coordinator_fenced in errors.values():
                        logger.warning("transaction %s: a newer coordinator fenced its markers", tid)
                        return
                    remaining = [p for p in remaining if errors.get(p, ErrorCode.unknown_server_error)
                                 != ErrorCode.none]
                    if remaining:
                        if self.loads.get(part.index) is not part:
                            return
                        await trio.sleep(MARKER_RETRY_S)
                if await self._commit(part, tid, Write(machine.complete(value, self._clock_ms()))) \
                        == ErrorCode.none:
                    return
                await trio.sleep(MARKER_RETRY_S)
        finally:
            if self._completing.get((part.index, tid)) is part:
                del self._completing[(part.index, tid)]
            self._changed(part.index, tid)

    async def _abort_expired_periodically(self) -> None:
        interval_s = self._config.transaction_abort_timed_out_transaction_cleanup_interval_ms / MS_PER_S
        while True:
            await trio.sleep(interval_s)
            await self.abort_expired()

    async def _remove_expired_ids_periodically(self) -> None:
        config = self._config
        interval_s = config.transaction_remove_expired_transaction_cleanup_interval_ms / MS_PER_S
        while True:
            await trio.sleep(interval_s)
            await self.remove_expired_ids()

    async def remove_expired_ids(self) -> int:
        """Write a tombstone for every id at rest and unused for ``transactional.id.expiration.ms``
        (§19.5.3); how many were removed.  A later InitProducerId of the id starts it afresh."""
        removed = 0
        now_ms = self._clock_ms()
        expiration_ms = self._config.transactional_id_expiration_ms
        for part in self.loads.states():
            for tid in part.expired_ids(now_ms, expiration_ms):
                if await self._write(part, tid, None) == ErrorCode.none:
                    removed += 1
                    logger.info("transactional id %s unused for %d ms: removed", tid, expiration_ms)
        return removed

    async def abort_expired(self) -> int:
        """Abort every Ongoing transaction past its timeout, bumping its epoch (§19.5.3); how many."""
        aborted = 0
        now_ms = self._clock_ms()
        for part in self.loads.states():
            for tid, write in part.expired(now_ms):
                if await self._commit(part, tid, write) == ErrorCode.none:
                    aborted += 1
                    logger.info("transaction %s timed out: aborted, producer epoch now %d", tid,
                                write.value.producer_epoch)
        return aborted

    # ----------------------------------------------------------------- waiting for an id (§19.5.3)

    def _changed(self, index: int, tid: str) -> None:
        """Wake the requests waiting on ``tid``: a write of it ended, or its completion task did."""
        event = self._changes.pop((index, tid), None)
        if event is not None:
            event.set()

    def _dropped(self, part: TxnPartition) -> None:
        """This broker no longer coordinates ``part``: its waiting requests are decided again (and
        answer what a request arriving now answers, NOT_COORDINATOR or a load's error)."""
        for key in [key for key in self._changes if key[0] == part.index]:
            self._changed(*key)

    def _under_way(self, part: TxnPartition, tid: str) -> bool:
        """Whether something here will change ``tid``: a write of it in flight, or its markers."""
        return tid in part.writing or self._completing.get((part.index, tid)) is part

    def _wait_deadline(self) -> float:
        """When a request arriving now stops waiting for its id's changes (§19.5.3), in Trio time."""
        return trio.current_time() + self._config.transaction_completion_wait_ms / MS_PER_S

    async def _decide(self, tid: str, decide: Callable[[TxnPartition], Awaitable[Outcome]],
                      deadline: float | None = None) -> tuple[TxnPartition, Outcome] | ErrorCode:
        """The id's loaded partition and ``decide``'s outcome on it; while that is CONCURRENT_TRANSACTIONS
        and something under way will change the id, wait for the change and decide again, up to
        ``deadline`` (default: ``transaction.completion.wait.ms`` from now, §19.5.3).  An ErrorCode: the
        partition's error."""
        if deadline is None:
            deadline = self._wait_deadline()
        while True:
            part = await self.partition_of(tid)
            if isinstance(part, ErrorCode):
                return part
            outcome = await decide(part)
            if not machine.waits(outcome, self._under_way(part, tid)):
                return part, outcome
            change = self._changes.setdefault((part.index, tid), trio.Event())
            with trio.move_on_at(deadline):
                await change.wait()
                continue
            return part, outcome

    # ----------------------------------------------------------------- requests (§19.5.4)

    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch).  Fencing an Ongoing
        transaction writes its abort and then waits for it like any change under way (§19.5.3)."""
        fresh: int | None = None
        deadline = self._wait_deadline()

        async def decide(part: TxnPartition) -> Outcome:
            nonlocal fresh
            if fresh is None and machine.needs_new_producer_id(part.value(tid)):
                fresh = await self._new_producer_id()
            return machine.init_producer_id(part.value(tid), tid in part.writing, timeout_ms,
                                            self._clock_ms(), fresh, expected,
                                            self._config.transaction_max_timeout_ms)

        while True:
            decided = await self._decide(tid, decide, deadline)
            if isinstance(decided, ErrorCode):
                return decided, -1, -1
            part, outcome = decided
            if isinstance(outcome, ErrorCode):
                return outcome, -1, -1
            error = await self._commit(part, tid, outcome)
            if machine.fenced(outcome, error) and trio.current_time() < deadline:
                continue  # the fence's abort is now under way: decided again once it completes
            if error != ErrorCode.none:
                return error, -1, -1
            return ErrorCode.none, outcome.value.producer_id, outcome.value.producer_epoch

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]]) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's ``__consumer_offsets`` partition)."""
        asked = list(partitions)

        async def decide(part: TxnPartition) -> Outcome:
            return machine.add_partitions(part.value(tid), tid in part.writing, producer_id, producer_epoch,
                                          asked, self._clock_ms())

        return await self._answer(tid, decide)

    async def end_transaction(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: the decision, answered once written; the markers follow (§19.5.3)."""
        async def decide(part: TxnPartition) -> Outcome:
            return machine.end_transaction(part.value(tid), tid in part.writing, producer_id, producer_epoch,
                                           commit, self._clock_ms())

        return await self._answer(tid, decide)

    async def _answer(self, tid: str, decide: Callable[[TxnPartition], Awaitable[Outcome]]) -> ErrorCode:
        """The error a request answers: ``decide``'s (after ``_decide``'s wait), or its write's."""
        decided = await self._decide(tid, decide)
        if isinstance(decided, ErrorCode):
            return decided
        part, outcome = decided
        return outcome if isinstance(outcome, ErrorCode) else await self._commit(part, tid, outcome)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        """KIP-890 part 1 (§19.5.7): the ``TransactionVerifier`` the partition side calls."""
        part = await self.partition_of(transactional_id)
        if isinstance(part, ErrorCode):
            return part
        return part.verify(transactional_id, producer_id, producer_epoch, topic, partition)
