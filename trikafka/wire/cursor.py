"""Fields of the wire (sans-I/O): reading a peer's bytes field by field, checking and
encoding the ints, topics and free-text string16s we send.

``FieldCursor`` reads request bodies and extension response payloads; running
short is always the peer's fault (``RemoteProtocolError``).
"""

from __future__ import annotations

import struct

from .errors import LocalProtocolError, RemoteProtocolError
from .topics import TOPIC_ENCODING, TOPIC_ERRORS

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
STRING16_MAX_BYTES = 32767

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def check_int(name: str, value: int, low: int, high: int) -> int:
    """``value`` if it is an int in ``[low, high]``; else LocalProtocolError naming ``name``."""
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


def encode_string16(text: str) -> bytes:
    """UTF-8 text as a string16; LocalProtocolError if longer than a string16 allows."""
    raw = text.encode("utf-8")
    if len(raw) > STRING16_MAX_BYTES:
        raise LocalProtocolError(f"string of {len(raw)} bytes is longer than a string16 allows")
    return _INT16.pack(len(raw)) + raw


class FieldCursor:
    """Reads big-endian fields from a peer's bytes; running short is the peer's fault.

    Used for request bodies here and for extension response payloads
    (``metadata.py``); ``kind`` names which in error messages.
    """

    __slots__ = ("_data", "_pos", "_end", "_kind")

    def __init__(self, data: bytes, pos: int = 0, kind: str = "request body", end: int | None = None):
        """Read ``data[pos:end]`` (``end`` None: to the end of ``data``)."""
        self._data = data
        self._pos = pos
        self._end = len(data) if end is None else end
        self._kind = kind

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def _take(self, n: int, what: str) -> int:
        start = self._pos
        if self._end - start < n:
            raise RemoteProtocolError(f"{self._kind} too short for {what}")
        self._pos = start + n
        return start

    # int16/int32 inline ``_take``: they run several times per request.

    def int16(self, what: str) -> int:
        start = self._pos
        if self._end - start < 2:
            raise RemoteProtocolError(f"{self._kind} too short for {what}")
        self._pos = start + 2
        return _INT16.unpack_from(self._data, start)[0]

    def int32(self, what: str) -> int:
        start = self._pos
        if self._end - start < 4:
            raise RemoteProtocolError(f"{self._kind} too short for {what}")
        self._pos = start + 4
        return _INT32.unpack_from(self._data, start)[0]

    def int64(self, what: str) -> int:
        return _INT64.unpack_from(self._data, self._take(8, what))[0]

    def count(self, what: str) -> int:
        n = self.int16(what)
        if n < 0:
            raise RemoteProtocolError(f"negative {what} {n}")
        return n

    def _span(self, length: struct.Struct, what: str, length_suffix: str) -> tuple[int, int]:
        """The bounds of a field prefixed by its length (read with ``length``); moves past it.

        Messages name the length as ``what + length_suffix``, built only on an error."""
        data, start = self._data, self._pos
        if self._end - start < length.size:
            raise RemoteProtocolError(f"{self._kind} too short for {what}{length_suffix}")
        (n,) = length.unpack_from(data, start)
        if n < 0:
            raise RemoteProtocolError(f"negative {what}{length_suffix} {n}")
        start += length.size
        end = start + n
        if self._end < end:
            self._pos = start
            raise RemoteProtocolError(f"{self._kind} too short for {what}")
        self._pos = end
        return start, end

    def topic(self) -> str:
        start, end = self._span(_INT16, "topic", " length")
        return self._data[start:end].decode(TOPIC_ENCODING, TOPIC_ERRORS)

    def sized_bytes(self, what: str) -> bytes:
        start, end = self._span(_INT32, what, " size")
        return self._data[start:end]

    def string16(self, what: str) -> str:
        """A UTF-8 string16 (RemoteProtocolError if it is not UTF-8)."""
        start, end = self._span(_INT16, what, " length")
        try:
            return self._data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError(f"{what} is not UTF-8") from None
