"""trikafka's shared Trio client: one connection per broker, and a simple consumer.

Used by the producer, the group consumer, the CLI and the Spark source.

Each name below is imported from its module on first use, so that the
modules without I/O (``errors``, ``topics``, ``leader_cache``, ``addresses``)
serve processes without a Trio loop, such as Spark's planners and tasks,
without importing Trio.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {  # module -> the names this package re-exports from it
    ".addresses": ("ADDRESS_SYNTAX", "format_broker_addresses", "parse_broker_addresses"),
    ".connection": ("ACKS_APPENDED", "ACKS_FLUSHED", "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MAX_RESPONSE_BYTES",
                    "OFFSETS_EARLIEST", "OFFSETS_LATEST", "Connection", "FetchResult", "connect"),
    ".consumer": ("DEFAULT_FETCH_MAX_BYTES", "DEFAULT_MAX_FETCH_BYTES_LIMIT", "FramedPrefix", "PollBackoff",
                  "SimpleConsumer", "earliest_offset", "framed_prefix", "latest_offset"),
    ".errors": ("BrokerConnectionError", "BrokerError", "BrokerProtocolError", "BrokerTimeoutError", "ClientError",
                "ExtensionNotSupported", "MessageTooLargeForFetch", "OffsetOutOfRange"),
    ".leader_cache": ("LeaderCache",),
    ".leaders": ("LeaderDirectory", "LeaderNotAvailableError"),
    ".topics": ("PartitionCounts", "PartitionProbe", "TopicPartitions", "counts_from_metadata", "partition_counts",
                "probe_partition_count"),
    "trikafka.wire": ("BrokerAddress", "ConsumedMessage", "CreateTopicResult", "FetchPart", "Metadata",
                      "ProduceAckedResult", "ProducePart"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(import_module(_MODULE_OF[name], __name__), name)
    return value
