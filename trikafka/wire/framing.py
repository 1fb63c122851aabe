"""Bounded, h11-style framing of the length-prefixed 0.7 stream (docs/protocol.md §2).

Both directions use ``size:int32`` + ``size`` bytes.  The readers here do no
I/O: feed received bytes with ``receive_data`` and pull events with
``next_event`` / ``next_frame``, which return ``NEED_DATA`` until a whole frame
is buffered.

Why it is written this way:

* The size prefix is checked against the configured bound *as soon as its 4
  bytes arrive*, before any body byte is kept, so a hostile peer cannot make
  us hold (or allocate) more than the bound.
* Bytes are appended to one ``bytearray`` and consumed from its front
  (CPython makes that O(1)), so many tiny reads cost O(bytes), not O(bytes²).
* A reader that raised stays failed: the stream has lost its framing and no
  later byte can be trusted.  Further data is discarded, not buffered.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from .errors import ErrorCode, ProtocolError, RemoteProtocolError
from .requests import Request, decode_request_body

DEFAULT_MAX_REQUEST_BYTES = 104857600  # max.socket.request.bytes (§2)
SIZE_PREFIX_BYTES = 4
RESPONSE_HEAD_BYTES = SIZE_PREFIX_BYTES + 2  # a response's size prefix and int16 error code

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
# Up to this size a frame is copied out by slicing (two small copies cost less than a
# memoryview's setup); above it through a memoryview (one copy).
_SLICE_COPY_MAX_BYTES = 64 * 1024


class _NeedData(enum.Enum):
    """Sentinel type: the reader needs more bytes before it can say more.

    A one-member enum, so that type checkers narrow ``x is NEED_DATA`` / ``is not``."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"

    __str__ = __repr__


NEED_DATA: Final = _NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """One response as the client sees it: the error code and the payload after it."""

    error_code: ErrorCode
    payload: bytes


class _FrameBuffer:
    """Splits a byte stream into ``size``-prefixed frames with ``min <= size <= max``."""

    __slots__ = ("_buf", "_frame_size", "_error", "_min_size", "_max_size", "_what")

    def __init__(self, min_size: int, max_size: int, what: str):
        if max_size < min_size:
            raise ValueError(f"max frame size {max_size} is below the minimum {min_size}")
        self._buf = bytearray()
        self._frame_size: int | None = None
        self._error: ProtocolError | None = None
        self._min_size = min_size
        self._max_size = max_size
        self._what = what

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._error is not None

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            return  # framing is lost; keeping more bytes would only cost memory
        self._buf += data
        if self._frame_size is None and len(self._buf) >= SIZE_PREFIX_BYTES:
            self._read_prefix()

    def _read_prefix(self) -> None:
        (size,) = _INT32.unpack_from(self._buf, 0)
        error = self.size_error(size)
        if error is not None:
            self.fail(error)
            return
        self._frame_size = size

    def size_error(self, size: int) -> RemoteProtocolError | None:
        """The error a frame of ``size`` bytes is, if it is out of bounds."""
        if size < self._min_size or size > self._max_size:
            return RemoteProtocolError(f"{self._what} size {size} outside [{self._min_size}, {self._max_size}]")
        return None

    def fail(self, error: ProtocolError) -> None:
        self._error = error
        self._buf = bytearray()  # release whatever was held
        self._frame_size = None

    def next_body(self) -> bytes | None:
        """The next frame's bytes after its size prefix, or None while it is incomplete.

        ``next_frame`` without the split: the request reader's per-request path.
        """
        size = self._frame_size
        if size is None:  # also after a failure, which clears the size
            if self._error is not None:
                raise self._error
            if len(self._buf) < SIZE_PREFIX_BYTES:
                return None
            self._read_prefix()
            if self._error is not None:
                raise self._error
            size = self._frame_size
            assert size is not None
        buf = self._buf
        end = SIZE_PREFIX_BYTES + size
        if len(buf) < end:
            return None
        if size <= _SLICE_COPY_MAX_BYTES:
            body = bytes(buf[SIZE_PREFIX_BYTES:end])
        else:  # one copy, not two, of a large frame
            with memoryview(buf) as view:
                body = bytes(view[SIZE_PREFIX_BYTES:end])
        del buf[:end]
        self._frame_size = None
        if len(buf) >= SIZE_PREFIX_BYTES:
            self._read_prefix()  # check a pipelined frame's prefix right away
        return body

    def next_frame(self, head_bytes: int = 0) -> tuple[bytes, bytes] | None:
        """The next frame after its size prefix, split after ``head_bytes``.

        Returns ``(head, rest)`` or None while the frame is incomplete; the
        split avoids copying a large payload twice.
        """
        assert 0 <= head_bytes <= self._min_size
        if self._error is not None:
            raise self._error
        if self._frame_size is None:
            if len(self._buf) < SIZE_PREFIX_BYTES:
                return None
            self._read_prefix()
            if self._error is not None:
                raise self._error
        size = self._frame_size
        assert size is not None
        end = SIZE_PREFIX_BYTES + size
        if len(self._buf) < end:
            return None
        split = SIZE_PREFIX_BYTES + head_bytes
        with memoryview(self._buf) as view:
            head, rest = bytes(view[SIZE_PREFIX_BYTES:split]), bytes(view[split:end])
        del self._buf[:end]
        self._frame_size = None
        if len(self._buf) >= SIZE_PREFIX_BYTES:
            self._read_prefix()  # check a pipelined frame's prefix right away
        return head, rest


class RequestReader:
    """Server side: turns received bytes into ``Request`` events.

    ``next_event()`` returns a request or ``NEED_DATA``, and raises
    ``RemoteProtocolError`` for every connection-closing condition of §2
    it can see (the broker then closes without answering).
    """

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
        if max_request_bytes < 2:
            raise ValueError("max_request_bytes must leave room for the request type")
        self.max_request_bytes = max_request_bytes
        # size <= 0 closes the connection (§2); a size of 1 cannot hold the
        # int16 type and is caught as a short body by the decoder.
        self._frames = _FrameBuffer(1, max_request_bytes, "request")

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as requests (0 after an error)."""
        return self._frames.buffered_bytes

    @property
    def failed(self) -> bool:
        return self._frames.failed

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes.  Never raises; errors surface from ``next_event``."""
        self._frames.receive(data)

    def next_event(self) -> Request | _NeedData:
        body = self._frames.next_body()
        if body is None:
            return NEED_DATA
        try:
            return decode_request_body(body)
        except RemoteProtocolError as exc:
            self._frames.fail(exc)
            raise


class ResponseReader:
    """Client side: turns received bytes into ``ResponseFrame``s (§2)."""

    def __init__(self, max_response_bytes: int):
        if max_response_bytes < 2:
            raise ValueError("max_response_bytes must leave room for the error code")
        self.max_response_bytes = max_response_bytes
        self._frames = _FrameBuffer(2, max_response_bytes, "response")

    @property
    def buffered_bytes(self) -> int:
        return self._frames.buffered_bytes

    @property
    def failed(self) -> bool:
        return self._frames.failed

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes.  Never raises; errors surface from ``next_frame``."""
        self._frames.receive(data)

    def decode_head(self, head: bytes | bytearray | memoryview) -> tuple[ErrorCode, int]:
        """For a caller that receives a response's payload itself (straight into its own
        buffer): the error code and payload size of the response whose first
        ``RESPONSE_HEAD_BYTES`` bytes are ``head``, checked like any frame.

        Only while nothing is buffered here (the stream is at a frame boundary);
        raises ``RemoteProtocolError`` for a size out of bounds.
        """
        assert self._frames.buffered_bytes == 0 and len(head) == RESPONSE_HEAD_BYTES
        (size,) = _INT32.unpack_from(head, 0)
        error = self._frames.size_error(size)
        if error is not None:
            raise error
        (code,) = _INT16.unpack_from(head, SIZE_PREFIX_BYTES)
        return ErrorCode.from_wire(code), size - 2

    def next_frame(self) -> ResponseFrame | _NeedData:
        split = self._frames.next_frame(head_bytes=2)
        if split is None:
            return NEED_DATA
        head, payload = split
        (code,) = _INT16.unpack_from(head, 0)
        return ResponseFrame(ErrorCode.from_wire(code), payload)
