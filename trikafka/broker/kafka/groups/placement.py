"""``__consumer_offsets``: its settings, its creation, a group's partition and coordinator
(docs/protocol.md §17.1, §17.3)."""

from __future__ import annotations

import logging

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import OFFSETS_TOPIC
from trikafka.util.java_hash import java_string_hash
from trikafka.wire.errors import ErrorCode as EngineError
from trikafka.wire.metadata import BrokerAddress

from ...topic_settings import CLEANUP_POLICY, SEGMENT_BYTES
from ..context import KafkaContext
from ..topics import MIN_INSYNC_REPLICAS, TopicError

logger = logging.getLogger(__name__)

# Each key's last record is its state, so the topic compacts (§16.6.1).
CLEANUP = "compact"
MIN_INSYNC_AT_FULL_REPLICATION = 2  # min.insync.replicas when the factor is 3 or more (§17.1)
FULL_REPLICATION = 3


def group_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: Kafka's ``abs(hashCode) % n`` (§17.1)."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def offsets_topic_settings(replication_factor: int, segment_bytes: int) -> dict[str, str]:
    """The settings ``__consumer_offsets`` is created with (§17.1)."""
    settings = {CLEANUP_POLICY: CLEANUP, SEGMENT_BYTES: str(segment_bytes)}
    if replication_factor >= FULL_REPLICATION:
        settings[MIN_INSYNC_REPLICAS] = str(MIN_INSYNC_AT_FULL_REPLICATION)
    return settings


class OffsetsTopic:
    """Creates ``__consumer_offsets`` on first need and says who coordinates a group."""

    def __init__(self, service: KafkaContext):
        self._service = service
        self._creating = trio.Lock()

    def partition_count(self) -> int | None:
        """The topic's partition count, None while it does not exist here or this broker is creating it
        (its partitions' logs are not all made yet)."""
        service = self._service
        if self._creating.locked() or service.topic_format(OFFSETS_TOPIC) is None:
            return None
        return service.handler.directory.partitions_if_valid(OFFSETS_TOPIC)

    async def ensure(self) -> int | None:
        """The partition count, creating the topic if no broker has (None: not available yet)."""
        count = self.partition_count()
        if count is not None:
            return count
        service = self._service
        async with self._creating:
            if service.topic_format(OFFSETS_TOPIC) is None:
                config = service.config
                live = len(service.kafka_brokers()) if config.enable_zookeeper else 1
                factor = max(1, min(config.offsets_topic_replication_factor, live))
                settings = offsets_topic_settings(factor, config.offsets_topic_segment_bytes)
                try:
                    await service.topics.create_internal(OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                                         factor, settings)
                except TopicError as exc:
                    if exc.code != ErrorCode.topic_already_exists:
                        logger.warning("could not create %s: %s", OFFSETS_TOPIC, exc)
                        return None
                else:
                    logger.info("created %s: %d partitions, replication factor %d, %s", OFFSETS_TOPIC,
                                config.offsets_topic_num_partitions, factor,
                                ", ".join(f"{k}={v}" for k, v in sorted(settings.items())))
        return self.partition_count()

    def coordinator(self, index: int) -> BrokerAddress | None:
        """The Kafka address of the leader of partition ``index``, None while it has none."""
        service = self._service
        described = service.admin.topic_metadata(OFFSETS_TOPIC, service.broker_id)
        if described.error != EngineError.NO_ERROR:
            return None
        leader = next((p.leader for p in described.partitions if p.partition == index), -1)
        return next((b for b in service.kafka_brokers() if b.broker_id == leader), None)
