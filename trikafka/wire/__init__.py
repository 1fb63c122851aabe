"""trikafka's sans-I/O codec for the Kafka 0.7 protocol (docs/protocol.md §2-§5, §9, §12.4).

No I/O happens here: callers feed bytes in and get events or bytes out.
"""

from types import ModuleType as _ModuleType

from .compression import Codec, compress, decompress
from .crc import crc32
from .errors import (
    LEADER_CHANGE_CODES,
    RETRIABLE_CODES,
    ErrorCode,
    InvalidMessageError,
    LocalProtocolError,
    MessageError,
    MessageSizeTooLargeError,
    ProtocolError,
    RemoteProtocolError,
    is_retriable,
    needs_leader_refresh,
)
from .framing import (
    DEFAULT_MAX_REQUEST_BYTES,
    NEED_DATA,
    RequestReader,
    ResponseFrame,
    ResponseReader,
)
from .message import (
    ENTRY_OVERHEAD_BYTES,
    HEADER_BYTES,
    MAGIC_0,
    MAGIC_1,
    Message,
    decode_message,
    encode_entry,
)
from .messageset import ValidatedSet, build_message_set, scan_valid_prefix, validate_message_set
from .reading import ConsumedMessage, Entry, ParsedSet, grown_fetch_size, iter_messages, parse_entries
from .metadata import (
    NO_LEADER,
    BrokerAddress,
    CreateTopicResult,
    Metadata,
    PartitionMetadata,
    TopicMetadata,
    decode_create_topic_payload,
    decode_metadata_payload,
    encode_create_topic_response,
    encode_metadata_response,
)
from .topics import TOPIC_NAME_MAX_CHARS, is_valid_topic
from .requests import (
    ACKS_APPENDED,
    ACKS_FLUSHED,
    OFFSETS_EARLIEST,
    OFFSETS_LATEST,
    CreateTopicRequest,
    FetchPart,
    FetchLocalRequest,
    FetchRequest,
    FetchWaitRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    Request,
    RequestType,
    decode_request_body,
    encode_request,
)
from .responses import (
    FETCH_LOCAL_INLINE,
    FETCH_LOCAL_TAIL_BYTES,
    Chunk,
    FetchResult,
    FileRegion,
    ProduceAckedResult,
    chunks_length,
    chunks_to_bytes,
    decode_fetch_local_tail,
    decode_multifetch_payload,
    decode_offsets_payload,
    decode_produce_acked_payload,
    encode_fetch_local_descriptor,
    encode_fetch_local_response,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_produce_acked_response,
    top_level_error,
)

__all__ = sorted(
    name for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _ModuleType)
)
