"""Java's hashes over strings and byte arrays, as int32 (the producer's partitioner, §14.2, and the
group coordinator's choice of a ``__consumer_offsets`` partition, §17.1); stdlib only."""

from __future__ import annotations

from typing import Iterable

_MASK32 = 0xFFFFFFFF


def to_int32(value: int) -> int:
    """``value`` wrapped to a signed 32-bit int, as Java's int arithmetic does."""
    value &= _MASK32
    return value - (1 << 32) if value >= (1 << 31) else value


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 units, int32."""
    if s.isascii():
        units: Iterable[int] = s.encode("ascii")
    else:
        raw = s.encode("utf-16-be", "surrogatepass")
        units = (int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2))
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return to_int32(h)


def java_bytes_hash(data: bytes | bytearray | memoryview) -> int:
    """Java ``Arrays.hashCode(byte[])``: seed 1, ``31*h + b`` with signed bytes, int32."""
    h = 1
    for b in bytes(data):
        h = (31 * h + (b - 256 if b >= 128 else b)) & _MASK32
    return to_int32(h)
