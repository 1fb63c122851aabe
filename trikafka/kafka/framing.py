"""Frames, request and response headers of the Kafka protocol (docs/protocol.md §16.2), sans I/O.

Both sides:

* ``FrameReader`` splits a received byte stream into ``size``-prefixed frames,
  refusing a size over its bound as soon as the prefix arrives;
* the broker: ``parse_request`` (header v1 or v2 by the version's
  flexibility, then the body through ``kio``), ``encode_response`` and
  ``unsupported_version_response``;
* a client: ``encode_request`` and ``decode_response``.

A response header is ``correlation_id`` alone (v0) or followed by tagged
fields (v1) when the request was flexible; ApiVersions answers always use v0.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import TypeVar, cast

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from .apis import KafkaApi, api_versions_entries, lookup
from .errors import FrameSizeError, KafkaCodecError, MalformedRequest, MalformedResponse, UnsupportedRequest

SIZE_PREFIX_BYTES = 4
_INT32 = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_REQUEST_HEAD_WITH_CLIENT = struct.Struct(">hhih")  # ... and client_id's length (-1: null)
_NO_TAGGED_FIELDS = b"\x00"

E = TypeVar("E", bound=Entity)


class FrameReader:
    """Splits a byte stream into frames of ``size:int32`` + ``size`` bytes, ``0 <= size <= max_frame_bytes``.

    ``feed`` the bytes received, then take ``next_frame`` until it answers
    None.  A frame is a read-only view of the bytes after its size prefix;
    it stays valid after later calls.  A size out of bounds raises
    ``FrameSizeError`` as soon as its prefix is here, before any byte of the
    frame is kept, and the reader stays failed: the stream has lost its
    framing.
    """

    def __init__(self, max_frame_bytes: int):
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes {max_frame_bytes} is negative")
        self.max_frame_bytes = max_frame_bytes
        self._pending = bytearray()  # bytes received after the last whole frame taken out
        self._whole = 0  # ``_pending[:_whole]`` is whole frames whose size prefixes were checked
        # Whole frames taken out of ``_pending`` in one copy, handed out from ``_next``.
        self._taken = memoryview(b"")
        self._next = 0
        self._error: FrameSizeError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._pending) + len(self._taken) - self._next

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes; a bad size prefix among them raises ``FrameSizeError``."""
        if self._error is not None:
            raise self._error
        self._pending += data
        self._whole_frames_bytes()

    def next_frame(self) -> memoryview | None:
        """The next whole frame (without its size prefix), or None until one is buffered."""
        if self._error is not None:
            raise self._error
        if self._next >= len(self._taken):
            end = self._whole_frames_bytes()
            if end == 0:
                return None
            # The whole frames are handed out as views of the buffer they arrived in, which is
            # never written again: only the bytes after them (the start of a frame still coming)
            # are copied, into a fresh buffer for what arrives next.
            whole = self._pending
            self._pending = whole[end:]
            self._taken = memoryview(whole).toreadonly()[:end]  # decoded as is, not copied first
            self._next = 0
            self._whole = 0
        start = self._next + SIZE_PREFIX_BYTES
        end = start + _INT32.unpack_from(self._taken, self._next)[0]
        self._next = end
        return self._taken[start:end]

    def _whole_frames_bytes(self) -> int:
        """Bytes of ``_pending`` that whole frames fill; checks every size prefix it reaches."""
        pending, pos = self._pending, self._whole
        while len(pending) - pos >= SIZE_PREFIX_BYTES:
            (size,) = _INT32.unpack_from(pending, pos)
            if not 0 <= size <= self.max_frame_bytes:
                self._error = FrameSizeError(size, self.max_frame_bytes)
                self._pending = bytearray()  # framing is lost: hold nothing more
                raise self._error
            if len(pending) - pos - SIZE_PREFIX_BYTES < size:
                break
            pos += SIZE_PREFIX_BYTES + size
        self._whole = pos
        return pos


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request of a served api and version (§16.3)."""

    api: KafkaApi
    api_version: int
    correlation_id: int
    client_id: str | None
    body: RequestPayload

    @property
    def api_key(self) -> int:
        return int(self.api)


def parse_request(frame: bytes | bytearray | memoryview) -> Request:
    """Decode one request frame (the bytes after its size prefix), §16.2.

    Raises ``UnsupportedRequest`` for an api or version outside the table of
    §16.3 and ``MalformedRequest`` for a header or body that does not decode;
    bytes after a whole body are ignored.
    """
    frame = _read_only(frame)
    if len(frame) < _REQUEST_HEAD.size:
        raise MalformedRequest(f"a request of {len(frame)} bytes cannot hold a header")
    api_key, api_version, correlation_id = _REQUEST_HEAD.unpack_from(frame, 0)
    api = lookup(api_key)
    if api is None or not api.supports(api_version):
        try:
            client_id = _read(RequestHeaderV1, frame, 0)[0].client_id
        except MalformedRequest:
            client_id = None
        raise UnsupportedRequest(api_key, api_version, correlation_id, client_id, api)
    header: RequestHeaderV1 | RequestHeaderV2
    if api.flexible(api_version):
        header, offset = _read(RequestHeaderV2, frame, 0)
    else:
        header, offset = _read(RequestHeaderV1, frame, 0)
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka 2.x sends three
    # (an extra tagged-field section) after some flexible Metadata bodies.
    body, _end = _read(api.request_class(api_version), frame, offset)
    return Request(api, api_version, correlation_id, header.client_id, body)


def encode_response(request: Request, body: ResponsePayload) -> bytes:
    """The response frame (size prefix, header, ``body``) answering ``request``, §16.2.

    ``body`` must be the response class of the request's api and version.
    """
    expected = request.api.response_class(request.api_version)
    if type(body) is not expected:
        raise TypeError(f"{request.api.label} v{request.api_version} answers {expected.__name__} "
                        f"v{expected.__version__}, not {type(body).__name__} v{body.__version__}")
    return _frame(request.correlation_id, _response_header_tags(request.api, request.api_version), body)


def unsupported_version_response(error: UnsupportedRequest) -> bytes | None:
    """The answer to a request of a known api at a version outside §16.3's range; None: close.

    ApiVersions is answered with ``UNSUPPORTED_VERSION`` and the table in a
    version-0 body, which every client reads.  Any other api, and an unknown
    one, gets None: its bodies have no field that carries an error for the
    whole request, so the connection closes (as Kafka does).
    """
    if error.api is not KafkaApi.API_VERSIONS:
        return None
    entries = cast(tuple[ApiVersionV0, ...], api_versions_entries(0))  # version 0's entries are v0's class
    body = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=entries)
    return _frame(error.correlation_id, b"", body)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: RequestPayload) -> bytes:
    """A request frame (size prefix, header v1 or v2, ``body``) of a served api and version."""
    api = _served(api_key, version)
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(request_header(api_key, version, correlation_id, client_id, flexible=api.flexible(version)))
    _write(out, body)
    return _prefixed(out)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None, *,
                   flexible: bool) -> bytes:
    """The bytes of request header v1 (v2 when ``flexible``: an empty tagged-field section after it),
    §16.2: what kio's ``RequestHeader`` writes, packed directly (every request a client sends has one,
    and kio's generic writer cost thirty times as much)."""
    try:
        if client_id is None:
            return _REQUEST_HEAD_WITH_CLIENT.pack(api_key, version, correlation_id, -1) + (
                _NO_TAGGED_FIELDS if flexible else b"")
        raw = client_id.encode()
        return (_REQUEST_HEAD_WITH_CLIENT.pack(api_key, version, correlation_id, len(raw)) + raw
                + (_NO_TAGGED_FIELDS if flexible else b""))
    except struct.error as exc:
        raise KafkaCodecError(f"request header does not encode: {exc}") from None


def decode_response(api_key: int, version: int, frame: bytes | bytearray | memoryview, *,
                    whole: bool = False) -> tuple[int, ResponsePayload]:
    """A client's reading of a response frame (the bytes after its size prefix): its correlation id and body.

    Raises ``MalformedResponse`` when the bytes do not decode as that api and version; bytes
    after a whole body are ignored, as in a request (§16.2), unless ``whole`` (the body must end
    the frame: how an ApiVersions reader tells the version of an answer apart).
    """
    api = _served(api_key, version)
    frame = _read_only(frame)
    try:
        if _response_header_tags(api, version):
            header, offset = entity_reader(ResponseHeaderV1)(frame, 0)  # from 0: the size read is the offset after
            correlation_id = int(header.correlation_id)
        else:
            (correlation_id,) = _INT32.unpack_from(frame, 0)
            offset = _INT32.size
        body, size = entity_reader(api.response_class(version))(frame, offset)
    except Exception as exc:  # kio's readers raise their own errors, struct.error, UnicodeDecodeError
        raise MalformedResponse(f"{api.label} v{version} response: {exc}") from None
    if whole and offset + size != len(frame):
        raise MalformedResponse(f"{api.label} v{version} response: {len(frame) - offset - size} bytes after the body")
    return correlation_id, body


def response_header(correlation_id: int, api: KafkaApi, version: int) -> bytes:
    """The header bytes of a response to ``api`` at ``version``, after the size prefix (§16.2)."""
    return _INT32.pack(correlation_id) + _response_header_tags(api, version)


def _response_header_tags(api: KafkaApi, version: int) -> bytes:
    flexible = api.flexible(version) and api is not KafkaApi.API_VERSIONS
    return _NO_TAGGED_FIELDS if flexible else b""


def _served(api_key: int, version: int) -> KafkaApi:
    api = lookup(api_key)
    if api is None or not api.supports(version):
        raise KafkaCodecError(f"api key {api_key} v{version} is not in the table of §16.3")
    return api


def _read_only(frame: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``frame`` as kio's readers take it: a read-only buffer (a writable one is copied)."""
    if isinstance(frame, bytes) or (isinstance(frame, memoryview) and frame.readonly):
        return frame
    return bytes(frame)


def _read(entity_class: type[E], frame: bytes | memoryview, offset: int) -> tuple[E, int]:
    """The entity at ``offset`` and the offset after it."""
    try:
        entity, size = entity_reader(entity_class)(frame, offset)
        return entity, offset + size
    except Exception as exc:  # kio's readers raise their own errors, struct.error, UnicodeDecodeError
        raise MalformedRequest(f"{entity_class.__name__} v{entity_class.__version__}: {exc}") from None


def _write(out: io.BytesIO, entity: Entity) -> None:
    try:
        entity_writer(type(entity))(out, entity)
    except Exception as exc:  # kio's writers raise their own errors and struct.error on out-of-range values
        raise KafkaCodecError(f"{type(entity).__name__} v{entity.__version__} does not encode: {exc}") from None


def _frame(correlation_id: int, header_tags: bytes, body: Entity) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_INT32.pack(correlation_id))
    out.write(header_tags)
    _write(out, body)
    return _prefixed(out)


def _prefixed(out: io.BytesIO) -> bytes:
    """The frame in ``out`` with its size written over the 4 placeholder bytes at its start."""
    frame = out.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - SIZE_PREFIX_BYTES)
    del frame
    return out.getvalue()
