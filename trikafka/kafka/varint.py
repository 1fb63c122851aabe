"""Kafka's variable-length integers (docs/protocol.md §16.6): unsigned, and zigzag-signed.

A varint is 7 bits a byte, least significant group first, the high bit set on
every byte but the last.  Signed values are zigzag-mapped first (0, -1, 1,
-2, ... -> 0, 1, 2, 3, ...).  Records use signed varints (32-bit values) and
varlongs (64-bit: the timestamp delta); flexible versions use unsigned
varints for lengths.  Reading goes through kio's native readers.
"""

from __future__ import annotations

from typing import Callable

from kio._kio_native import read_signed_varint, read_signed_varlong, read_unsigned_varint

from .errors import CorruptRecords

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

Buffer = bytes | bytearray | memoryview


def write_uvarint(out: bytearray, value: int) -> None:
    """Append ``value`` (0 .. 2**32-1) as an unsigned varint."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"unsigned varint {value} out of range")
    _write_groups(out, value)


def write_varint(out: bytearray, value: int) -> None:
    """Append a signed 32-bit ``value`` as a zigzag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} out of the int32 range")
    _write_groups(out, (value << 1) ^ (value >> 31))


def write_varlong(out: bytearray, value: int) -> None:
    """Append a signed 64-bit ``value`` as a zigzag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} out of the int64 range")
    _write_groups(out, (value << 1) ^ (value >> 63))


def uvarint(value: int) -> bytes:
    """``value`` as an unsigned varint."""
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def _write_groups(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_uvarint(data: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it; ``CorruptRecords`` if it does not decode."""
    return _read(read_unsigned_varint, "unsigned varint", data, pos)


def read_varint(data: Buffer, pos: int) -> tuple[int, int]:
    """The signed varint at ``pos`` and the position after it; ``CorruptRecords`` if it does not decode."""
    return _read(read_signed_varint, "varint", data, pos)


def read_varlong(data: Buffer, pos: int) -> tuple[int, int]:
    """The signed varlong at ``pos`` and the position after it; ``CorruptRecords`` if it does not decode."""
    return _read(read_signed_varlong, "varlong", data, pos)


def _read(reader: Callable[[Buffer, int], tuple[int, int]], what: str, data: Buffer, pos: int) -> tuple[int, int]:
    try:
        value, size = reader(data, pos)
    except Exception as exc:  # kio raises BufferUnderflow, or ValueError for an over-long varint
        raise CorruptRecords(f"{what} at {pos}: {exc}") from None
    return int(value), pos + size
