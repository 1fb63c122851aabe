"""The requests of the 0.7 protocol and of trikafka's extensions, and their body codecs
(docs/protocol.md §2, §5, §9).

Requests are frozen dataclasses (h11 style events).  Each type has one body encoder (the
fields after the request type, as a list of byte strings) and one body decoder (a
``FieldCursor`` placed after the request type); ``requests.py`` lists them in its table.
Decoding is strict about what the peer owes us (every field present, no negative lengths
or counts: ``RemoteProtocolError``) and lenient about what it does not (bytes after the
last field are ignored; topic names are never rejected here: the broker validates them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from .apis import ProtocolTable
from .cursor import (
    INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, FieldCursor, check_int, encode_string16,
    encode_topic,
)
from .errors import LocalProtocolError

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_PRODUCE_TAIL = struct.Struct(">ii")  # partition, messageSet size

OFFSETS_LATEST = -1    # OFFSETS time for the visible end E (§5.5)
OFFSETS_EARLIEST = -2  # OFFSETS time for the log start S
ACKS_APPENDED = 1      # PRODUCE_ACKED: answer once appended (§9.2)
ACKS_FLUSHED = -1      # PRODUCE_ACKED: answer once flushed, i.e. visible


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
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """FETCH (type 1); answered with one message set."""

    part: FetchPart
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


@dataclass(frozen=True, slots=True)
class FetchLocalRequest:
    """FETCH_LOCAL (type 104): FETCH's body and answer; on the broker's Unix-domain listener
    the answer may be a segment file's descriptor instead of its bytes (docs §9.8).

    ``part.max_bytes`` bounds an answer passed as a descriptor, ``inline_max_bytes`` one
    sent inline (None: the field is left out, and ``part.max_bytes`` bounds both)."""

    part: FetchPart
    inline_max_bytes: int | None = None
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

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
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class MultiProduceRequest:
    """MULTIPRODUCE (type 3); the broker never answers it."""

    parts: tuple[ProducePart, ...]
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """OFFSETS (type 4); ``time_ms`` -1 = latest, -2 = earliest (§5.5)."""

    topic: str
    partition: int
    time_ms: int
    max_offsets: int
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


@dataclass(frozen=True, slots=True)
class ProduceAckedRequest:
    """PRODUCE_ACKED (type 100): acks 1 = appended, -1 = flushed (§9.2)."""

    acks: int
    timeout_ms: int
    parts: tuple[ProducePart, ...]
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class FetchWaitRequest:
    """FETCH_WAIT (type 101): a MULTIFETCH that may wait for data (§9.3)."""

    max_wait_ms: int
    min_bytes: int
    parts: tuple[FetchPart, ...]
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """METADATA (type 102): brokers and partitions of ``topics`` (empty: every topic)."""

    topics: tuple[str, ...] = ()
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)

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
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


# --------------------------------------------------------------------------- parts


def _encode_produce_part(part: ProducePart) -> list[bytes]:
    messages = bytes(part.messages)
    if len(messages) > INT32_MAX:
        raise LocalProtocolError("message set larger than an int32 size")
    return [
        encode_topic(part.topic),
        _INT32.pack(check_int("partition", part.partition, INT32_MIN, INT32_MAX)),
        _INT32.pack(len(messages)),
        messages,
    ]


def _encode_fetch_part(part: FetchPart) -> bytes:
    return b"".join([
        encode_topic(part.topic),
        _INT32.pack(check_int("partition", part.partition, INT32_MIN, INT32_MAX)),
        _INT64.pack(check_int("offset", part.offset, INT64_MIN, INT64_MAX)),
        _INT32.pack(check_int("max_bytes", part.max_bytes, INT32_MIN, INT32_MAX)),
    ])


def _encode_count(count: int) -> bytes:
    return _INT16.pack(check_int("part count", count, 0, INT16_MAX))


def _produce_part(cur: FieldCursor) -> ProducePart:
    topic, partition = cur.topic(), cur.int32("partition")
    return ProducePart(topic, partition, cur.sized_bytes("messageSet"))


def _fetch_part(cur: FieldCursor) -> FetchPart:
    topic, partition, offset = cur.topic(), cur.int32("partition"), cur.int64("offset")
    return FetchPart(topic, partition, offset, cur.int32("maxSize"))


# --------------------------------------------------------------------------- bodies, one pair per type
# Every encoder takes (request, version) and every decoder (cursor, version), the shape of
# ``requests.Api``; the 0.7 protocol has one version (0), so these ignore it.


def encode_produce(req: ProduceRequest, version: int = 0) -> list[bytes]:
    return _encode_produce_part(req.part)


def decode_produce(cur: FieldCursor, version: int = 0) -> ProduceRequest:
    return ProduceRequest(_produce_part(cur))


def encode_fetch(req: FetchRequest, version: int = 0) -> list[bytes]:
    return [_encode_fetch_part(req.part)]


def decode_fetch(cur: FieldCursor, version: int = 0) -> FetchRequest:
    return FetchRequest(_fetch_part(cur))


def encode_multifetch(req: MultiFetchRequest, version: int = 0) -> list[bytes]:
    return [_encode_count(len(req.parts))] + [_encode_fetch_part(p) for p in req.parts]


def decode_multifetch(cur: FieldCursor, version: int = 0) -> MultiFetchRequest:
    return MultiFetchRequest(tuple(_fetch_part(cur) for _ in range(cur.count("part count"))))


def encode_multiproduce(req: MultiProduceRequest, version: int = 0) -> list[bytes]:
    return [_encode_count(len(req.parts))] + [b for p in req.parts for b in _encode_produce_part(p)]


def decode_multiproduce(cur: FieldCursor, version: int = 0) -> MultiProduceRequest:
    return MultiProduceRequest(tuple(_produce_part(cur) for _ in range(cur.count("part count"))))


def encode_offsets(req: OffsetsRequest, version: int = 0) -> list[bytes]:
    return [
        encode_topic(req.topic),
        _INT32.pack(check_int("partition", req.partition, INT32_MIN, INT32_MAX)),
        _INT64.pack(check_int("time_ms", req.time_ms, INT64_MIN, INT64_MAX)),
        _INT32.pack(check_int("max_offsets", req.max_offsets, INT32_MIN, INT32_MAX)),
    ]


def decode_offsets(cur: FieldCursor, version: int = 0) -> OffsetsRequest:
    topic = cur.topic()
    partition = cur.int32("partition")
    time_ms = cur.int64("time")
    return OffsetsRequest(topic, partition, time_ms, cur.int32("maxNumOffsets"))


def encode_produce_acked(req: ProduceAckedRequest, version: int = 0) -> list[bytes]:
    head = _INT16.pack(check_int("acks", req.acks, INT16_MIN, INT16_MAX))
    head += _INT32.pack(check_int("timeout_ms", req.timeout_ms, INT32_MIN, INT32_MAX))
    return [head, _encode_count(len(req.parts))] + [b for p in req.parts for b in _encode_produce_part(p)]


def decode_produce_acked(cur: FieldCursor, version: int = 0) -> ProduceAckedRequest:
    acks = cur.int16("acks")
    timeout_ms = cur.int32("timeout_ms")
    parts = tuple(_produce_part(cur) for _ in range(cur.count("part count")))
    return ProduceAckedRequest(acks, timeout_ms, parts)


def encode_fetch_wait(req: FetchWaitRequest, version: int = 0) -> list[bytes]:
    head = _INT32.pack(check_int("max_wait_ms", req.max_wait_ms, INT32_MIN, INT32_MAX))
    head += _INT32.pack(check_int("min_bytes", req.min_bytes, INT32_MIN, INT32_MAX))
    return [head, _encode_count(len(req.parts))] + [_encode_fetch_part(p) for p in req.parts]


def decode_fetch_wait(cur: FieldCursor, version: int = 0) -> FetchWaitRequest:
    max_wait_ms = cur.int32("max_wait_ms")
    min_bytes = cur.int32("min_bytes")
    parts = tuple(_fetch_part(cur) for _ in range(cur.count("part count")))
    return FetchWaitRequest(max_wait_ms, min_bytes, parts)


def encode_metadata(req: MetadataRequest, version: int = 0) -> list[bytes]:
    return [_encode_count(len(req.topics))] + [encode_topic(t) for t in req.topics]


def decode_metadata(cur: FieldCursor, version: int = 0) -> MetadataRequest:
    return MetadataRequest(tuple(cur.topic() for _ in range(cur.count("topic count"))))


def encode_create_topic(req: CreateTopicRequest, version: int = 0) -> list[bytes]:
    body = [encode_topic(req.topic), _INT32.pack(check_int("partitions", req.partitions, INT32_MIN, INT32_MAX))]
    if req.settings:  # absent when there are none: a request without settings has no count field (§9.5)
        body += [_encode_count(len(req.settings))] + [encode_string16(x) for kv in req.settings for x in kv]
    return body


def decode_create_topic(cur: FieldCursor, version: int = 0) -> CreateTopicRequest:
    topic, partitions = cur.topic(), cur.int32("partitions")
    settings = tuple((cur.string16("key"), cur.string16("value")) for _ in range(cur.count("settings")))\
        if cur.remaining else ()
    return CreateTopicRequest(topic, partitions, settings)


def encode_fetch_local(req: FetchLocalRequest, version: int = 0) -> list[bytes]:
    inline = req.inline_max_bytes
    tail = [] if inline is None else [_INT32.pack(check_int("inline_max_bytes", inline, INT32_MIN, INT32_MAX))]
    return [_encode_fetch_part(req.part), *tail]


def decode_fetch_local(cur: FieldCursor, version: int = 0) -> FetchLocalRequest:
    part = _fetch_part(cur)  # inlineMaxSize is optional (docs §9.8)
    return FetchLocalRequest(part, cur.int32("inlineMaxSize") if cur.remaining >= 4 else None)
