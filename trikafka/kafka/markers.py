"""Transaction markers: the control batches that end a transaction on a partition
(docs/protocol.md §19.6).  Sans I/O.

A marker is a v2 batch with attributes control | transactional, the
producer's id and epoch, base sequence -1 and one record: key ``version:int16
type:int16`` (0 ABORT, 1 COMMIT), value ``version:int16 coordinatorEpoch:int32``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .batch import CONTROL, TRANSACTIONAL, BatchHeader, is_marker
from .errors import CorruptRecords
from .records import Record, build_batch, decode_batches

__all__ = ["ABORT", "COMMIT", "MARKER_ATTRIBUTES", "Marker", "build_marker", "decode_marker", "is_marker",
           "is_transactional_data", "marker_type", "read_marker"]

ABORT = 0
COMMIT = 1
MARKER_ATTRIBUTES = CONTROL | TRANSACTIONAL
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_VERSION = 0


class Marker(NamedTuple):
    """A decoded marker: whose transaction it ends, and how."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """The marker batch a leader appends (its offset assigned on append)."""
    key = _KEY.pack(_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(_VERSION, coordinator_epoch)
    return build_batch([Record(0, timestamp_ms, key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                       control_attributes=MARKER_ATTRIBUTES)


def is_transactional_data(header: BatchHeader) -> bool:
    """Whether the batch holds a transaction's records (transactional, not control)."""
    return bool(header.attributes & TRANSACTIONAL) and not header.attributes & CONTROL


def read_marker(data: bytes | bytearray | memoryview, header: BatchHeader) -> Marker:
    """The marker of the whole marker batch at ``header.position`` of ``data``.

    Raises ``CorruptRecords`` for a control batch that does not hold one marker of version 0.
    """
    found = list(decode_batches(memoryview(data)[header.position:header.end], check_crc=False))
    if len(found) != 1 or len(found[0][1]) != 1:
        raise CorruptRecords(f"control batch at {header.base_offset} does not hold one record")
    return decode_marker(header, found[0][1][0])


def decode_marker(header: BatchHeader, record: Record) -> Marker:
    """The marker a control batch's one record holds; ``CorruptRecords`` if it is not one."""
    kind = marker_type(record)
    if kind is None or record.value is None or len(record.value) < _VALUE.size:
        raise CorruptRecords(f"control record at {header.base_offset} is not a transaction marker of version "
                             f"{_VERSION}")
    _, coordinator_epoch = _VALUE.unpack_from(record.value)
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)


def marker_type(record: Record) -> int | None:
    """ABORT or COMMIT for a control record whose key is a marker's, else None (a lenient reader's
    view: nothing is raised, §19.7)."""
    key = record.key
    if key is None or len(key) != _KEY.size:
        return None
    version, kind = _KEY.unpack(key)
    return kind if version == _VERSION and kind in (ABORT, COMMIT) else None
