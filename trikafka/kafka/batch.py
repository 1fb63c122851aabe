"""v2 record batches as the log sees them (docs/protocol.md §16.6).

The log stores batches byte for byte; it reads only their 61-byte headers:

* ``validate_batches``: what a leader or follower accepts on append
  (``whole_batches_bytes``: a follower's byte range without its cut tail);
* ``assign_offsets``: the leader's rewrite of ``baseOffset``,
  ``partitionLeaderEpoch`` and, under LogAppendTime, ``maxTimestamp``;
* ``scan_valid_prefix``: what crash recovery keeps of a segment;
* ``read_header`` and ``walk_headers``: the offset and time indexes' walk;
* ``encode_header`` and ``write_crc``: a batch's header, for whoever builds one;
* ``padding_batch_head`` and ``is_padding``: the cleaner's padding batches
  (docs/protocol.md §16.6.1), which a follower's append accepts.

The records inside a batch (keys, values, headers, compression) are not read
here.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c

MAGIC = 2
# baseOffset:int64 batchLength:int32: the part of a batch before the bytes batchLength counts.
LOG_OVERHEAD = 12
HEADER_BYTES = 61  # LOG_OVERHEAD + the fixed fields up to and including recordCount
CRC_FROM = 21  # the CRC covers attributes .. the end of the batch
_LEADER_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
# A trikafka padding batch (docs/protocol.md §16.6.1): control bit plus this bit, which Kafka leaves unused.
PADDING = 0x4000
PADDING_ATTRIBUTES = CONTROL | PADDING
NO_PRODUCER_ID = -1
_SEQUENCE_MODULUS = 1 << 31  # producer sequence numbers are int32 and wrap from 2^31 - 1 to 0
# Zeros fed to the CRC of a padding batch's body at a time.
_ZERO_CHUNK = bytes(1 << 20)

_HEADER = struct.Struct(">qiiBIhiqqqhii")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
assert _HEADER.size == HEADER_BYTES


class BatchHeader(NamedTuple):
    """The fixed fields of one batch, and ``position``: where it starts in the bytes read."""

    position: int
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def end(self) -> int:
        """Where the next batch starts, in the bytes read."""
        return self.position + LOG_OVERHEAD + self.batch_length

    @property
    def next_offset(self) -> int:
        """The logical offset after this batch's last record."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)


class BatchError(ValueError):
    """A produced part that breaks a rule of §16.6; ``kind`` names the Kafka error to answer."""

    CORRUPT = "corrupt"  # CORRUPT_MESSAGE: framing or CRC
    INVALID = "invalid"  # INVALID_RECORD: a field breaks a rule
    TOO_LARGE = "too_large"  # MESSAGE_TOO_LARGE
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"  # OUT_OF_ORDER_SEQUENCE_NUMBER (§19.3)
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"  # INVALID_PRODUCER_EPOCH (§19.3)
    TRANSACTIONAL = "transactional"  # a transactional batch the coordinator did not verify (§19.6)
    TXN_STATE = "txn_state"  # INVALID_TXN_STATE: its transaction ended after its verification (§19.5.7)
    COORDINATOR_FENCED = "coordinator_fenced"  # TRANSACTION_COORDINATOR_FENCED: a deposed coordinator's marker (§19.5.5)

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


def next_sequence(sequence: int, count: int = 1) -> int:
    """A producer's ``sequence`` advanced by ``count``, wrapping after 2^31 - 1 to 0 (§19.3)."""
    return (sequence + count) % _SEQUENCE_MODULUS


def read_header(data: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """The header of the batch at ``position``; ``data`` must hold its 61 bytes."""
    return BatchHeader(position, *_HEADER.unpack_from(data, position))


def batch_crc(data: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of the batch at ``position`` of ``size`` bytes, as its ``crc`` field holds it."""
    view = memoryview(data)
    return crc32c(view[position + CRC_FROM:position + size])


def encode_header(header: BatchHeader) -> bytes:
    """The 61 header bytes of ``header``'s fields (``position`` is not written)."""
    return _HEADER.pack(*header[1:])


def write_crc(data: bytearray, position: int, size: int) -> None:
    """Set the ``crc`` field of the batch of ``size`` bytes at ``position`` to its CRC-32C."""
    _UINT32.pack_into(data, position + _CRC_AT, batch_crc(data, position, size))


def next_batch_bytes(prefix: bytes | bytearray | memoryview) -> int | None:
    """Size of the batch whose first 12 bytes are ``prefix``, or None if they cannot start one."""
    if len(prefix) < LOG_OVERHEAD:
        return None
    _, length = _PREFIX.unpack_from(prefix, 0)
    if length < HEADER_BYTES - LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + length


def whole_batches_bytes(data: bytes | bytearray | memoryview) -> int:
    """Bytes of ``data`` before a trailing batch that ``data`` ends inside (a byte-range read's cut tail).

    Reads only length prefixes.  A prefix that cannot start a batch ends the
    walk at ``len(data)``: that is damage for ``validate_batches`` to report,
    not a cut tail.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    while end - pos >= LOG_OVERHEAD:
        size = next_batch_bytes(view[pos:pos + LOG_OVERHEAD])
        if size is None:
            return end
        if pos + size > end:
            return pos
        pos += size
    return pos


def validate_batches(data: bytes | bytearray | memoryview, *, max_batch_bytes: int,
                     allow_padding: bool = False, allow_transactional: bool = False,
                     allow_markers: bool = False) -> list[BatchHeader]:
    """Check a produced part: whole batches, each passing §16.6's rules; their headers.

    Raises ``BatchError`` on the first batch that breaks a rule (nothing of
    the part may be appended then).  An empty part has no batches.
    ``allow_padding``: a follower's part, which may hold the leader's padding
    batches (§16.6.1); a producer's never may.  ``allow_transactional``: a
    transaction's batches the coordinator verified (§19.6);
    ``allow_markers``: the leader's own transaction markers (§19.6).
    """
    view = memoryview(data)
    end = len(view)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        if end - pos < HEADER_BYTES:
            raise BatchError(BatchError.CORRUPT, f"{end - pos} bytes at {pos} cannot hold a batch header")
        header = read_header(view, pos)
        if header.batch_length < HEADER_BYTES - LOG_OVERHEAD or header.end > end:
            raise BatchError(BatchError.CORRUPT, f"batch at {pos}: length {header.batch_length} does not fit")
        if header.magic != MAGIC:
            raise BatchError(BatchError.CORRUPT, f"batch at {pos}: magic {header.magic}, only 2 is served")
        if batch_crc(view, pos, header.size) != header.crc:
            raise BatchError(BatchError.CORRUPT, f"batch at {pos}: CRC-32C does not match")
        if header.size > max_batch_bytes:
            raise BatchError(BatchError.TOO_LARGE, f"batch at {pos}: {header.size} bytes, the limit is "
                                                   f"{max_batch_bytes}")
        if not (allow_padding and is_padding(header) or allow_markers and is_marker(header)):
            _check_fields(header, allow_transactional)
        headers.append(header)
        pos = header.end
    return headers


def _check_fields(header: BatchHeader, allow_transactional: bool = False) -> None:
    where = f"batch at {header.position}"
    if header.record_count < 1:
        raise BatchError(BatchError.INVALID, f"{where}: {header.record_count} records")
    if header.last_offset_delta < 0 or (header.compression == 0
                                        and header.last_offset_delta != header.record_count - 1):
        raise BatchError(BatchError.INVALID, f"{where}: lastOffsetDelta {header.last_offset_delta} "
                                             f"for {header.record_count} records")
    if header.attributes & CONTROL:
        raise BatchError(BatchError.INVALID, f"{where}: only the broker writes control batches")
    if header.attributes & TRANSACTIONAL and not allow_transactional:
        raise BatchError(BatchError.TRANSACTIONAL, f"{where}: a transactional batch needs the Produce's transactional_id (§19.6)")
    if header.compression > 4:
        raise BatchError(BatchError.INVALID, f"{where}: unknown compression {header.compression}")


def check_follows(headers: list[BatchHeader], next_offset: int) -> int:
    """A follower's check that verbatim batches continue the log at ``next_offset``; the offset after them."""
    for header in headers:
        if header.base_offset != next_offset:
            raise BatchError(BatchError.INVALID, f"batch at {header.position} starts at offset "
                                                 f"{header.base_offset}, the log is at {next_offset}")
        next_offset = header.next_offset
    return next_offset


def assign_offsets(data: bytearray, headers: list[BatchHeader], next_offset: int, leader_epoch: int,
                   append_time_ms: int | None) -> int:
    """Rewrite validated batches in place as the leader appends them; the offset after them.

    Each batch gets ``baseOffset`` = the next logical offset and the leader's
    epoch; with ``append_time_ms`` (LogAppendTime) also the timestamp-type bit
    and ``maxTimestamp``, and a new CRC.
    """
    for header in headers:
        pos = header.position
        _INT64.pack_into(data, pos, next_offset)
        _INT32.pack_into(data, pos + _LEADER_EPOCH_AT, leader_epoch)
        if append_time_ms is not None:
            _INT16.pack_into(data, pos + _ATTRIBUTES_AT, header.attributes | TIMESTAMP_TYPE_LOG_APPEND)
            _INT64.pack_into(data, pos + _MAX_TIMESTAMP_AT, append_time_ms)
            write_crc(data, pos, header.size)
        next_offset += header.last_offset_delta + 1
    return next_offset


def scan_valid_prefix(data: bytes | bytearray | memoryview) -> int:
    """Bytes of ``data`` that crash recovery keeps: whole batches of magic 2 whose CRC matches."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while end - pos >= HEADER_BYTES:
        size = next_batch_bytes(view[pos:pos + LOG_OVERHEAD])
        if size is None or pos + size > end or view[pos + _MAGIC_AT] != MAGIC:
            break
        if batch_crc(view, pos, size) != _UINT32.unpack_from(view, pos + _CRC_AT)[0]:
            break
        pos += size
    return pos


def walk_headers(data: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """Headers of the whole batches in ``data`` from ``start`` (no CRC check: for indexing stored bytes)."""
    view = memoryview(data)
    pos, end = start, len(view)
    while end - pos >= HEADER_BYTES:
        header = read_header(view, pos)
        if header.batch_length < HEADER_BYTES - LOG_OVERHEAD or header.end > end:
            return
        yield header
        pos = header.end


def is_marker(header: BatchHeader) -> bool:
    """Whether the batch is a transaction marker (§19.6): a control batch with records (the cleaner's
    padding, §16.6.1, has none and the padding bit)."""
    return bool(header.attributes & CONTROL) and not header.attributes & PADDING and header.record_count > 0


def is_padding(header: BatchHeader) -> bool:
    """Whether ``header`` is a cleaner's padding batch (docs/protocol.md §16.6.1)."""
    return header.attributes & PADDING_ATTRIBUTES == PADDING_ATTRIBUTES and header.record_count == 0


def padding_batch_head(base_offset: int, offsets_covered: int, leader_epoch: int, size_bytes: int) -> bytes:
    """The 61 written bytes of a padding batch of ``size_bytes`` (the rest are zeros, not returned)
    covering the logical offsets ``[base_offset, base_offset + offsets_covered)``.

    The CRC covers the zeros too (fed in pieces), so every batch walk reads it as
    any batch.  Blocking for large sizes (CPU): the cleaner's worker thread calls it.
    """
    if size_bytes < HEADER_BYTES or offsets_covered < 1:
        raise ValueError(f"a padding batch of {size_bytes} bytes covering {offsets_covered} offsets")
    header = BatchHeader(0, base_offset, size_bytes - LOG_OVERHEAD, leader_epoch, MAGIC, 0, PADDING_ATTRIBUTES,
                         offsets_covered - 1, -1, -1, NO_PRODUCER_ID, -1, -1, 0)
    data = bytearray(encode_header(header))
    crc = crc32c(memoryview(data)[CRC_FROM:])
    zeros = size_bytes - HEADER_BYTES
    while zeros > 0:
        n = min(zeros, len(_ZERO_CHUNK))
        crc = crc32c(memoryview(_ZERO_CHUNK)[:n], crc)
        zeros -= n
    _UINT32.pack_into(data, _CRC_AT, crc)
    return bytes(data)
