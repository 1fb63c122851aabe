"""Responses (docs/protocol.md §2, §5.2, §5.3, §5.5, §9): broker-side encoders, client-side decoders.

Fetch responses are returned as a list of *chunks*: header bytes, then the
message-set data as either ``bytes`` or a ``FileRegion``.  A ``FileRegion``
names bytes of a segment file so the broker's I/O layer can ``sendfile`` them
instead of copying them through Python (the one place where this sans-I/O
codec does not return plain bytes; docs/protocol.md §2 says the message sets
are sent with ``sendfile`` from the segment files).

The client-side decoders take the *payload* of a ``ResponseFrame`` (the bytes
after ``size`` and ``errorCode``) and raise ``RemoteProtocolError`` when the
broker sent something malformed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, Union

from .errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from .cursor import INT32_MAX, encode_topic
from .topics import TOPIC_ENCODING, TOPIC_ERRORS

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_RESPONSE_HEADER = struct.Struct(">ih")  # size, errorCode
_ACKED_PART_TAIL = struct.Struct(">ihqq")  # partition, error, baseOffset, nextOffset


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of ``source`` starting at ``position``.

    ``source`` offers ``fileno()`` (for sendfile) and ``pread(position, n) -> bytes``
    (the fallback when the file has no real descriptor, e.g. an in-memory fs).
    """

    source: Any
    position: int
    length: int

    def __post_init__(self) -> None:
        if self.position < 0 or self.length < 0:
            raise LocalProtocolError(f"bad file region position={self.position} length={self.length}")

    def read(self) -> bytes:
        """The region's bytes, read through ``source.pread``."""
        data = self.source.pread(self.position, self.length)
        if len(data) != self.length:
            raise OSError(f"short read of a file region: {len(data)} of {self.length} bytes")
        return bytes(data)

    def __len__(self) -> int:
        return self.length


Chunk = Union[bytes, FileRegion]


@dataclass(frozen=True, slots=True)
class ChunkSequence:
    """Message-set data made of several chunks sent back to back (a synthesized
    padding entry, then a file region); ``len`` is their total bytes."""

    chunks: tuple[Chunk, ...]

    def __len__(self) -> int:
        return sum(len(c) for c in self.chunks)

    def read(self) -> bytes:
        """All the bytes (file regions read through ``pread``)."""
        return b"".join(c.read() if isinstance(c, FileRegion) else c for c in self.chunks)


FetchData = Union[bytes, bytearray, memoryview, FileRegion, ChunkSequence, None]


def _data_chunks(data: FetchData) -> list[Chunk]:
    if data is None or len(data) == 0:
        return []
    if isinstance(data, FileRegion):
        return [data]
    if isinstance(data, ChunkSequence):
        return [c for c in data.chunks if len(c)]
    return [bytes(data)]


def _response_header(error_code: int, payload_bytes: int) -> bytes:
    size = 2 + payload_bytes
    if size > INT32_MAX:
        raise LocalProtocolError(f"response of {size} bytes does not fit an int32 size")
    return _RESPONSE_HEADER.pack(size, int(error_code))


def encode_fetch_response(error_code: ErrorCode, data: FetchData) -> list[Chunk]:
    """FETCH response (§5.2): ``size, errorCode`` header, then the data chunks if any."""
    chunks = _data_chunks(data)
    return [_response_header(error_code, sum(len(c) for c in chunks)), *chunks]


def encode_multifetch_response(parts: Sequence[tuple[ErrorCode, FetchData]]) -> list[Chunk]:
    """MULTIFETCH / FETCH_WAIT response (§5.3, §9.3): parts in request order.

    Adjacent header bytes are merged so a part with no data costs no extra chunk.
    """
    chunks: list[Chunk] = []
    pending = bytearray()
    total = 0
    for error_code, data in parts:
        data_chunks = _data_chunks(data)
        length = sum(len(c) for c in data_chunks)
        pending += _response_header(error_code, length)
        total += 6 + length
        if data_chunks:
            chunks.append(bytes(pending))
            chunks.extend(data_chunks)
            pending = bytearray()
    if pending:
        chunks.append(bytes(pending))
    header = _response_header(ErrorCode.NO_ERROR, total)
    if chunks and isinstance(chunks[0], bytes):
        chunks[0] = header + chunks[0]
    else:
        chunks.insert(0, header)
    return chunks


# FETCH_LOCAL (docs §9.8): after size and errorCode come position:int64 and length:int32; the
# bytes follow inline only when position is FETCH_LOCAL_INLINE, else a descriptor carries them.
_LOCAL_TAIL = struct.Struct(">qi")
FETCH_LOCAL_TAIL_BYTES = _LOCAL_TAIL.size
FETCH_LOCAL_INLINE = -1


def encode_fetch_local_response(error_code: ErrorCode, data: FetchData) -> list[Chunk]:
    """FETCH_LOCAL answered inline (docs §9.8): FETCH's answer behind position -1 and its length."""
    chunks = _data_chunks(data)
    length = sum(len(c) for c in chunks)
    head = _response_header(error_code, _LOCAL_TAIL.size + length) + _LOCAL_TAIL.pack(FETCH_LOCAL_INLINE, length)
    return [head, *chunks]


def encode_fetch_local_descriptor(region: FileRegion) -> bytes:
    """FETCH_LOCAL answered with a descriptor (docs §9.8): the whole frame, which the segment
    file's descriptor travels with; the answer is the ``region`` of that file."""
    return _response_header(ErrorCode.NO_ERROR, _LOCAL_TAIL.size) + _LOCAL_TAIL.pack(region.position, region.length)


def decode_fetch_local_tail(payload_bytes: int, tail: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(position, length)`` of a FETCH_LOCAL answer whose payload (after errorCode) is
    ``payload_bytes`` long and starts with the 12 bytes ``tail``; position -1 means the
    ``length`` bytes follow inline.  Raises ``RemoteProtocolError`` when these disagree."""
    if payload_bytes < _LOCAL_TAIL.size:
        raise RemoteProtocolError(f"FETCH_LOCAL response payload of {payload_bytes} bytes is too short")
    position, length = _LOCAL_TAIL.unpack_from(tail, 0)
    follow = payload_bytes - _LOCAL_TAIL.size
    if length < 0 or position < FETCH_LOCAL_INLINE or follow != (length if position == FETCH_LOCAL_INLINE else 0):
        raise RemoteProtocolError(
            f"FETCH_LOCAL response with position {position}, length {length} and {follow} bytes after them")
    return position, length


def encode_offsets_response(offsets: Sequence[int]) -> bytes:
    """OFFSETS response (§5.5): errorCode 0, ``n``, then ``n`` int64 offsets."""
    try:
        body = _INT32.pack(len(offsets)) + b"".join(_INT64.pack(o) for o in offsets)
    except struct.error as exc:
        raise LocalProtocolError(f"offset does not fit an int64: {exc}") from None
    return _response_header(ErrorCode.NO_ERROR, len(body)) + body


@dataclass(frozen=True, slots=True)
class ProduceAckedResult:
    """Outcome of one PRODUCE_ACKED part (§9.2); offsets are -1 on error."""

    topic: str
    partition: int
    error: ErrorCode
    base_offset: int
    next_offset: int


def encode_produce_acked_response(results: Sequence[ProduceAckedResult]) -> bytes:
    """PRODUCE_ACKED response (§9.2): errorCode 0, ``count``, one record per part."""
    if len(results) > 0x7FFF:
        raise LocalProtocolError("more results than an int16 count allows")
    body = [_INT16.pack(len(results))]
    for r in results:
        body.append(encode_topic(r.topic))
        try:
            body.append(_ACKED_PART_TAIL.pack(r.partition, int(r.error), r.base_offset, r.next_offset))
        except struct.error as exc:
            raise LocalProtocolError(f"result field out of range in {r!r}: {exc}") from None
    payload = b"".join(body)
    return _response_header(ErrorCode.NO_ERROR, len(payload)) + payload


def chunks_length(chunks: Iterable[Chunk]) -> int:
    """Total bytes the chunks put on the wire."""
    return sum(len(c) for c in chunks)


def chunks_to_bytes(chunks: Iterable[Chunk]) -> bytes:
    """Materialize chunks (reading file regions); for tests and non-sendfile paths."""
    return b"".join(c.read() if isinstance(c, FileRegion) else c for c in chunks)


# --------------------------------------------------------------------------- client side


def _need(payload: bytes, pos: int, n: int, what: str) -> None:
    if len(payload) - pos < n:
        raise RemoteProtocolError(f"response payload too short for {what}")


def decode_multifetch_payload(payload: bytes) -> list[tuple[ErrorCode, bytes]]:
    """Parts of a MULTIFETCH / FETCH_WAIT response payload, in request order.

    The payload holds no count: parts run to its end, each ``size_i >= 2``.
    """
    parts: list[tuple[ErrorCode, bytes]] = []
    pos, end = 0, len(payload)
    while pos < end:
        _need(payload, pos, 6, "a part header")
        size, code = _RESPONSE_HEADER.unpack_from(payload, pos)
        if size < 2:
            raise RemoteProtocolError(f"multifetch part size {size} is below 2")
        _need(payload, pos + 4, size, "a part's message set")
        parts.append((ErrorCode.from_wire(code), payload[pos + 6:pos + 4 + size]))
        pos += 4 + size
    return parts


def decode_offsets_payload(payload: bytes) -> list[int]:
    """Offsets of an OFFSETS response payload (``n`` then ``n`` int64)."""
    _need(payload, 0, 4, "the offset count")
    (n,) = _INT32.unpack_from(payload, 0)
    if n < 0:
        raise RemoteProtocolError(f"negative offset count {n}")
    _need(payload, 4, 8 * n, f"{n} offsets")
    return [_INT64.unpack_from(payload, 4 + 8 * i)[0] for i in range(n)]


def decode_produce_acked_payload(payload: bytes) -> list[ProduceAckedResult]:
    """Per-part results of a PRODUCE_ACKED response payload."""
    _need(payload, 0, 2, "the part count")
    (count,) = _INT16.unpack_from(payload, 0)
    if count < 0:
        raise RemoteProtocolError(f"negative part count {count}")
    results: list[ProduceAckedResult] = []
    pos = 2
    for _ in range(count):
        _need(payload, pos, 2, "a topic length")
        (n,) = _INT16.unpack_from(payload, pos)
        if n < 0:
            raise RemoteProtocolError(f"negative topic length {n}")
        _need(payload, pos + 2, n + _ACKED_PART_TAIL.size, "a part result")
        topic = payload[pos + 2:pos + 2 + n].decode(TOPIC_ENCODING, TOPIC_ERRORS)
        partition, code, base, nxt = _ACKED_PART_TAIL.unpack_from(payload, pos + 2 + n)
        results.append(ProduceAckedResult(topic, partition, ErrorCode.from_wire(code), base, nxt))
        pos += 2 + n + _ACKED_PART_TAIL.size
    return results


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One fetched part, as both clients return it: error code, message-set bytes
    (the tail may be cut mid-entry), and the offset the fetch started at."""

    error: ErrorCode
    data: bytes
    offset: int


def top_level_error(error_code: ErrorCode, what: str) -> str | None:
    """The one check of a response's top-level error, shared by every client.

    MULTIFETCH, OFFSETS, PRODUCE_ACKED, METADATA and CREATE_TOPIC always carry 0
    at the top level (§5.3, §5.5, §9.2); their per-part errors sit in the
    payload.  Returns None when ``error_code`` is 0, else the one-line reason the
    caller raises with (FETCH is the exception: its top-level code is the part's).
    """
    if error_code == ErrorCode.NO_ERROR:
        return None
    return f"{what} response carried a top-level error"
