"""trikafka's Trio client of the Apache Kafka protocol (docs/protocol.md §16).

It talks to trikafka's Kafka listener and to any Kafka broker, without
asyncio: ``KafkaClient`` (bootstrap, metadata, leader routing) over
``KafkaConnection`` (version negotiation, pipelined requests), a
``KafkaProducer`` (idempotent, or transactional with a ``TransactionManager``,
§19.8), a ``PartitionConsumer``, a ``KafkaGroupConsumer`` and ``KafkaAdmin`` calls.  The
bytes are ``trikafka.kafka``'s codec; nothing here encodes a record.

Each name below is imported from its module on first use.
"""

from __future__ import annotations

from trikafka.util.lazy import lazy_exports

_EXPORTS = {  # module -> the names this package re-exports from it
    ".admin": ("EARLIEST", "LATEST", "MAX_TIMESTAMP", "RESOURCE_BROKER", "RESOURCE_TOPIC", "ConfigValue",
               "GroupDescription", "GroupListing", "GroupMemberDescription", "KafkaAdmin", "NewTopic", "OffsetAt",
               "QuotaEntity", "QuotaFilter", "TransactionDescription", "TransactionListing"),
    ".assignors": ("ASSIGNORS", "Assignor", "GroupMember", "RangeAssignor", "RoundRobinAssignor"),
    ".client": ("BrokerNode", "ClusterMetadata", "KafkaClient", "KafkaPartitionMetadata", "KafkaTopicMetadata"),
    ".connection": ("KafkaConnection", "OpenStream", "SaslLogin", "UnsupportedApi", "open_kafka_connection"),
    ".consumer": ("PartitionConsumer",),
    ".group": ("KafkaGroupConsumer", "KafkaGroupMessage"),
    ".group_offsets": ("ConsumerGroupMetadata", "TopicPartition"),
    ".membership": ("GroupMembership",),
    ".errors": ("KafkaOffsetOutOfRange", "KafkaResponseError", "ProducerFencedError", "TransactionFatalError",
                "TransactionStateError"),
    ".partitioner": ("DefaultPartitioner", "key_partition", "murmur2"),
    ".producer": ("ACKS_ALL", "ACKS_LEADER", "ACKS_NONE", "KafkaProducer", "PendingRecord"),
    ".transactions": ("TransactionManager",),
}
__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
