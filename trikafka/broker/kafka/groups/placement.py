"""``__consumer_offsets``: its settings and a group's partition (docs/protocol.md §17.1); creating
it and naming a partition's coordinator is ``InternalTopic``'s, shared with ``__transaction_state``."""

from __future__ import annotations

from trikafka.kafka.group_records import OFFSETS_TOPIC

from ...config import BrokerConfig
from ..internal_topic import InternalTopic, InternalTopicHost, InternalTopicSpec, key_partition


def group_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: Kafka's ``abs(hashCode) % n`` (§17.1)."""
    return key_partition(group_id, partitions)


def offsets_topic_spec(config: BrokerConfig) -> InternalTopicSpec:
    """What ``__consumer_offsets`` is created with (§17.1)."""
    return InternalTopicSpec(OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                             config.offsets_topic_replication_factor, config.offsets_topic_segment_bytes)


def offsets_topic(service: InternalTopicHost) -> InternalTopic:
    """``__consumer_offsets`` as this broker creates and places it."""
    return InternalTopic(service, offsets_topic_spec(service.config))
