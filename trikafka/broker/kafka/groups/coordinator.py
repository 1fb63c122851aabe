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
from trikafka.kafka.group_records import OFFSETS_TOPIC, GroupKey, GroupValue, OffsetKey, RecordKey, RecordValue
from trikafka.log.errors import OffsetOutOfRangeError
from trikafka.wire.errors import ErrorCode as EngineError
from trikafka.wire.metadata import BrokerAddress

from ...partition import Refused
from ..context import KafkaContext
from .group import GroupSettings, GroupState
from .membership import Membership
from .placement import group_partition, offsets_topic
from .state import OffsetsPartition
from .store import NO_PRODUCER, GroupStore, LoadedMarker

logger = logging.getLogger(__name__)

# How long a request waits for a load it started before answering COORDINATOR_LOAD_IN_PROGRESS.
LOAD_WAIT_S = 0.5
# How often Empty groups' offsets are checked against offsets.retention.minutes (Kafka's
# offsets.retention.check.interval.ms, §17.5).
RETENTION_CHECK_INTERVAL_S = 600.0
MS_PER_MINUTE = 60_000

# What a partition this broker cannot serve answers (§17.3).
_NOT_SERVED: dict[EngineError, ErrorCode] = {
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_coordinator,
    EngineError.NOT_REPLICA: ErrorCode.not_coordinator,
}


@dataclass(frozen=True, slots=True)
class _LoadAt:
    """A partition this broker leads and must load, at this leader epoch, before serving it."""

    leader_epoch: int


@dataclass(slots=True)
class _Loaded:
    leader_epoch: int
    groups: OffsetsPartition


class GroupCoordinator:
    """The groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(self, service: KafkaContext):
        self._service = service
        self.topic = offsets_topic(service)
        self.store = GroupStore(service, self.topic)
        self._loaded: dict[int, _Loaded] = {}
        self._loading: dict[int, trio.Event] = {}
        self._clashes_logged: set[str] = set()
        self._failed: set[tuple[int, int]] = set()  # (partition, epoch) whose records did not decode
        # Markers (producer id, commit, offset) that reached a partition while it was loading (§19.5.4).
        self._markers_while_loading: dict[int, list[tuple[int, bool, int]]] = {}
        self._nursery: trio.Nursery | None = None
        config = service.config
        self.settings = GroupSettings(config.group_initial_rebalance_delay_ms, config.group_min_session_timeout_ms,
                                      config.group_max_session_timeout_ms)
        self.membership = Membership(self._write_metadata, self.loaded, service.clock_ms)

    def start(self, nursery: trio.Nursery) -> None:
        """Loads and timers run in ``nursery`` (the listener's), so a client that gives up cancels neither."""
        self._nursery = nursery
        self.membership.start(nursery)
        nursery.start_soon(self._expire_periodically)

    async def _expire_periodically(self) -> None:
        while True:
            await trio.sleep(RETENTION_CHECK_INTERVAL_S)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Write the tombstones of Empty groups' offsets older than ``offsets.retention.minutes``, and of
        a group whose last offset goes (§17.5); the number of offsets removed."""
        retention_ms = self._service.config.offsets_retention_minutes * MS_PER_MINUTE
        removed = 0
        for groups in self.loaded():
            for group in list(groups.groups.values()):
                expired = group.expired_offsets(self._service.clock_ms(), retention_ms)
                if not expired:
                    continue
                records: list[tuple[RecordKey, RecordValue | None]] = [
                    (OffsetKey(group.group_id, topic, partition), None) for topic, partition in expired]
                if len(expired) == len(group.offsets) and group.metadata is not None:
                    records.append((GroupKey(group.group_id), None))
                if await self.write(groups, records) == ErrorCode.none:
                    removed += len(expired)
                    logger.info("group %s: %d offsets expired", group.group_id, len(expired))
        return removed

    def states(self) -> dict[str, int]:
        """How many groups this broker coordinates, by state (§17.6)."""
        counts = {state.value: 0 for state in GroupState}
        for groups in self.loaded():
            for group in groups.groups.values():
                counts[group.state.value] += 1
        return counts

    @property
    def rebalances(self) -> int:
        """Rebalances completed since the broker started (§17.6)."""
        return self.membership.rebalances

    def loaded(self) -> list[OffsetsPartition]:
        """The partitions whose groups this broker serves now."""
        return [loaded.groups for loaded in self._loaded.values()]

    async def coordinator_of(self, group_id: str) -> BrokerAddress | ErrorCode:
        """The Kafka address of ``group_id``'s coordinator, creating ``__consumer_offsets`` on first
        need; COORDINATOR_NOT_AVAILABLE while there is none (§17.1, §17.3)."""
        return await self.topic.coordinator_of(group_id)

    async def clash(self, group_id: str) -> str | None:
        """Why ``group_id`` may not be a Kafka group here: it has 0.7 consumers registered in
        ZooKeeper (§17.7); None when it may."""
        registry = self._service.registry
        if registry is None:
            return None
        if not await registry.has_07_consumers(group_id):
            return None
        message = f"group {group_id} has 0.7 consumers registered in ZooKeeper"
        if group_id not in self._clashes_logged:
            self._clashes_logged.add(group_id)
            logger.warning("JoinGroup refused: %s (docs/protocol.md §17.7)", message)
        return message

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
        if not isinstance(found, _LoadAt):
            return found
        epoch = found.leader_epoch
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
        return ErrorCode.coordinator_load_in_progress if isinstance(found, _LoadAt) else found

    def _current(self, index: int) -> OffsetsPartition | ErrorCode | _LoadAt:
        """The loaded groups; an error; or the leader epoch a load must be at."""
        try:
            view = self._service.handler.directory.partition(OFFSETS_TOPIC, index).read_view()
        except Refused as exc:
            self.drop(index)
            return _NOT_SERVED.get(exc.error, ErrorCode.coordinator_not_available)
        loaded = self._loaded.get(index)
        if loaded is not None and loaded.leader_epoch == view.leader_epoch:
            return loaded.groups
        if loaded is not None:
            self.drop(index)
        return _LoadAt(view.leader_epoch)

    def on_role(self, topic: str, index: int, role: str) -> None:
        """The replica manager applied a state of ``topic``-``index`` here: a ``__consumer_offsets``
        partition this broker now leads is loaded at once, one it no longer leads dropped (§17.3)."""
        if topic != OFFSETS_TOPIC:
            return
        if role != "leader":
            self.drop(index)
            return
        found = self._current(index)
        if isinstance(found, _LoadAt) and index not in self._loading and self._nursery is not None:
            done = self._loading[index] = trio.Event()
            self._nursery.start_soon(self._load, index, found.leader_epoch, done)

    def drop(self, index: int) -> None:
        """Forget partition ``index``'s groups: this broker no longer leads it (§17.3)."""
        dropped = self._loaded.pop(index, None)
        if dropped is not None:
            self.membership.drop(dropped.groups)
            logger.info("%s-%d: no longer its coordinator, its groups dropped", OFFSETS_TOPIC, index)

    async def _load(self, index: int, epoch: int, done: trio.Event) -> None:
        try:
            view = self._service.handler.directory.partition(OFFSETS_TOPIC, index).read_view()
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
            groups = OffsetsPartition(index, self.settings)
            for item in records:
                if isinstance(item, LoadedMarker):
                    groups.on_marker(item.producer_id, item.commit)
                elif item.producer_id != NO_PRODUCER:
                    groups.apply_transactional(item.producer_id, item.key, item.value, item.log_offset)
                else:
                    groups.apply(item.key, item.value, item.log_offset)
            # A marker appended after the read ended is in no record read: apply it now.
            last_read = max((item.log_offset for item in records), default=-1)
            for producer_id, commit, offset in self._markers_while_loading.pop(index, []):
                if offset > last_read:
                    groups.on_marker(producer_id, commit)
            groups.activate(self.membership.now_ms())
            try:
                current = self._service.handler.directory.partition(OFFSETS_TOPIC, index).read_view().leader_epoch
            except Refused:
                return
            if current == epoch:
                self._loaded[index] = _Loaded(epoch, groups)
                self.membership.poke()
                logger.info("%s-%d loaded at leader epoch %d: %d records, %d groups, %.3f s", OFFSETS_TOPIC, index,
                            epoch, len(records), len(groups.groups), trio.current_time() - started_s)
        except Refused:
            return
        finally:
            self._loading.pop(index, None)
            self._markers_while_loading.pop(index, None)
            done.set()

    def on_marker(self, partition: int, producer_id: int, commit: bool, offset: int) -> None:
        """The partition side appended ``producer_id``'s COMMIT (``commit``) or ABORT marker at
        ``offset`` to ``__consumer_offsets`` partition ``partition`` (§19.5.4): its pending
        transactional offsets there become committed, or are dropped.  A partition not loaded here
        needs nothing: its load replays the marker from the log."""
        loaded = self._loaded.get(partition)
        if loaded is None:
            if partition in self._loading:  # the load may have read the log before this marker
                self._markers_while_loading.setdefault(partition, []).append((producer_id, commit, offset))
            return
        ended = loaded.groups.on_marker(producer_id, commit)
        if ended:
            logger.debug("%s-%d: marker of producer %d at %d %s %d offsets", OFFSETS_TOPIC, partition, producer_id,
                         offset, "committed" if commit else "dropped", len(ended))

    async def write(self, groups: OffsetsPartition,
                    records: Sequence[tuple[RecordKey, RecordValue | None]]) -> ErrorCode:
        """Write ``records`` to the partition of ``groups`` and, once committed, apply them (§17.3)."""
        written = await self.store.write(groups.index, records)
        if isinstance(written, ErrorCode):
            return written
        for i, (key, value) in enumerate(records):
            groups.apply(key, value, written + i)
        return ErrorCode.none

    async def _write_metadata(self, groups: OffsetsPartition, value: GroupValue, group_id: str) -> ErrorCode:
        return await self.write(groups, [(GroupKey(group_id), value)])
