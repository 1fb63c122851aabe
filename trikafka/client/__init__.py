"""trikafka's shared Trio client: one connection per broker, and a simple consumer.

Used by the producer, the group consumer, the CLI and the Spark source.
"""

from .addresses import ADDRESS_SYNTAX, format_broker_addresses, parse_broker_addresses
from .connection import (
    ACKS_APPENDED,
    ACKS_FLUSHED,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_RESPONSE_BYTES,
    OFFSETS_EARLIEST,
    OFFSETS_LATEST,
    Connection,
    FetchResult,
    connect,
)
from .consumer import (
    DEFAULT_FETCH_MAX_BYTES,
    DEFAULT_MAX_FETCH_BYTES_LIMIT,
    FramedPrefix,
    PollBackoff,
    SimpleConsumer,
    earliest_offset,
    framed_prefix,
    latest_offset,
)
from .errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerProtocolError,
    BrokerTimeoutError,
    ClientError,
    ExtensionNotSupported,
    MessageTooLargeForFetch,
    OffsetOutOfRange,
)
from .leaders import LeaderCache, LeaderDirectory, LeaderNotAvailableError
from .topics import (
    PartitionCounts,
    PartitionProbe,
    TopicPartitions,
    counts_from_metadata,
    partition_counts,
    probe_partition_count,
)
from trikafka.wire import (
    BrokerAddress,
    ConsumedMessage,
    CreateTopicResult,
    FetchPart,
    Metadata,
    ProduceAckedResult,
    ProducePart,
)

__all__ = [
    "ADDRESS_SYNTAX", "format_broker_addresses", "parse_broker_addresses",
    "ACKS_APPENDED", "ACKS_FLUSHED", "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MAX_RESPONSE_BYTES",
    "OFFSETS_EARLIEST", "OFFSETS_LATEST", "Connection", "FetchResult", "connect",
    "DEFAULT_FETCH_MAX_BYTES", "DEFAULT_MAX_FETCH_BYTES_LIMIT", "FramedPrefix", "PollBackoff",
    "SimpleConsumer", "earliest_offset", "framed_prefix", "latest_offset",
    "BrokerConnectionError", "BrokerError", "BrokerProtocolError", "BrokerTimeoutError", "ClientError",
    "ExtensionNotSupported", "MessageTooLargeForFetch", "OffsetOutOfRange",
    "ConsumedMessage", "FetchPart", "ProduceAckedResult", "ProducePart",
    "PartitionCounts", "PartitionProbe", "TopicPartitions", "counts_from_metadata", "partition_counts",
    "probe_partition_count", "LeaderCache", "LeaderDirectory", "LeaderNotAvailableError", "BrokerAddress", "CreateTopicResult", "Metadata",
]
