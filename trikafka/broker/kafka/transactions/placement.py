"""``__transaction_state``: its settings and a transactional id's partition (docs/protocol.md
§19.5.1); creating it and naming a partition's coordinator is ``InternalTopic``'s."""

from __future__ import annotations

from trikafka.kafka.group_records import TRANSACTION_STATE_TOPIC

from ...config import BrokerConfig
from ..internal_topic import InternalTopic, InternalTopicHost, InternalTopicSpec, key_partition


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (§19.5.1)."""
    return key_partition(transactional_id, partitions)


def transaction_topic_spec(config: BrokerConfig) -> InternalTopicSpec:
    """What ``__transaction_state`` is created with (§19.5.1)."""
    return InternalTopicSpec(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
                             config.transaction_state_log_replication_factor,
                             config.transaction_state_log_segment_bytes)


def transaction_topic(service: InternalTopicHost) -> InternalTopic:
    """``__transaction_state`` as this broker creates and places it."""
    return InternalTopic(service, transaction_topic_spec(service.config))
