"""The opt-in audit envelope around a message payload (docs/protocol.md §13.1).

Sans-I/O: ``encode_envelope`` wraps a payload, ``decode_envelope`` unwraps one
or returns None for a plain payload.  The envelope lives inside the payload,
so the message around it stays an ordinary 0.7 message.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .crc import crc32

MARKER = b"\xa7TKE"
VERSION = 1
MAX_NAME_BYTES = 255
# marker, version, headerCrc
_PREFIX = struct.Struct(">4sbI")
# createdMs, sequence, then origin and producerId as string16
_FIXED = struct.Struct(">qq")
_INT16 = struct.Struct(">h")
# The smallest envelope: prefix, fixed fields, two empty strings.
MIN_ENVELOPE_BYTES = _PREFIX.size + _FIXED.size + 2 * _INT16.size


class Envelope(NamedTuple):
    """What an enveloped payload says about itself, and the original payload."""

    created_ms: int
    sequence: int
    origin: str
    producer_id: str
    payload: bytes


def _name(value: str, what: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > MAX_NAME_BYTES:
        raise ValueError(f"{what} is {len(data)} bytes in UTF-8; the envelope allows {MAX_NAME_BYTES}")
    return _INT16.pack(len(data)) + data


def encode_header(created_ms: int, sequence: int, origin: str, producer_id: str) -> bytes:
    """The envelope's header; the enveloped payload is ``header + payload``."""
    body = _FIXED.pack(created_ms, sequence) + _name(origin, "origin") + _name(producer_id, "producer id")
    return _PREFIX.pack(MARKER, VERSION, crc32(body)) + body


def encode_envelope(payload: bytes, created_ms: int, sequence: int, origin: str, producer_id: str) -> bytes:
    """``payload`` wrapped in an envelope."""
    return encode_header(created_ms, sequence, origin, producer_id) + bytes(payload)


def decode_envelope(data: bytes | memoryview) -> Envelope | None:
    """The envelope of ``data``, or None if ``data`` is a plain payload.

    A payload counts as enveloped only when the marker, the version, the
    header's length and its CRC all agree; never raises for any input.
    """
    if len(data) < MIN_ENVELOPE_BYTES or bytes(data[:4]) != MARKER:
        return None
    _marker, version, header_crc = _PREFIX.unpack_from(data, 0)
    if version != VERSION:
        return None
    pos = _PREFIX.size
    created_ms, sequence = _FIXED.unpack_from(data, pos)
    pos += _FIXED.size
    names: list[str] = []
    for _ in range(2):
        if len(data) - pos < _INT16.size:
            return None
        (n,) = _INT16.unpack_from(data, pos)
        pos += _INT16.size
        if n < 0 or n > MAX_NAME_BYTES or len(data) - pos < n:
            return None
        try:
            names.append(bytes(data[pos:pos + n]).decode("utf-8"))
        except UnicodeDecodeError:
            return None
        pos += n
    if crc32(bytes(data[_PREFIX.size:pos])) != header_crc:
        return None
    return Envelope(created_ms, sequence, names[0], names[1], bytes(data[pos:]))


__all__ = ["Envelope", "MARKER", "MAX_NAME_BYTES", "decode_envelope", "encode_envelope", "encode_header"]
