"""trikafka's shared Trio client: one connection per broker, and a simple consumer.

Used by the producer, the group consumer, the CLI and the Spark source.

Each name below is imported from its module on first use, so that the
modules without I/O (``errors``, ``topics``, ``leader_cache``, ``addresses``)
serve processes without a Trio loop, such as Spark's planners and tasks,
without importing Trio.
"""

from __future__ import annotations

from trikafka.util.lazy import lazy_exports

_EXPORTS = {  # module -> the names this package re-exports from it
    ".addresses": ("ADDRESS_SYNTAX", "format_broker_addresses", "parse_broker_addresses"),
    ".connection": ("DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MAX_RESPONSE_BYTES", "Connection", "connect"),
    ".consumer": ("DEFAULT_FETCH_MAX_BYTES", "DEFAULT_MAX_FETCH_BYTES_LIMIT", "FramedPrefix", "PollBackoff",
                  "SimpleConsumer", "earliest_offset", "framed_prefix", "latest_offset"),
    ".errors": ("BrokerConnectionError", "BrokerError", "BrokerProtocolError", "BrokerTimeoutError", "ClientError",
                "ExtensionNotSupported", "MessageTooLargeForFetch", "OffsetOutOfRange"),
    ".leader_cache": ("LeaderCache",),
    ".leaders": ("LeaderDirectory", "LeaderNotAvailableError"),
    ".topics": ("PartitionCounts", "PartitionProbe", "TopicPartitions", "counts_from_metadata",
                "kafka_format_partitions", "partition_counts", "probe_partition_count"),
    "trikafka.wire": ("ACKS_APPENDED", "ACKS_FLUSHED", "OFFSETS_EARLIEST", "OFFSETS_LATEST", "BrokerAddress",
                      "ConsumedMessage", "CreateTopicResult", "FetchPart", "FetchResult", "Metadata",
                      "ProduceAckedResult", "ProducePart"),
}
__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
