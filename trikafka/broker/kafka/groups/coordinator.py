"""Which ``__consumer_offsets`` partitions this broker coordinates, and their loading
(docs/protocol.md §17.3).

A group request first asks ``partition_of``: the partition's groups when
this broker leads it and has loaded it at the current leader epoch; else the
error the request answers.  Leadership is read from the partition itself
(``read_view``) at every request, so a partition this broker stopped leading
is dropped at once, and one it leads again (a new epoch) is loaded again
before it serves: nothing of a group is kept that its partition does not say.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.group_records import OFFSETS_TOPIC, RecordKey, RecordValue
from trikafka.log.errors import OffsetOutOfRangeError
from trikafka.wire.errors import ErrorCode as EngineError
from trikafka.wire.metadata import BrokerAddress

from ...partition import Refused
from ..context import KafkaContext
from .placement import OffsetsTopic, group_partition
from .state import OffsetsPartition
from .store import GroupStore

logger = logging.getLogger(__name__)

# How long a request waits for a load it started before answering COORDINATOR_LOAD_IN_PROGRESS.
LOAD_WAIT_S = 0.5

# What a partition this broker cannot serve answers (§17.3).
_NOT_SERVED: dict[EngineError, ErrorCode] = {
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_coordinator,
    EngineError.NOT_REPLICA: ErrorCode.not_coordinator,
}


@dataclass(slots=True)
class _Loaded:
    leader_epoch: int
    groups: OffsetsPartition


class GroupCoordinator:
    """The groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(self, service: KafkaContext):
        self._service = service
        self.topic = OffsetsTopic(service)
        self.store = GroupStore(service)
        self._loaded: dict[int, _Loaded] = {}
        self._loading: dict[int, trio.Event] = {}
        self._failed: set[tuple[int, int]] = set()  # (partition, epoch) whose records did not decode
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Loads run in ``nursery`` (the listener's), so a client that gives up does not cancel one."""
        self._nursery = nursery

    async def coordinator_of(self, group_id: str) -> BrokerAddress | ErrorCode:
        """The Kafka address of ``group_id``'s coordinator, creating ``__consumer_offsets`` on first
        need; COORDINATOR_NOT_AVAILABLE while there is none (§17.1, §17.3)."""
        count = await self.topic.ensure()
        address = None if count is None else self.topic.coordinator(group_partition(group_id, count))
        return ErrorCode.coordinator_not_available if address is None else address

    def partition_index(self, group_id: str) -> int | None:
        count = self.topic.partition_count()
        return None if count is None else group_partition(group_id, count)

    async def partition_of(self, group_id: str) -> OffsetsPartition | ErrorCode:
        """The loaded groups of ``group_id``'s partition, or NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE (§17.3)."""
        index = self.partition_index(group_id)
        if index is None:
            return ErrorCode.coordinator_not_available
        found = self._current(index)
        if not isinstance(found, int):
            return found
        epoch = found
        if (index, epoch) in self._failed:
            return ErrorCode.coordinator_not_available
        loading = self._loading.get(index)
        if loading is None:
            loading = self._loading[index] = trio.Event()
            if self._nursery is None:
                await self._load(index, epoch, loading)
            else:
                self._nursery.start_soon(self._load, index, epoch, loading)
        with trio.move_on_after(LOAD_WAIT_S):
            await loading.wait()
        found = self._current(index)
        return ErrorCode.coordinator_load_in_progress if isinstance(found, int) else found

    def _current(self, index: int) -> OffsetsPartition | ErrorCode | int:
        """The loaded groups; an error; or the leader epoch a load must be at."""
        try:
            view = self._service.handler.partition(OFFSETS_TOPIC, index).read_view()
        except Refused as exc:
            self.drop(index)
            return _NOT_SERVED.get(exc.error, ErrorCode.coordinator_not_available)
        loaded = self._loaded.get(index)
        if loaded is not None and loaded.leader_epoch == view.leader_epoch:
            return loaded.groups
        if loaded is not None:
            self.drop(index)
        return view.leader_epoch

    def drop(self, index: int) -> None:
        """Forget partition ``index``'s groups: this broker no longer leads it (§17.3)."""
        if self._loaded.pop(index, None) is not None:
            logger.info("%s-%d: no longer its coordinator, its groups dropped", OFFSETS_TOPIC, index)

    async def _load(self, index: int, epoch: int, done: trio.Event) -> None:
        try:
            view = self._service.handler.partition(OFFSETS_TOPIC, index).read_view()
            if view.leader_epoch != epoch:
                return
            started_s = trio.current_time()
            try:
                records = await self.store.read(view)
            except (KafkaCodecError, OffsetOutOfRangeError) as exc:
                logger.error("%s-%d: load stopped: %s; its groups answer COORDINATOR_NOT_AVAILABLE until a "
                             "restart", OFFSETS_TOPIC, index, exc)
                self._failed.add((index, epoch))
                return
            groups = OffsetsPartition(index)
            for key, value, offset in records:
                groups.apply(key, value, offset)
            try:
                current = self._service.handler.partition(OFFSETS_TOPIC, index).read_view().leader_epoch
            except Refused:
                return
            if current == epoch:
                self._loaded[index] = _Loaded(epoch, groups)
                logger.info("%s-%d loaded at leader epoch %d: %d records, %d groups, %.3f s", OFFSETS_TOPIC, index,
                            epoch, len(records), len(groups.groups), trio.current_time() - started_s)
        except Refused:
            return
        finally:
            self._loading.pop(index, None)
            done.set()

    async def write(self, groups: OffsetsPartition,
                    records: Sequence[tuple[RecordKey, RecordValue | None]]) -> ErrorCode:
        """Write ``records`` to the partition of ``groups`` and, once committed, apply them (§17.3)."""
        written = await self.store.write(groups.index, records)
        if isinstance(written, ErrorCode):
            return written
        for i, (key, value) in enumerate(records):
            groups.apply(key, value, written + i)
        return ErrorCode.none
