"""The group coordinator: the groups of the ``__consumer_offsets`` partitions this broker leads
(docs/protocol.md §17.3), loaded through ``PartitionLoads``; offset expiry (§17.5) and the
transaction markers of TxnOffsetCommit (§19.5.4)."""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import OFFSETS_TOPIC, GroupKey, GroupValue, OffsetKey, RecordKey, RecordValue
from trikafka.log.verification_guard import VerificationGuard
from trikafka.wire.metadata import BrokerAddress

from ...config import BrokerConfig
from ...engine.partition import ReadView, Refused
from ..coordinator_seams import ZooKeeperGroups
from ..internal_topic import InternalTopic, TxnStanding
from ..partition_loads import PartitionLoads
from .consumer_group import ConsumerSettings
from .group import GroupSettings, GroupState
from .membership import CoordinatorMembership
from .placement import group_partition
from .state import OffsetsPartition
from .store import GroupStore

logger = logging.getLogger(__name__)

# How often Empty groups' offsets are checked against offsets.retention.minutes (Kafka's
# offsets.retention.check.interval.ms, §17.5).
RETENTION_CHECK_INTERVAL_S = 600.0
MS_PER_MINUTE = 60_000


class GroupCoordinator:
    """The groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(self, topic: InternalTopic, config: BrokerConfig, clock_ms: Callable[[], int],
                 zookeeper_groups: ZooKeeperGroups, on_membership_change: Callable[[], None] = lambda: None):
        """``on_membership_change``: called whenever a group may have gained its first member or lost
        its last (the live-group marks, §17.7)."""
        self.topic = topic  # __consumer_offsets: the coordinator's one way to its partitions
        self._config = config
        self._clock_ms = clock_ms
        self._zookeeper_groups = zookeeper_groups
        self.store = GroupStore(topic)
        self._clashes_logged: set[str] = set()
        # Markers (producer id, commit, offset) that reached a partition while it was loading (§19.5.4).
        self._markers_while_loading: dict[int, list[tuple[int, bool, int]]] = {}
        self.settings = GroupSettings(config.group_initial_rebalance_delay_ms, config.group_min_session_timeout_ms,
                                      config.group_max_session_timeout_ms,
                                      ConsumerSettings(config.group_consumer_session_timeout_ms,
                                                       config.group_consumer_heartbeat_interval_ms))
        self.membership = CoordinatorMembership(self._write_metadata, self.loaded, clock_ms,
                                                write_records=self.write, on_change=on_membership_change)
        self.loads: PartitionLoads[OffsetsPartition] = PartitionLoads(
            topic, self._load, on_loaded=lambda _: self.membership.poke(),
            on_drop=self.membership.drop)

    def start(self, nursery: trio.Nursery) -> None:
        """Loads and timers run in ``nursery`` (the listener's), so a client that gives up cancels neither."""
        self.loads.start(nursery)
        self.membership.start(nursery)
        nursery.start_soon(self._expire_periodically)

    async def _expire_periodically(self) -> None:
        while True:
            await trio.sleep(RETENTION_CHECK_INTERVAL_S)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Write the tombstones of Empty groups' offsets older than ``offsets.retention.minutes``, and of
        a group whose last offset goes (§17.5); the number of offsets removed."""
        retention_ms = self._config.offsets_retention_minutes * MS_PER_MINUTE
        removed = 0
        for groups in self.loaded():
            for group in list(groups.groups.values()):
                expired = group.expired_offsets(self._clock_ms(), retention_ms)
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
        """How many groups this broker coordinates, by state (§17.6; a consumer group's own, §17.9)."""
        counts = {state.value: 0 for state in GroupState}
        for groups in self.loaded():
            for group in groups.groups.values():
                counts[group.listed_state] = counts.get(group.listed_state, 0) + 1
        return counts

    @property
    def rebalances(self) -> int:
        """Rebalances completed since the broker started (§17.6)."""
        return self.membership.rebalances

    def loaded(self) -> list[OffsetsPartition]:
        """The partitions whose groups this broker serves now."""
        return self.loads.states()

    async def coordinator_of(self, group_id: str) -> BrokerAddress | ErrorCode:
        """The Kafka address of ``group_id``'s coordinator, creating ``__consumer_offsets`` on first
        need; COORDINATOR_NOT_AVAILABLE while there is none (§17.1, §17.3)."""
        return await self.topic.coordinator_of(group_id)

    async def clash(self, group_id: str) -> str | None:
        """Why ``group_id`` may not be a Kafka group here: it has 0.7 consumers registered in
        ZooKeeper (§17.7); None when it may."""
        if not await self._zookeeper_groups.has_07_consumers(group_id):
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
        return await self.loads.serve(index)

    def on_role(self, topic: str, index: int, role: str) -> None:
        """Replication applied a state of ``topic``-``index`` here: a ``__consumer_offsets``
        partition this broker now leads is loaded at once, one it no longer leads dropped (§17.3)."""
        if topic == OFFSETS_TOPIC:
            self.loads.on_role(index, role)

    def drop(self, index: int) -> None:
        """Forget partition ``index``'s groups: this broker no longer leads it (§17.3)."""
        self.loads.drop(index)

    async def _load(self, index: int, view: ReadView) -> OffsetsPartition:
        """Partition ``index``'s groups, from its records (§17.3) and the markers that reached it
        while they were read (§19.5.4)."""
        records = await self.store.read(view)
        groups = OffsetsPartition(index, self.settings)
        for key, value, offset, open_producer in records:
            groups.apply_read(key, value, offset, open_producer)
        # A marker appended after the read ended is in no record read: apply it now.
        last_read = max((offset for _, _, offset, _ in records), default=-1)
        for producer_id, commit, offset in self._markers_while_loading.pop(index, []):
            if offset > last_read:
                groups.on_marker(producer_id, commit)
        groups.activate(self.membership.now_ms())
        logger.debug("%s-%d: %d records, %d groups", OFFSETS_TOPIC, index, len(records), len(groups.groups))
        return groups

    def on_marker(self, topic: str, partition: int, producer_id: int, commit: bool, offset: int) -> None:
        """A marker listener (§19.5.4): the partition side appended ``producer_id``'s COMMIT
        (``commit``) or ABORT marker at ``offset`` to ``topic``-``partition``.  On a
        ``__consumer_offsets`` partition the producer's pending transactional offsets become
        committed, or are dropped.  A partition not loaded here needs nothing: its load reads the
        outcome from the log."""
        if topic != OFFSETS_TOPIC:
            return
        groups = self.loads.get(partition)
        if groups is None:
            if self.loads.loading(partition):  # the load may have read the log before this marker
                self._markers_while_loading.setdefault(partition, []).append((producer_id, commit, offset))
            return
        ended = groups.on_marker(producer_id, commit)
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

    async def write_transactional(self, groups: OffsetsPartition, producer_id: int, producer_epoch: int,
                                  records: Sequence[tuple[RecordKey, RecordValue | None]],
                                  guard: VerificationGuard | None) -> ErrorCode:
        """TxnOffsetCommit (§19.5.4): write ``records`` as a transactional batch of the producer, which
        presents its verification's ``guard`` (§19.5.7); once committed they count as the log says
        their transaction stands: pending until its marker (``on_marker``), or as the marker that
        the log already holds behind them decided."""
        written = await self.store.write(groups.index, records, (producer_id, producer_epoch), guard)
        if isinstance(written, ErrorCode):
            return written
        # The marker's listener may have run while this write awaited its acknowledgement (both
        # committed by one high-watermark move): the log, not the order of wake-ups, decides.
        try:
            standing = self.topic.transaction_standing(groups.index, producer_id, written)
        except Refused:
            return ErrorCode.none  # led elsewhere now: these groups are dropped, the next load reads the batch
        if standing is TxnStanding.ABORTED:
            return ErrorCode.none
        open_producer = producer_id if standing is TxnStanding.OPEN else None
        for i, (key, value) in enumerate(records):
            groups.apply_read(key, value, written + i, open_producer)
        return ErrorCode.none

    async def _write_metadata(self, groups: OffsetsPartition, value: GroupValue, group_id: str) -> ErrorCode:
        return await self.write(groups, [(GroupKey(group_id), value)])
