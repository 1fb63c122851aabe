"""METADATA and CREATE_TOPIC (docs/protocol.md §9.4, §9.5, §9.6).

METADATA is answered from memory (the log manager's topics and counts, the
broker's own address): no disk access, no wait.  CREATE_TOPIC creates each
missing log the way a produce does (``RequestHandler.log_for_write``: in a
worker thread, one creation per log), never on the loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Sequence

import trio

from trikafka.wire.errors import ErrorCode
from trikafka.wire.metadata import (
    BrokerAddress,
    CreateTopicResult,
    Metadata,
    PartitionMetadata,
    TopicMetadata,
    encode_create_topic_response,
    encode_metadata_response,
)
from trikafka.wire.requests import CreateTopicRequest, MetadataRequest

from .seams import LogDirectory
from .topic_settings import TopicConfigError, check_topic_config

if TYPE_CHECKING:
    from .handlers import RequestHandler

logger = logging.getLogger(__name__)

# CREATE_TOPIC's upper bound: every partition is a directory and an open segment file.
MAX_CREATED_PARTITIONS = 1024
UNREPLICATED_EPOCH = 0  # partitions are not replicated yet: one leader, never changed


class TopicAdmin:
    """Answers METADATA and CREATE_TOPIC for one broker (shared by its connections)."""

    def __init__(self, *, handler: RequestHandler, log_manager: LogDirectory, max_message_size: int):
        self._handler = handler
        self._log_manager = log_manager
        self._max_message_size = max_message_size
        self.self_broker: BrokerAddress | None = None  # set once the broker has bound its port
        # Other live brokers, for a broker that watches the registry (replication).
        self.peers: Callable[[], Sequence[BrokerAddress]] = tuple
        self._create_lock = trio.Lock()  # one creation at a time: checks and creation stay atomic
        # Where CREATE_TOPIC's settings go (docs/protocol.md §9.5): set by the broker's wiring.
        self.store_settings: Callable[[str, dict[str, str]], Awaitable[bool]] = _settings_not_kept
        # A standalone broker's stored settings of a topic, and their removal (§16.4).
        self.read_settings: Callable[[str], dict[str, str]] = lambda topic: {}
        self.forget_settings: Callable[[str], Awaitable[None]] = _nothing_to_forget

    # ----------------------------------------------------------------- METADATA

    def metadata(self, request: MetadataRequest) -> bytes:
        """The METADATA response: every topic with a log here, or those asked."""
        me = self.self_broker
        assert me is not None, "METADATA before the broker knows its address"
        brokers = (me, *(b for b in self.peers() if b.broker_id != me.broker_id))
        replicas = self._handler.replicas
        names = request.topics or tuple(sorted(set(self._log_manager.topics()) | set(
            replicas.topics if replicas is not None else ())))
        topics = tuple(self.topic_metadata(name, me.broker_id) for name in names)
        return encode_metadata_response(Metadata(self._max_message_size, brokers, topics))

    def topic_metadata(self, name: str, broker_id: int) -> TopicMetadata:
        """One topic as METADATA describes it (both listeners: §9.4, §16.4)."""
        replicas = self._handler.replicas
        if replicas is not None and (replicated := replicas.topic_metadata(name)) is not None:
            return replicated
        count = self._handler.directory.partitions_if_valid(name)
        if count is None:
            return TopicMetadata(name, error=ErrorCode.INVALID_TOPIC)
        if not self._has_logs(name):
            return TopicMetadata(name, error=ErrorCode.UNKNOWN_TOPIC)
        return TopicMetadata(name, tuple(
            PartitionMetadata(p, leader=broker_id, leader_epoch=UNREPLICATED_EPOCH,
                              replicas=(broker_id,), isr=(broker_id,))
            for p in range(count)))

    def partition_leader(self, name: str, index: int, broker_id: int) -> int:
        """The leader ``topic_metadata`` names for ``name``-``index`` (-1: none, or no such partition),
        without describing the topic's other partitions: the coordinators look one up per request."""
        replicas = self._handler.replicas
        if replicas is not None and (count := replicas.partition_count(name)) is not None:
            state = replicas.states.get((name, index)) if 0 <= index < count else None
            return -1 if state is None else state.leader
        count = self._handler.directory.partitions_if_valid(name)
        if count is None or not 0 <= index < count or not self._has_logs(name):
            return -1
        return broker_id

    def _has_logs(self, topic: str) -> bool:
        return topic in self._log_manager.topics()

    async def delete_local_topic(self, topic: str) -> None:
        """DeleteTopics on a standalone broker (§16.4): its logs, then its stored settings."""
        async with self._create_lock:
            count = await self._handler.directory.delete_topic_logs(topic)
            await self.forget_settings(topic)
        logger.info("deleted topic %s (%d partition logs)", topic, count)

    # ----------------------------------------------------------------- CREATE_TOPIC

    async def create_topic(self, request: CreateTopicRequest) -> bytes:
        """Create every partition log of the topic (durably) and answer the resulting count.

        Settings sent with it are checked first (INVALID_CONFIG: nothing created),
        then stored by ``store_settings`` (ZooKeeper, or the standalone broker's file).
        """
        async with self._create_lock:
            settings = dict(request.settings)
            if settings:
                try:
                    check_topic_config(settings, replicated=False)
                except TopicConfigError as exc:
                    logger.warning("CREATE_TOPIC %s refused: %s", request.topic, exc)
                    return encode_create_topic_response(CreateTopicResult(ErrorCode.INVALID_CONFIG, -1))
            result = await self._create(request.topic, request.partitions)
            if settings and result.error == ErrorCode.NO_ERROR and not await self.store_settings(request.topic,
                                                                                                  settings):
                result = CreateTopicResult(ErrorCode.UNKNOWN, result.partitions)  # created, settings not kept
        return encode_create_topic_response(result)

    async def _create(self, topic: str, partitions: int) -> CreateTopicResult:
        handler, manager = self._handler, self._log_manager
        if handler.directory.partitions_if_valid(topic) is None:
            return CreateTopicResult(ErrorCode.INVALID_TOPIC, -1)
        if handler.replicas is not None and (count := handler.replicas.partition_count(topic)) is not None:
            # A replicated topic is created through ZooKeeper (`topics create --replication-factor`).
            return CreateTopicResult(ErrorCode.NO_ERROR if count == partitions else ErrorCode.TOPIC_ALREADY_EXISTS,
                                     count)
        if self._has_logs(topic):
            current = manager.partitions_for(topic)
            if current != partitions:
                return CreateTopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, current)
        elif not manager.configured_partitions(topic) <= partitions <= MAX_CREATED_PARTITIONS:
            return CreateTopicResult(ErrorCode.INVALID_PARTITIONS, -1)
        had = {p for p in range(partitions) if manager.get(topic, p) is not None}
        # The count first, so the topic listeners (ZooKeeper registration) see the final
        # count; then each missing log, created off the loop and shared with any produce
        # that creates the same log meanwhile.
        manager.raise_partition_count(topic, partitions)
        handler.directory.forget_partition_count(topic)
        for partition in range(partitions):
            await handler.directory.log_for_write(topic, partition)
        if len(had) < partitions:
            logger.info("created topic %s with %d partitions", topic, partitions)
        return CreateTopicResult(ErrorCode.NO_ERROR, manager.partitions_for(topic))


async def _nothing_to_forget(topic: str) -> None:
    return None


async def _settings_not_kept(topic: str, settings: dict[str, str]) -> bool:
    raise AssertionError(f"no place to keep the settings of {topic!r}")  # the broker always wires one
