"""The transaction coordinator: the transactional ids of the ``__transaction_state`` partitions
this broker leads (docs/protocol.md §19.5).

Each request is decided by ``machine`` on the id's committed state; a
``Write`` is committed to ``__transaction_state`` (acks -1) before the cache
changes or the client hears of it.  A committed decision (PrepareCommit,
PrepareAbort) starts a task that writes its markers through the
``TransactionMarkers`` seam, retrying the partitions that fail, and then
writes the Complete* state.  One task aborts expired transactions.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.txn_records import (TRANSACTION_STATE_TOPIC, TxnKey, TxnState, decode_record, encode_key,
                                        encode_value)
from trikafka.wire.metadata import BrokerAddress

from ...partition import ReadView
from ..context import KafkaContext, TransactionMarkers
from ..groups.store import read_records
from ..partition_loads import PartitionLoads
from . import machine
from .machine import Write
from .placement import transaction_partition, transaction_topic
from .state import TxnPartition

logger = logging.getLogger(__name__)

MARKER_RETRY_S = 1.0  # between two rounds of markers for the partitions that failed (§19.5.3)
MS_PER_S = 1000


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker leads."""

    def __init__(self, service: KafkaContext, markers: TransactionMarkers,
                 new_producer_id: Callable[[], Awaitable[int]]):
        self._service = service
        self._markers = markers
        self._new_producer_id = new_producer_id
        self.topic = transaction_topic(service)
        self.loads: PartitionLoads[TxnPartition] = PartitionLoads(service, TRANSACTION_STATE_TOPIC, self._load,
                                                                  on_loaded=self._resume)
        self._nursery: trio.Nursery | None = None
        self._completing: set[tuple[int, str]] = set()  # (partition, id) whose markers a task writes

    def start(self, nursery: trio.Nursery) -> None:
        """Loads, marker tasks and the timeout check run in ``nursery`` (the listener's)."""
        self._nursery = nursery
        self.loads.start(nursery)
        nursery.start_soon(self._abort_expired_periodically)

    # ----------------------------------------------------------------- placement and loading

    def on_role(self, topic: str, index: int, role: str) -> None:
        """The replica manager applied a state of ``topic``-``index`` here (§19.5.6)."""
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

    async def _load(self, index: int, view: ReadView) -> TxnPartition:
        part = TxnPartition(index, view.leader_epoch)
        for key, value, _, _ in await read_records(self._service, view, decode_record):
            part.apply(key, value)
        return part

    def _resume(self, part: TxnPartition) -> None:
        """After a load: finish what the previous coordinator decided (§19.5.6)."""
        if self._nursery is None:
            return
        for tid, write in part.rewrites_after_load(self._service.clock_ms()):
            self._nursery.start_soon(self._commit, part, tid, write)
        for tid in part.undecided_markers():
            self._start_completion(part, tid)

    # ----------------------------------------------------------------- writes

    async def _commit(self, part: TxnPartition, tid: str, write: Write) -> ErrorCode:
        """Write ``write`` for ``tid``; once committed apply it and, for a decision, start its markers.
        The answer the request gets: ``write.answer``, or the write's error."""
        part.writing.add(tid)
        try:
            written = await self.topic.write(part.index, [(encode_key(TxnKey(tid)), encode_value(write.value))])
        finally:
            part.writing.discard(tid)
        if isinstance(written, ErrorCode):
            return written
        part.apply(TxnKey(tid), write.value)
        if machine.needs_markers(write.value):
            self._start_completion(part, tid)
        return write.answer

    def _start_completion(self, part: TxnPartition, tid: str) -> None:
        if self._nursery is not None and (part.index, tid) not in self._completing:
            self._completing.add((part.index, tid))
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
                if await self._commit(part, tid, Write(machine.complete(value, self._service.clock_ms()))) \
                        == ErrorCode.none:
                    return
                await trio.sleep(MARKER_RETRY_S)
        finally:
            self._completing.discard((part.index, tid))

    async def _abort_expired_periodically(self) -> None:
        interval_s = self._service.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / MS_PER_S
        while True:
            await trio.sleep(interval_s)
            await self.abort_expired()

    async def abort_expired(self) -> int:
        """Abort every Ongoing transaction past its timeout, bumping its epoch (§19.5.3); how many."""
        aborted = 0
        now_ms = self._service.clock_ms()
        for part in self.loads.states():
            for tid, write in part.expired(now_ms):
                if await self._commit(part, tid, write) == ErrorCode.none:
                    aborted += 1
                    logger.info("transaction %s timed out: aborted, producer epoch now %d", tid,
                                write.value.producer_epoch)
        return aborted

    # ----------------------------------------------------------------- requests (§19.5.4)

    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        part = await self.partition_of(tid)
        if isinstance(part, ErrorCode):
            return part, -1, -1
        current = part.value(tid)
        fresh = await self._new_producer_id() if machine.needs_new_producer_id(current) else None
        outcome = machine.init_producer_id(current, tid in part.writing, timeout_ms, self._service.clock_ms(),
                                           fresh, expected, self._service.config.transaction_max_timeout_ms)
        if isinstance(outcome, ErrorCode):
            return outcome, -1, -1
        error = await self._commit(part, tid, outcome)
        if error != ErrorCode.none:
            return error, -1, -1
        return ErrorCode.none, outcome.value.producer_id, outcome.value.producer_epoch

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]]) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's ``__consumer_offsets`` partition)."""
        part = await self.partition_of(tid)
        if isinstance(part, ErrorCode):
            return part
        outcome = machine.add_partitions(part.value(tid), tid in part.writing, producer_id, producer_epoch,
                                         partitions, self._service.clock_ms())
        return outcome if isinstance(outcome, ErrorCode) else await self._commit(part, tid, outcome)

    async def end_transaction(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: the decision, answered once written; the markers follow (§19.5.3)."""
        part = await self.partition_of(tid)
        if isinstance(part, ErrorCode):
            return part
        outcome = machine.end_transaction(part.value(tid), tid in part.writing, producer_id, producer_epoch, commit,
                                          self._service.clock_ms())
        return outcome if isinstance(outcome, ErrorCode) else await self._commit(part, tid, outcome)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        """KIP-890 part 1 (§19.5.7): the ``TransactionVerifier`` the partition side calls."""
        part = await self.partition_of(transactional_id)
        if isinstance(part, ErrorCode):
            return part
        return part.verify(transactional_id, producer_id, producer_epoch, topic, partition)
