"""The records inside a v2 batch (docs/protocol.md §16.6): building batches and reading them back.

A record is ``length:varint attributes:int8 timestampDelta:varlong
offsetDelta:varint keyLength:varint key valueLength:varint value
headerCount:varint [headerKeyLength:varint headerKey headerValueLength:varint
headerValue]``, a length of -1 meaning null (a header key is never null).
The batch header around them is ``batch``'s; their compression
``compression``'s.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator, NamedTuple

from .batch import (COMPRESSION_MASK, CONTROL, HEADER_BYTES, LOG_OVERHEAD, MAGIC, NO_PRODUCER_ID,
                    TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, BatchHeader, batch_crc, encode_header, walk_headers,
                    write_crc)
from .compression import Compression, compress, decompress
from .errors import CorruptRecords
from .varint import read_varint, read_varlong, write_varint, write_varlong

CREATE_TIME = 0
LOG_APPEND_TIME = 1

Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One record: its logical offset, timestamp, key, value and headers."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def build_batch(records: Iterable[Record | bytes | None], *, base_offset: int = 0, compression: int = 0,
                timestamp_type: int = CREATE_TIME, timestamp_ms: int | None = None, leader_epoch: int = -1,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = -1,
                control_attributes: int = 0) -> bytes:
    """One v2 batch of ``records``, as a producer sends it (by default one without idempotence).

    An element is a ``Record`` (its offset is absolute: ``base_offset`` plus
    its delta) or a bare value (``bytes`` or None), which gets the next offset,
    no key, no headers and ``timestamp_ms`` (default: now).  ``compression``
    is 0-4 (``Compression``); ``timestamp_type`` ``CREATE_TIME`` or
    ``LOG_APPEND_TIME``, which sets every record's time to the batch's
    ``maxTimestamp`` for its readers.  ``control_attributes``: the
    transactional (0x10) and control (0x20) bits to set (§19.6).
    """
    if control_attributes & ~(TRANSACTIONAL | CONTROL):
        raise ValueError(f"control_attributes {control_attributes:#x}: only 0x10 and 0x20")
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    listed = [item if isinstance(item, Record) else Record(base_offset + index, timestamp_ms, None, item)
              for index, item in enumerate(records)]
    if not listed:
        raise ValueError("a batch holds at least one record")
    base_timestamp_ms = listed[0].timestamp_ms
    body = bytearray()
    for record in listed:
        _write_record(body, record, base_offset, base_timestamp_ms)
    region = compress(compression, body)
    attributes = (Compression(compression) | (TIMESTAMP_TYPE_LOG_APPEND if timestamp_type == LOG_APPEND_TIME else 0)
                  | control_attributes)
    last_offset_delta = max(record.offset for record in listed) - base_offset
    max_timestamp_ms = max(record.timestamp_ms for record in listed)
    header = BatchHeader(0, base_offset, HEADER_BYTES - LOG_OVERHEAD + len(region), leader_epoch, MAGIC, 0,
                         attributes, last_offset_delta, base_timestamp_ms, max_timestamp_ms, producer_id,
                         producer_epoch, base_sequence, len(listed))
    data = bytearray(encode_header(header))
    data += region
    write_crc(data, 0, len(data))
    return bytes(data)


def decode_batches(data: bytes | bytearray | memoryview, *,
                   check_crc: bool = True) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each whole batch in ``data`` with its records, in order.

    A partial batch at the end (a fetch may stop inside one) ends the walk
    without an error.  Raises ``CorruptRecords`` for a batch of another magic,
    a CRC that does not match (unless ``check_crc`` is off), or records that
    do not decode or decompress.
    """
    view = memoryview(data).toreadonly()
    for header in walk_headers(view):
        if header.magic != MAGIC:
            raise CorruptRecords(f"batch at {header.position}: magic {header.magic}, only 2 is read")
        if check_crc and batch_crc(view, header.position, header.size) != header.crc:
            raise CorruptRecords(f"batch at {header.position}: CRC-32C does not match")
        region = view[header.position + HEADER_BYTES:header.end]
        yield header, _read_records(header, decompress(header.attributes & COMPRESSION_MASK, region))


def _write_record(out: bytearray, record: Record, base_offset: int, base_timestamp_ms: int) -> None:
    body = bytearray(b"\x00")  # attributes: unused by records
    write_varlong(body, record.timestamp_ms - base_timestamp_ms)
    write_varint(body, record.offset - base_offset)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    write_varint(body, len(record.headers))
    for key, value in record.headers:
        _write_bytes(body, key.encode())
        _write_bytes(body, value)
    write_varint(out, len(body))
    out += body


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(value))
        out += value


def _read_records(header: BatchHeader, records: memoryview) -> list[Record]:
    out = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(records, pos)
        end = pos + length
        if length < 0 or end > len(records):
            raise CorruptRecords(f"batch at {header.position}: record of {length} bytes at {pos} runs past its batch")
        pos += 1  # attributes
        timestamp_delta, pos = read_varlong(records, pos)
        offset_delta, pos = read_varint(records, pos)
        key, pos = _read_bytes(records, pos, end)
        value, pos = _read_bytes(records, pos, end)
        count, pos = read_varint(records, pos)
        headers = []
        for _ in range(count):
            name, pos = _read_bytes(records, pos, end)
            if name is None:
                raise CorruptRecords(f"batch at {header.position}: a record header without a key")
            header_value, pos = _read_bytes(records, pos, end)
            try:
                headers.append((name.decode(), header_value))
            except UnicodeDecodeError:
                raise CorruptRecords(f"batch at {header.position}: a record header key is not UTF-8") from None
        if pos != end:
            raise CorruptRecords(f"batch at {header.position}: a record of {length} bytes holds {pos - end + length}")
        timestamp_ms = header.max_timestamp_ms if header.log_append_time else header.base_timestamp_ms + timestamp_delta
        out.append(Record(header.base_offset + offset_delta, timestamp_ms, key, value, tuple(headers)))
    return out


def _read_bytes(records: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(records, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecords(f"a field of {length} bytes at {pos} runs past its record")
    return bytes(records[pos:pos + length]), pos + length
