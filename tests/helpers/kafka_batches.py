"""A tiny builder of v2 record batches for the log's tests (docs/protocol.md §16.6).

Uncompressed records with a value and no key or headers; enough for the log,
which reads only batch headers.  The Kafka codec's own record builder
replaces this module once it is on main.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, value: bytes) -> bytes:
    body = (b"\x00" + _varint(timestamp_delta) + _varint(offset_delta) + _varint(-1)
            + _varint(len(value)) + value + _varint(0))
    return _varint(len(body)) + body


def make_batch(values: list[bytes], *, base_offset: int = 0, base_timestamp_ms: int = 1_000,
               timestamp_step_ms: int = 1, leader_epoch: int = -1, attributes: int = 0,
               producer_id: int = -1) -> bytes:
    """One batch of ``values`` (one record each), timestamps ``base_timestamp_ms`` + k * step."""
    assert values, "a batch holds at least one record"
    records = b"".join(_record(k, k * timestamp_step_ms, v) for k, v in enumerate(values))
    max_timestamp_ms = base_timestamp_ms + max(0, (len(values) - 1) * timestamp_step_ms)
    after_crc = _HEADER_AFTER_CRC.pack(attributes, len(values) - 1, base_timestamp_ms, max_timestamp_ms,
                                       producer_id, -1, -1, len(values)) + records
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch, magic, crc, the rest
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc


def batches(counts: list[int], *, base_offset: int = 0, base_timestamp_ms: int = 1_000,
            value_bytes: int = 10) -> bytes:
    """Consecutive batches of ``counts[k]`` records each, numbered from ``base_offset``."""
    out = bytearray()
    offset, timestamp_ms = base_offset, base_timestamp_ms
    for count in counts:
        out += make_batch([bytes([offset % 256]) * value_bytes for _ in range(count)], base_offset=offset,
                          base_timestamp_ms=timestamp_ms)
        offset += count
        timestamp_ms += count
    return bytes(out)
