"""Requests of the 0.7 protocol and of trikafka's extensions (docs/protocol.md §2, §5, §9).

Requests are frozen dataclasses (h11 style events).  ``encode_request`` turns one into a whole
frame, size prefix included; ``decode_request_body`` is the inverse for the bytes *after* the
size prefix and is what ``framing.RequestReader`` uses.  Decoding is strict about what the peer
owes us (every field present, no negative lengths or counts: ``RemoteProtocolError``) and lenient
about what it does not (bytes after the last field are ignored; topic names are never rejected
here: the broker validates them).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Callable, Union

from .errors import LocalProtocolError, RemoteProtocolError
from .cursor import FieldCursor, encode_string16
from .topics import TOPIC_ENCODING, TOPIC_ERRORS, TOPIC_NAME_MAX_CHARS, is_valid_topic  # noqa: F401 (re-exported)

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_HEADER = struct.Struct(">ih")  # size, requestType

OFFSETS_LATEST = -1    # OFFSETS time for the visible end E (§6.5)
OFFSETS_EARLIEST = -2  # OFFSETS time for the log start S
ACKS_APPENDED = 1      # PRODUCE_ACKED: answer once appended (§16.1)
ACKS_FLUSHED = -1      # PRODUCE_ACKED: answer once flushed, i.e. visible


class RequestType(enum.IntEnum):
    """The int16 request type ids (0-4 from 0.7, 100+ trikafka extensions)."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACKED = 100
    FETCH_WAIT = 101
    METADATA = 102
    CREATE_TOPIC = 103
    FETCH_LOCAL = 104
    REPLICA_FETCH = 110  # replication (wire/replication.py)
    EPOCH_END_OFFSET = 111

    @property
    def expects_response(self) -> bool:
        """False for PRODUCE and MULTIPRODUCE, which are never answered (§2)."""
        return self not in (RequestType.PRODUCE, RequestType.MULTIPRODUCE)

    @property
    def is_extension(self) -> bool:
        """True for trikafka's types, which a plain 0.7 broker answers by closing."""
        return self >= 100


@dataclass(frozen=True, slots=True)
class ProducePart:
    """One topic-partition's message set in a produce request."""

    topic: str
    partition: int
    messages: bytes


@dataclass(frozen=True, slots=True)
class FetchPart:
    """One topic-partition read: up to ``max_bytes`` from byte ``offset``."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """PRODUCE (type 0); the broker never answers it."""

    part: ProducePart
    type = RequestType.PRODUCE


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """FETCH (type 1); answered with one message set."""

    part: FetchPart
    type = RequestType.FETCH


@dataclass(frozen=True, slots=True)
class FetchLocalRequest:
    """FETCH_LOCAL (type 104): FETCH's body and answer; on the broker's Unix-domain listener
    the answer may be a segment file's descriptor instead of its bytes (docs §9.8).

    ``part.max_bytes`` bounds an answer passed as a descriptor, ``inline_max_bytes`` one
    sent inline (None: the field is left out, and ``part.max_bytes`` bounds both)."""

    part: FetchPart
    inline_max_bytes: int | None = None
    type = RequestType.FETCH_LOCAL

    @property
    def inline_part(self) -> FetchPart:
        """The FETCH whose answer goes inline when no descriptor can carry the answer."""
        if self.inline_max_bytes is None:
            return self.part
        return FetchPart(self.part.topic, self.part.partition, self.part.offset, self.inline_max_bytes)


@dataclass(frozen=True, slots=True)
class MultiFetchRequest:
    """MULTIFETCH (type 2); each part answered like a FETCH, in order."""

    parts: tuple[FetchPart, ...]
    type = RequestType.MULTIFETCH

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class MultiProduceRequest:
    """MULTIPRODUCE (type 3); the broker never answers it."""

    parts: tuple[ProducePart, ...]
    type = RequestType.MULTIPRODUCE

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """OFFSETS (type 4); ``time_ms`` -1 = latest, -2 = earliest (§6.5)."""

    topic: str
    partition: int
    time_ms: int
    max_offsets: int
    type = RequestType.OFFSETS


@dataclass(frozen=True, slots=True)
class ProduceAckedRequest:
    """PRODUCE_ACKED (type 100): acks 1 = appended, -1 = flushed (§16.1)."""

    acks: int
    timeout_ms: int
    parts: tuple[ProducePart, ...]
    type = RequestType.PRODUCE_ACKED

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class FetchWaitRequest:
    """FETCH_WAIT (type 101): a MULTIFETCH that may wait for data (§16.2)."""

    max_wait_ms: int
    min_bytes: int
    parts: tuple[FetchPart, ...]
    type = RequestType.FETCH_WAIT

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """METADATA (type 102): brokers and partitions of ``topics`` (empty: every topic)."""

    topics: tuple[str, ...] = ()
    type = RequestType.METADATA

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            raise LocalProtocolError("topics must be a sequence of names, not one string")
        object.__setattr__(self, "topics", tuple(self.topics))


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """CREATE_TOPIC (type 103): create partitions ``0 .. partitions-1`` of ``topic``, with ``settings``."""

    topic: str
    partitions: int
    settings: tuple[tuple[str, str], ...] = ()  # per-topic settings (key, value) (docs §9.5)
    type = RequestType.CREATE_TOPIC


Request = Union[
    ProduceRequest,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    FetchWaitRequest,
    MetadataRequest,
    CreateTopicRequest,
    FetchLocalRequest,
]


# --------------------------------------------------------------------------- encoding


def _check_int(name: str, value: int, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise LocalProtocolError(f"{name}={value!r} does not fit in [{low}, {high}]")
    return value


def encode_topic(topic: str) -> bytes:
    """A topic as a string16; raises LocalProtocolError if it cannot be one."""
    if not isinstance(topic, str):
        raise LocalProtocolError(f"topic must be str, not {type(topic).__name__}")
    raw = topic.encode(TOPIC_ENCODING, TOPIC_ERRORS)
    if len(raw) > INT16_MAX:
        raise LocalProtocolError(f"topic of {len(raw)} bytes is longer than a string16 allows")
    return _INT16.pack(len(raw)) + raw


def _encode_produce_part(part: ProducePart) -> list[bytes]:
    messages = bytes(part.messages)
    if len(messages) > INT32_MAX:
        raise LocalProtocolError("message set larger than an int32 size")
    return [
        encode_topic(part.topic),
        _INT32.pack(_check_int("partition", part.partition, INT32_MIN, INT32_MAX)),
        _INT32.pack(len(messages)),
        messages,
    ]


def _encode_fetch_part(part: FetchPart) -> bytes:
    return b"".join([
        encode_topic(part.topic),
        _INT32.pack(_check_int("partition", part.partition, INT32_MIN, INT32_MAX)),
        _INT64.pack(_check_int("offset", part.offset, INT64_MIN, INT64_MAX)),
        _INT32.pack(_check_int("max_bytes", part.max_bytes, INT32_MIN, INT32_MAX)),
    ])


def _encode_count(count: int) -> bytes:
    return _INT16.pack(_check_int("part count", count, 0, INT16_MAX))


# Request bodies defined in other wire modules (replication.py), which build on this
# one: each registers its (encode, decode) pair on import; ``trikafka.wire`` imports them.
EXTENSION_BODIES: dict[RequestType, tuple[Callable[[Any], list[bytes]], Callable[[RequestType, "FieldCursor"], Any]]] = {}


def _encode_body(req: Request) -> list[bytes]:
    if isinstance(req, ProduceRequest):
        return _encode_produce_part(req.part)
    if isinstance(req, FetchRequest):
        return [_encode_fetch_part(req.part)]
    if isinstance(req, FetchLocalRequest):
        inline = req.inline_max_bytes
        tail = [] if inline is None else [_INT32.pack(_check_int("inline_max_bytes", inline, INT32_MIN, INT32_MAX))]
        return [_encode_fetch_part(req.part), *tail]
    if isinstance(req, MultiFetchRequest):
        return [_encode_count(len(req.parts))] + [_encode_fetch_part(p) for p in req.parts]
    if isinstance(req, MultiProduceRequest):
        return [_encode_count(len(req.parts))] + [b for p in req.parts for b in _encode_produce_part(p)]
    if isinstance(req, OffsetsRequest):
        return [
            encode_topic(req.topic),
            _INT32.pack(_check_int("partition", req.partition, INT32_MIN, INT32_MAX)),
            _INT64.pack(_check_int("time_ms", req.time_ms, INT64_MIN, INT64_MAX)),
            _INT32.pack(_check_int("max_offsets", req.max_offsets, INT32_MIN, INT32_MAX)),
        ]
    if isinstance(req, ProduceAckedRequest):
        head = _INT16.pack(_check_int("acks", req.acks, INT16_MIN, INT16_MAX))
        head += _INT32.pack(_check_int("timeout_ms", req.timeout_ms, INT32_MIN, INT32_MAX))
        return [head, _encode_count(len(req.parts))] + [
            b for p in req.parts for b in _encode_produce_part(p)
        ]
    if isinstance(req, FetchWaitRequest):
        head = _INT32.pack(_check_int("max_wait_ms", req.max_wait_ms, INT32_MIN, INT32_MAX))
        head += _INT32.pack(_check_int("min_bytes", req.min_bytes, INT32_MIN, INT32_MAX))
        return [head, _encode_count(len(req.parts))] + [_encode_fetch_part(p) for p in req.parts]
    if isinstance(req, MetadataRequest):
        return [_encode_count(len(req.topics))] + [encode_topic(t) for t in req.topics]
    if isinstance(req, CreateTopicRequest):
        body = [encode_topic(req.topic), _INT32.pack(_check_int("partitions", req.partitions, INT32_MIN, INT32_MAX))]
        if req.settings:  # absent when there are none: the request stays byte-identical to before
            body += [_encode_count(len(req.settings))] + [encode_string16(x) for kv in req.settings for x in kv]
        return body
    codec = EXTENSION_BODIES.get(getattr(req, "type", None))
    if codec is not None:
        return codec[0](req)
    raise LocalProtocolError(f"not a request: {req!r}")


def encode_request(req: Request) -> bytes:
    """The whole frame for ``req``: int32 size, int16 type, body (spec §3.1)."""
    body = _encode_body(req)
    size = 2 + sum(len(b) for b in body)
    if size > INT32_MAX:
        raise LocalProtocolError(f"request of {size} bytes does not fit an int32 size")
    return b"".join([_HEADER.pack(size, req.type), *body])


# --------------------------------------------------------------------------- decoding


def _produce_part(cur: FieldCursor) -> ProducePart:
    topic, partition = cur.topic(), cur.int32("partition")
    return ProducePart(topic, partition, cur.sized_bytes("messageSet"))


def _fetch_part(cur: FieldCursor) -> FetchPart:
    topic, partition, offset = cur.topic(), cur.int32("partition"), cur.int64("offset")
    return FetchPart(topic, partition, offset, cur.int32("maxSize"))


def _decode_body(kind: RequestType, cur: FieldCursor) -> Request:
    if kind == RequestType.PRODUCE:
        return ProduceRequest(_produce_part(cur))
    if kind == RequestType.FETCH:
        return FetchRequest(_fetch_part(cur))
    if kind == RequestType.FETCH_LOCAL:
        part = _fetch_part(cur)  # inlineMaxSize is optional (docs §9.8)
        return FetchLocalRequest(part, cur.int32("inlineMaxSize") if cur.remaining >= 4 else None)
    if kind == RequestType.MULTIFETCH:
        return MultiFetchRequest(tuple(_fetch_part(cur) for _ in range(cur.count("part count"))))
    if kind == RequestType.MULTIPRODUCE:
        return MultiProduceRequest(tuple(_produce_part(cur) for _ in range(cur.count("part count"))))
    if kind == RequestType.OFFSETS:
        topic = cur.topic()
        partition = cur.int32("partition")
        time_ms = cur.int64("time")
        return OffsetsRequest(topic, partition, time_ms, cur.int32("maxNumOffsets"))
    if kind == RequestType.PRODUCE_ACKED:
        acks = cur.int16("acks")
        timeout_ms = cur.int32("timeout_ms")
        parts = tuple(_produce_part(cur) for _ in range(cur.count("part count")))
        return ProduceAckedRequest(acks, timeout_ms, parts)
    if kind == RequestType.METADATA:
        return MetadataRequest(tuple(cur.topic() for _ in range(cur.count("topic count"))))
    if kind == RequestType.CREATE_TOPIC:
        topic, partitions = cur.topic(), cur.int32("partitions")
        settings = tuple((cur.string16("key"), cur.string16("value")) for _ in range(cur.count("settings")))\
            if cur.remaining else ()
        return CreateTopicRequest(topic, partitions, settings)
    if kind in EXTENSION_BODIES:
        return EXTENSION_BODIES[kind][1](kind, cur)
    assert kind == RequestType.FETCH_WAIT
    max_wait_ms = cur.int32("max_wait_ms")
    min_bytes = cur.int32("min_bytes")
    parts = tuple(_fetch_part(cur) for _ in range(cur.count("part count")))
    return FetchWaitRequest(max_wait_ms, min_bytes, parts)


def decode_request_body(frame: bytes) -> Request:
    """Decode the bytes after the size prefix: ``requestType:int16`` + body.

    Raises ``RemoteProtocolError`` for every condition of spec §7.2 the codec
    can see.  Bytes after the last field are ignored (spec §3.1).
    """
    cur = FieldCursor(bytes(frame))
    type_id = cur.int16("request type")
    try:
        kind = RequestType(type_id)
    except ValueError:
        raise RemoteProtocolError(f"unknown request type {type_id}") from None
    return _decode_body(kind, cur)
