"""Topic lifecycle and the metadata view, for both listeners (docs/protocol.md §9.4-§9.6, §16.4).

The metadata view is answered from memory (the log manager's topics and
counts, replication's assignments, the broker's own address): no
disk access, no wait.  A standalone broker creates a topic's logs the way a
produce does (``PartitionDirectory.log_for_write``: in a worker thread, one
creation per log), never on the loop; a replicated topic is created through
ZooKeeper by whoever asks (``topics create``, the Kafka listener's registry).
The 0.7 listener encodes METADATA and CREATE_TOPIC from what this answers
(``handlers.py``), the Kafka listener its Metadata and CreateTopics
(``kafka/cluster.py``, ``kafka/topics.py``).
"""

from __future__ import annotations

import logging
from typing import Callable, NamedTuple, Protocol, Sequence

import trio

from trikafka.wire.metadata import BrokerAddress

from ..seams import LogDirectory
from ..topic_settings import TopicConfigError, check_topic_config
from .directory import PartitionDirectory
from .errors import EngineError
from .metadata import PartitionView, TopicView

logger = logging.getLogger(__name__)

# A created topic's upper bound: every partition is a directory and an open segment file.
MAX_CREATED_PARTITIONS = 1024
UNREPLICATED_EPOCH = 0  # an unreplicated partition has one leader, never changed


class TopicCreated(NamedTuple):
    """What a creation ended with, and the topic's partition count afterwards (-1: none)."""

    error: EngineError
    partitions: int


class TopicSettingsStore(Protocol):
    """Where a topic's settings are kept (docs/protocol.md §9.5, §16.4): the standalone broker's
    file (``topic_settings_file.LocalTopicSettings``) or ZooKeeper (``topic_config.ZooKeeperTopicSettings``)."""

    async def store(self, topic: str, settings: dict[str, str]) -> bool:
        """Keep ``settings`` for a created topic; False when they could not be kept."""

    def read(self, topic: str) -> dict[str, str]:
        """The settings kept here for ``topic`` (a replicated topic's are its assignment's)."""

    async def forget(self, topic: str) -> None:
        """A deleted topic's settings go."""

    async def update(self, topic: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Keep ``change(current)`` (Alter*Configs on a standalone broker) and answer it."""


class TopicAdmin:
    """Creates, grows and deletes a broker's local topics and describes every topic it knows."""

    def __init__(self, *, directory: PartitionDirectory, log_manager: LogDirectory, max_message_size: int,
                 self_broker: BrokerAddress, settings: TopicSettingsStore):
        self._directory = directory
        self._log_manager = log_manager
        self.max_message_size = max_message_size  # METADATA names it (§9.4)
        self.self_broker = self_broker  # the 0.7 listener's published address, this broker first in METADATA
        self._create_lock = trio.Lock()  # one creation or deletion at a time: checks and changes stay atomic
        self.settings = settings  # where a created topic's settings go (§9.5)

    # ----------------------------------------------------------------- the metadata view

    def topic_names(self) -> list[str]:
        """Every topic this broker knows (local logs and replicated assignments), sorted."""
        replicas = self._directory.replicas
        names = set(self._log_manager.topics())
        if replicas is not None:
            names |= set(replicas.topics)
        return sorted(names)

    def metadata(self, names: Sequence[str]) -> tuple[tuple[BrokerAddress, ...], tuple[TopicView, ...]]:
        """The brokers, this one first, and ``names`` (every topic when empty) as METADATA describes them (§9.4)."""
        me = self.self_broker
        replicas = self._directory.replicas  # with replication, the live brokers it watches
        peers = replicas.peers() if replicas is not None else ()
        brokers = (me, *(b for b in peers if b.broker_id != me.broker_id))
        return brokers, tuple(self.topic_metadata(name, me.broker_id) for name in names or self.topic_names())

    def topic_metadata(self, name: str, broker_id: int) -> TopicView:
        """One topic as METADATA describes it (both listeners: §9.4, §16.4)."""
        replicas = self._directory.replicas
        if replicas is not None and (replicated := replicas.topic_metadata(name)) is not None:
            return replicated
        count = self._directory.partitions_if_valid(name)
        if count is None:
            return TopicView(name, error=EngineError.INVALID_TOPIC)
        if not self._has_logs(name):
            return TopicView(name, error=EngineError.UNKNOWN_TOPIC)
        return TopicView(name, tuple(
            PartitionView(p, leader=broker_id, leader_epoch=UNREPLICATED_EPOCH,
                              replicas=(broker_id,), isr=(broker_id,))
            for p in range(count)))

    def partition_leader(self, name: str, index: int, broker_id: int) -> int:
        """The leader ``topic_metadata`` names for ``name``-``index`` (-1: none, or no such partition),
        without describing the topic's other partitions: the coordinators look one up per request."""
        replicas = self._directory.replicas
        if replicas is not None and (count := replicas.partition_count(name)) is not None:
            state = replicas.states.get((name, index)) if 0 <= index < count else None
            return -1 if state is None else state.leader
        count = self._directory.partitions_if_valid(name)
        if count is None or not 0 <= index < count or not self._has_logs(name):
            return -1
        return broker_id

    def stored_settings(self, topic: str) -> dict[str, str]:
        """The settings stored for ``topic``: its replicated assignment's, else the standalone store's (§12.12.1)."""
        replicas = self._directory.replicas
        if replicas is not None and (assignment := replicas.topics.get(topic)) is not None:
            return dict(assignment.config)
        return self.settings.read(topic)

    def _has_logs(self, topic: str) -> bool:
        return topic in self._log_manager.topics()

    # ----------------------------------------------------------------- lifecycle (standalone)

    async def delete_local_topic(self, topic: str) -> None:
        """Delete a standalone broker's topic (§16.4): its logs, then its stored settings."""
        async with self._create_lock:
            count = await self._directory.delete_topic_logs(topic)
            await self.settings.forget(topic)
        logger.info("deleted topic %s (%d partition logs)", topic, count)

    async def create_topic(self, topic: str, partitions: int, settings: dict[str, str]) -> TopicCreated:
        """CREATE_TOPIC (§9.5): every partition log of the topic (durably) and the resulting count.

        Settings are checked first (INVALID_CONFIG: nothing created), then stored
        in ``settings`` (ZooKeeper, or the standalone broker's file).
        """
        async with self._create_lock:
            if settings:
                try:
                    check_topic_config(settings, replicated=False)
                except TopicConfigError as exc:
                    logger.warning("CREATE_TOPIC %s refused: %s", topic, exc)
                    return TopicCreated(EngineError.INVALID_CONFIG, -1)
            result = await self._create(topic, partitions)
            if settings and result.error == EngineError.NO_ERROR and not await self.settings.store(topic, settings):
                result = TopicCreated(EngineError.SETTINGS_NOT_KEPT, result.partitions)  # created, settings not kept
        return result

    async def _create(self, topic: str, partitions: int) -> TopicCreated:
        directory, manager = self._directory, self._log_manager
        if directory.partitions_if_valid(topic) is None:
            return TopicCreated(EngineError.INVALID_TOPIC, -1)
        replicas = directory.replicas
        if replicas is not None and (count := replicas.partition_count(topic)) is not None:
            # A replicated topic is created through ZooKeeper (`topics create --replication-factor`).
            return TopicCreated(EngineError.NO_ERROR if count == partitions else EngineError.TOPIC_ALREADY_EXISTS,
                                     count)
        if self._has_logs(topic):
            current = manager.partitions_for(topic)
            if current != partitions:
                return TopicCreated(EngineError.TOPIC_ALREADY_EXISTS, current)
        elif not manager.configured_partitions(topic) <= partitions <= MAX_CREATED_PARTITIONS:
            return TopicCreated(EngineError.INVALID_PARTITIONS, -1)
        had = {p for p in range(partitions) if manager.get(topic, p) is not None}
        await self.create_logs(topic, partitions)
        if len(had) < partitions:
            logger.info("created topic %s with %d partitions", topic, partitions)
        return TopicCreated(EngineError.NO_ERROR, manager.partitions_for(topic))

    async def create_kafka_topic(self, topic: str, partitions: int, settings: dict[str, str]) -> EngineError:
        """CreateTopics on a standalone broker (§16.4): ``settings`` (checked already, ``record.format``
        among them) are kept first, so every log is made in the topic's format, then each log.
        TOPIC_ALREADY_EXISTS when the topic appeared meanwhile; SETTINGS_NOT_KEPT: nothing made."""
        async with self._create_lock:
            if self._directory.topic_format(topic) is not None:
                return EngineError.TOPIC_ALREADY_EXISTS
            if not await self.settings.store(topic, settings):
                return EngineError.SETTINGS_NOT_KEPT
            await self.create_logs(topic, partitions)
        logger.info("created Kafka-format topic %s with %d partitions", topic, partitions)
        return EngineError.NO_ERROR

    async def add_partitions(self, topic: str, count: int) -> EngineError:
        """CreatePartitions on a standalone broker (§16.4): ``topic``'s count raised to ``count``
        (checked already); INVALID_PARTITIONS when it is no longer a growth."""
        async with self._create_lock:
            current = self._directory.partitions_if_valid(topic) or 0
            if count <= current:
                return EngineError.INVALID_PARTITIONS
            await self.create_logs(topic, count, first=current)
        return EngineError.NO_ERROR

    async def create_logs(self, topic: str, partitions: int, *, first: int = 0) -> None:
        """Raise ``topic``'s count to ``partitions`` and create each missing log from ``first`` on:
        the one way a standalone broker makes a topic's logs (CREATE_TOPIC, CreateTopics,
        CreatePartitions), called with the creation lock held.  Names, counts and settings are
        checked already.

        The count first, so the topic listeners (ZooKeeper registration) see the final count;
        then each missing log, created off the loop and shared with any produce that creates
        the same log meanwhile.
        """
        self._log_manager.raise_partition_count(topic, partitions)
        self._directory.forget_partition_count(topic)
        for partition in range(first, partitions):
            await self._directory.log_for_write(topic, partition)

