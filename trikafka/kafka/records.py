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
from bisect import bisect_left
from itertools import repeat
from typing import Iterable, Iterator, NamedTuple, Sequence, overload

from kio._kio_native import read_signed_varint, read_signed_varlong

from .batch import (COMPRESSION_MASK, CONTROL, HEADER_BYTES, LOG_OVERHEAD, MAGIC, NO_PRODUCER_ID,
                    TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, BatchHeader, batch_crc, encode_header, walk_headers,
                    write_crc)
from .compression import Compression, compress, decompress
from .errors import CorruptRecords
from .varint import read_varint, write_varlong

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
    _check_control_attributes(control_attributes)
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    listed = [item if isinstance(item, Record) else Record(base_offset + index, timestamp_ms, None, item)
              for index, item in enumerate(records)]
    if not listed:
        raise ValueError("a batch holds at least one record")
    base_timestamp_ms = listed[0].timestamp_ms
    body = bytearray()
    for record in listed:
        _write_record(body, record.offset - base_offset, record.timestamp_ms - base_timestamp_ms, record.key,
                      record.value, record.headers)
    return _seal(body, compression=compression, timestamp_type=timestamp_type, base_offset=base_offset,
                 last_offset_delta=max(record.offset for record in listed) - base_offset,
                 base_timestamp_ms=base_timestamp_ms, max_timestamp_ms=max(r.timestamp_ms for r in listed),
                 record_count=len(listed), leader_epoch=leader_epoch, producer_id=producer_id,
                 producer_epoch=producer_epoch, base_sequence=base_sequence, control_attributes=control_attributes)


class BatchBuilder:
    """One batch's records encoded as they are appended (a producer's open batch), sealed by ``build``.

    Each record takes the next offset delta (0, 1, ...); its time is kept as
    a delta from the first record's.  ``size_bytes`` is what the batch holds
    so far, uncompressed, header included.
    """

    __slots__ = ("_body", "count", "_base_timestamp_ms", "_max_timestamp_ms")

    def __init__(self) -> None:
        self._body = bytearray()
        self.count = 0
        self._base_timestamp_ms = 0
        self._max_timestamp_ms = 0

    @property
    def size_bytes(self) -> int:
        return HEADER_BYTES + len(self._body)

    def append(self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Headers = ()) -> int:
        """Encode one record; its offset delta in the batch."""
        index = self.count
        if index == 0:
            self._base_timestamp_ms = self._max_timestamp_ms = timestamp_ms
        elif timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = timestamp_ms
        delta = timestamp_ms - self._base_timestamp_ms
        # The common record (no headers, a value, small numbers) is written from the table in four appends;
        # _write_record writes any record.
        if (headers or value is None or index >= _SMALL_MAX or not 0 <= delta < _SMALL_MAX
                or len(value) >= _SMALL_MAX or key is not None and len(key) >= _SMALL_MAX):
            _write_record(self._body, index, delta, key, value, headers)
        else:
            small = _SMALL
            if key is None:
                fields = _ATTRIBUTES + small[delta + 1] + small[index + 1] + _NULL + small[len(value) + 1]
            else:
                fields = (_ATTRIBUTES + small[delta + 1] + small[index + 1] + small[len(key) + 1] + key
                          + small[len(value) + 1])
            length = len(fields) + len(value) + 1
            body = self._body
            body += _varlong_bytes(length)
            body += fields
            body += value
            body += _NO_HEADERS
        self.count = index + 1
        return index

    def build(self, *, compression: int = 0, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
              base_sequence: int = -1, control_attributes: int = 0) -> bytes:
        """The batch's bytes (base offset 0, as a producer sends it); raises ``ValueError`` when empty."""
        if not self.count:
            raise ValueError("a batch holds at least one record")
        _check_control_attributes(control_attributes)
        return _seal(self._body, compression=compression, timestamp_type=CREATE_TIME, base_offset=0,
                     last_offset_delta=self.count - 1, base_timestamp_ms=self._base_timestamp_ms,
                     max_timestamp_ms=self._max_timestamp_ms, record_count=self.count, leader_epoch=-1,
                     producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                     control_attributes=control_attributes)


def _check_control_attributes(control_attributes: int) -> None:
    if control_attributes & ~(TRANSACTIONAL | CONTROL):
        raise ValueError(f"control_attributes {control_attributes:#x}: only 0x10 and 0x20")


def _seal(body: bytearray, *, compression: int, timestamp_type: int, base_offset: int, last_offset_delta: int,
          base_timestamp_ms: int, max_timestamp_ms: int, record_count: int, leader_epoch: int, producer_id: int,
          producer_epoch: int, base_sequence: int, control_attributes: int) -> bytes:
    """The batch around the encoded records ``body``: compressed, its header written and its CRC set."""
    region = compress(compression, body)
    attributes = (Compression(compression) | (TIMESTAMP_TYPE_LOG_APPEND if timestamp_type == LOG_APPEND_TIME else 0)
                  | control_attributes)
    header = BatchHeader(0, base_offset, HEADER_BYTES - LOG_OVERHEAD + len(region), leader_epoch, MAGIC, 0,
                         attributes, last_offset_delta, base_timestamp_ms, max_timestamp_ms, producer_id,
                         producer_epoch, base_sequence, record_count)
    data = bytearray(encode_header(header))
    data += region
    write_crc(data, 0, len(data))
    return bytes(data)


def read_batches(data: bytes | bytearray | memoryview, *, check_crc: bool = True) -> Iterator[RecordBatch]:
    """Each whole batch in ``data`` (a ``RecordBatch``, its records decoded when first read), in order.

    A partial batch at the end (a fetch may stop inside one) ends the walk
    without an error.  Raises ``CorruptRecords`` for a batch of another magic,
    a CRC that does not match (unless ``check_crc`` is off), or records that
    do not decompress; records that do not decode raise it when the batch is
    first read.
    """
    view = memoryview(data).toreadonly()
    for header in walk_headers(view):
        if header.magic != MAGIC:
            raise CorruptRecords(f"batch at {header.position}: magic {header.magic}, only 2 is read")
        if check_crc and batch_crc(view, header.position, header.size) != header.crc:
            raise CorruptRecords(f"batch at {header.position}: CRC-32C does not match")
        region = view[header.position + HEADER_BYTES:header.end]
        yield RecordBatch(header, decompress(header.attributes & COMPRESSION_MASK, region))


def decode_batches(data: bytes | bytearray | memoryview, *,
                   check_crc: bool = True) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each whole batch in ``data`` with its records as a list, in order (``read_batches``' batches and
    rules; every record is decoded here)."""
    for batch in read_batches(data, check_crc=check_crc):
        yield batch.header, batch.records


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


# Zigzag varints of -1 .. _SMALL_MAX - 1 (null lengths, offset and time deltas, lengths of small fields), made
# once: encoding a record looks its numbers up instead of building them byte by byte.
_SMALL_MAX = 1 << 13
_SMALL = [_zigzag_bytes(v) for v in range(-1, _SMALL_MAX)]
_ATTRIBUTES = b"\x00"  # a record's attributes: unused
_NO_HEADERS = _SMALL[1]  # header count 0
_NULL = _SMALL[0]  # the length of a null key or value
_NULL_BYTE = _NULL[0]


def _varlong_bytes(value: int) -> bytes:
    return _SMALL[value + 1] if -1 <= value < _SMALL_MAX else _zigzag_bytes(value)


def _field_bytes(value: bytes | None) -> tuple[bytes, ...]:
    if value is None:
        return (_SMALL[0],)
    return _varlong_bytes(len(value)), value


def _write_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Headers) -> None:
    """Append one record: ``length attributes timestampDelta offsetDelta key value headers``."""
    small = _SMALL
    if -1 <= offset_delta < _SMALL_MAX:
        offset_part = small[offset_delta + 1]
    elif -(1 << 31) <= offset_delta < 1 << 31:
        offset_part = _zigzag_bytes(offset_delta)
    else:
        raise ValueError(f"varint {offset_delta} out of the int32 range")
    if -1 <= timestamp_delta < _SMALL_MAX:
        timestamp_part = small[timestamp_delta + 1]
    elif -(1 << 63) <= timestamp_delta < 1 << 63:
        timestamp_part = _zigzag_bytes(timestamp_delta)
    else:
        raise ValueError(f"varlong {timestamp_delta} out of the int64 range")
    head = _ATTRIBUTES + timestamp_part + offset_part
    key_part = small[0] if key is None else _varlong_bytes(len(key)) + key
    if value is None:
        value_length, value_part = small[0], b""
    else:
        value_length, value_part = _varlong_bytes(len(value)), value
    if headers:
        parts: list[bytes] = []
        for name, header_value in headers:
            parts += _field_bytes(name.encode())
            parts += _field_bytes(header_value)
        tail = _varlong_bytes(len(headers)) + b"".join(parts)
    else:
        tail = _NO_HEADERS
    length = len(head) + len(key_part) + len(value_length) + len(value_part) + len(tail)
    out += _varlong_bytes(length)
    out += head
    out += key_part
    out += value_length
    out += value_part
    out += tail


_new_tuple = tuple.__new__  # builds a Record without its Python-level __new__


class RecordBatch(Sequence[Record]):
    """The records of one batch, decoded when first read: as columns (``keys``, ``values``,
    ``offsets``, ``timestamps_ms``, ``headers``: index i of each is record i) or as ``Record``
    objects (``records``, indexing, iterating); ``header`` is the batch's.

    The first read decodes every record in one pass and raises
    ``CorruptRecords`` if one does not decode.  Read first, ``keys`` or
    ``values`` skip the offsets and timestamps (a reader of values alone never
    pays for them, nor for an object per record; one that asks for them after
    pays a second pass); anything else read first decodes all fields at once.
    ``Record`` objects are made once, all together.
    """

    __slots__ = ("header", "_data", "_keys", "_values", "_offsets", "_timestamps_ms", "_headers", "_records")

    def __init__(self, header: BatchHeader, records: bytes | memoryview):
        self.header = header
        if isinstance(records, memoryview) and isinstance(records.obj, bytes) and records.nbytes == len(records.obj):
            records = records.obj  # decompress's view of whole bytes: no copy
        # The (decompressed) records, until every field is read from them.
        self._data = records if isinstance(records, bytes) else bytes(records)
        self._keys: list[bytes | None] | None = None
        self._values: list[bytes | None] = []
        self._offsets: list[int] | None = None
        self._timestamps_ms: list[int] = []
        self._headers: dict[int, Headers] = {}  # only the records with headers, by index: most have none
        self._records: list[Record] | None = None

    @property
    def keys(self) -> list[bytes | None]:
        if self._keys is None:
            _read_columns(self, defer_offsets=True)
        assert self._keys is not None
        return self._keys

    @property
    def values(self) -> list[bytes | None]:
        if self._keys is None:
            _read_columns(self, defer_offsets=True)
        return self._values

    @property
    def offsets(self) -> list[int]:
        return self._offsets if self._offsets is not None else self._read_offsets()

    @property
    def timestamps_ms(self) -> list[int]:
        if self._offsets is None:
            self._read_offsets()
        return self._timestamps_ms

    def _read_offsets(self) -> list[int]:
        """Read the offsets and timestamps, in a pass over every field (one that read the keys and
        values first reads them again and keeps its lists: rare, the consumer's readers never do)."""
        _read_columns(self, defer_offsets=False)
        assert self._offsets is not None
        return self._offsets

    @property
    def headers(self) -> list[Headers]:
        count = len(self.keys)
        if not self._headers:
            return [()] * count
        return [self._headers.get(index, ()) for index in range(count)]

    @property
    def records(self) -> list[Record]:
        """The batch's ``Record`` objects (made on the first call, the same list after)."""
        if self._records is None:
            offsets = self.offsets
            self._records = list(map(_new_tuple, repeat(Record), zip(
                offsets, self._timestamps_ms, self.keys, self._values,
                self.headers if self._headers else repeat(()))))
        return self._records

    def since(self, offset: int) -> RecordBatch:
        """This batch without its records below ``offset`` (itself when it has none; offsets ascend in a
        batch, §16.6)."""
        offsets = self.offsets
        if not offsets or offsets[0] >= offset:
            return self
        cut = bisect_left(offsets, offset)
        rest = RecordBatch(self.header, b"")
        rest._keys, rest._values = self.keys[cut:], self._values[cut:]
        rest._offsets, rest._timestamps_ms = offsets[cut:], self._timestamps_ms[cut:]
        rest._headers = {i - cut: h for i, h in self._headers.items() if i >= cut}
        return rest

    def _set_offsets_and_times(self, offsets: list[int], stamps: list[int]) -> None:
        if self.header.log_append_time:  # every record's time is the batch's maxTimestamp
            stamps = [self.header.max_timestamp_ms] * len(stamps)
        self._offsets, self._timestamps_ms = offsets, stamps
        self._data = b""  # every field is read: the records' bytes are not kept

    def __len__(self) -> int:
        return self.header.record_count if self._keys is None else len(self._keys)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        return self.records[index]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __repr__(self) -> str:
        return f"RecordBatch({self.records!r})"


def _read_columns(batch: RecordBatch, defer_offsets: bool) -> None:
    """Decode ``batch``'s ``record_count`` records from its (decompressed) region: cut their keys and
    values, read their offsets and timestamps unless ``defer_offsets``, check every field's varint.

    One pass; the rest of the record's rules are checked once at its end (its
    length must match what its fields took).  A zigzag varint of one or two
    bytes (lengths and offset deltas below 8 KiB) is read, or skipped, inline
    on purpose: a call per field would cost what it saves.  Longer ones are
    kio's.
    """
    header, data = batch.header, batch._data
    size = len(data)
    varint, varlong = read_signed_varint, read_signed_varlong
    base_offset, base_timestamp = header.base_offset, header.base_timestamp_ms
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: dict[int, Headers] = {}
    add_offset, add_stamp = offsets.append, stamps.append
    add_key, add_value = keys.append, values.append
    pos = 0
    try:
        for index in range(header.record_count):
            b0 = data[pos]
            if b0 < 0x80:
                length = (b0 >> 1) ^ -(b0 & 1)
                pos += 1
            elif (b1 := data[pos + 1]) < 0x80:
                u = (b0 & 0x7f) | (b1 << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, n = varint(data, pos)
                pos += n
            end = pos + length
            if length < 0 or end > size:
                raise CorruptRecords(f"batch at {header.position}: record of {length} bytes at {pos} runs past "
                                     f"its batch")
            # attributes, then timestampDelta and offsetDelta: skipped when deferred
            if defer_offsets:
                if data[pos + 1] < 0x80:
                    pos += 2
                elif data[pos + 2] < 0x80:
                    pos += 3
                else:
                    pos += 1 + varlong(data, pos + 1)[1]
                if data[pos] < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:
                    pos += 2
                else:
                    pos += varint(data, pos)[1]
            else:
                b0 = data[pos + 1]
                if b0 < 0x80:
                    add_stamp(base_timestamp + ((b0 >> 1) ^ -(b0 & 1)))
                    pos += 2
                elif (b1 := data[pos + 2]) < 0x80:
                    u = (b0 & 0x7f) | (b1 << 7)
                    add_stamp(base_timestamp + ((u >> 1) ^ -(u & 1)))
                    pos += 3
                else:
                    delta, n = varlong(data, pos + 1)
                    add_stamp(base_timestamp + delta)
                    pos += 1 + n
                b0 = data[pos]
                if b0 < 0x80:
                    add_offset(base_offset + ((b0 >> 1) ^ -(b0 & 1)))
                    pos += 1
                elif (b1 := data[pos + 1]) < 0x80:
                    u = (b0 & 0x7f) | (b1 << 7)
                    add_offset(base_offset + ((u >> 1) ^ -(u & 1)))
                    pos += 2
                else:
                    delta, n = varint(data, pos)
                    add_offset(base_offset + delta)
                    pos += n
            if data[pos] == _NULL_BYTE:
                add_key(None)
                pos += 1
            else:
                key_length, n = varint(data, pos)
                pos += n
                if key_length < 0:
                    add_key(None)
                else:
                    add_key(data[pos:pos + key_length])
                    pos += key_length
            b0 = data[pos]
            if b0 < 0x80:
                value_length = (b0 >> 1) ^ -(b0 & 1)
                pos += 1
            elif (b1 := data[pos + 1]) < 0x80:
                u = (b0 & 0x7f) | (b1 << 7)
                value_length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                value_length, n = varint(data, pos)
                pos += n
            if value_length < 0:
                add_value(None)
            else:
                add_value(data[pos:pos + value_length])
                pos += value_length
            if data[pos] == 0:
                pos += 1
            else:
                header_count, n = varint(data, pos)
                headers[index], pos = _read_headers(header, data, pos + n, end, header_count)
            if pos != end:
                raise CorruptRecords(f"batch at {header.position}: a record of {length} bytes holds "
                                     f"{pos - end + length}")
    except CorruptRecords:
        raise
    except Exception as exc:  # IndexError past the region; kio's BufferUnderflow, or ValueError (over-long varint)
        raise CorruptRecords(f"batch at {header.position}: a varint at {pos}: {exc}") from None
    if batch._keys is None:  # a pass after one that read the keys and values leaves their lists
        batch._keys, batch._values, batch._headers = keys, values, headers
    if not defer_offsets:
        batch._set_offsets_and_times(offsets, stamps)


def _read_headers(header: BatchHeader, data: bytes, pos: int, end: int, count: int) -> tuple[Headers, int]:
    headers = []
    for _ in range(count):
        name, pos = _read_bytes(data, pos, end)
        if name is None:
            raise CorruptRecords(f"batch at {header.position}: a record header without a key")
        header_value, pos = _read_bytes(data, pos, end)
        try:
            headers.append((name.decode(), header_value))
        except UnicodeDecodeError:
            raise CorruptRecords(f"batch at {header.position}: a record header key is not UTF-8") from None
    return tuple(headers), pos


def _read_bytes(records: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(records, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecords(f"a field of {length} bytes at {pos} runs past its record")
    return records[pos:pos + length], pos + length
