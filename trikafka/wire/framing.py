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
from .requests import Request, decode_request

DEFAULT_MAX_REQUEST_BYTES = 104857600  # max.socket.request.bytes (§2)
SIZE_PREFIX_BYTES = 4
RESPONSE_HEAD_BYTES = SIZE_PREFIX_BYTES + 2  # a response's size prefix and int16 error code

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
# Up to this size frames are copied out by slicing (two small copies cost less than a
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

    def _front_size(self) -> int | None:
        """The size of the frame at the front, None until its prefix is here; raises once failed."""
        if self._error is not None:
            raise self._error
        if self._frame_size is None:
            if len(self._buf) < SIZE_PREFIX_BYTES:
                return None
            self._read_prefix()
            if self._error is not None:
                raise self._error
        return self._frame_size

    def take_frames(self) -> bytes | None:
        """Every whole frame buffered, size prefixes included, as one ``bytes``; None if none.

        One copy for all of them, which the request reader then decodes in place.  The run
        stops before a frame whose size prefix is out of bounds: that prefix fails the
        buffer when its turn comes, after the frames before it.
        """
        size = self._front_size()
        if size is None:
            return None
        buf = self._buf
        have, end = len(buf), 0
        while end + SIZE_PREFIX_BYTES + size <= have:
            end += SIZE_PREFIX_BYTES + size
            if have - end < SIZE_PREFIX_BYTES:
                break
            (size,) = _INT32.unpack_from(buf, end)
            if not self._min_size <= size <= self._max_size:
                break
        if end == 0:
            return None
        if end <= _SLICE_COPY_MAX_BYTES:
            frames = bytes(buf[:end])
        else:  # one copy, not two, of large frames
            with memoryview(buf) as view:
                frames = bytes(view[:end])
        del buf[:end]
        self._frame_size = None
        if len(buf) >= SIZE_PREFIX_BYTES:
            self._read_prefix()  # check a pipelined frame's prefix right away
        return frames

    def next_frame(self, head_bytes: int = 0) -> tuple[bytes, bytes] | None:
        """The next frame after its size prefix, split after ``head_bytes``.

        Returns ``(head, rest)`` or None while the frame is incomplete; the
        split avoids copying a large payload twice.
        """
        assert 0 <= head_bytes <= self._min_size
        size = self._front_size()
        if size is None:
            return None
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
        # Whole frames taken from the buffer and not yet decoded: ``_taken[_next:]``.
        self._taken = b""
        self._next = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as requests (0 after an error)."""
        return self._frames.buffered_bytes + len(self._taken) - self._next

    @property
    def failed(self) -> bool:
        return self._frames.failed

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes.  Never raises; errors surface from ``next_event``."""
        self._frames.receive(data)

    def next_event(self) -> Request | _NeedData:
        taken, start = self._taken, self._next
        if start >= len(taken):
            cut = self._frames.take_frames()
            if cut is None:
                return NEED_DATA
            self._taken = taken = cut
            start = 0
        # Every prefix in ``taken`` was checked when it was taken.
        end = start + SIZE_PREFIX_BYTES + _INT32.unpack_from(taken, start)[0]
        self._next = end
        try:
            return decode_request(taken, start + SIZE_PREFIX_BYTES, end)
        except RemoteProtocolError as exc:
            self._taken, self._next = b"", 0
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
