"""Transaction markers: the control batches that end a transaction on a partition
(docs/protocol.md §19.6).  Sans I/O.

A marker is a v2 batch with attributes control | transactional, the
producer's id and epoch, base sequence -1 and one record: key ``version:int16
type:int16`` (0 ABORT, 1 COMMIT), value ``version:int16 coordinatorEpoch:int32``.
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple

from .batch import CONTROL, TRANSACTIONAL, BatchHeader, is_marker
from .errors import CorruptRecords
from .records import Record, build_batch, decode_batches

__all__ = ["ABORT", "COMMIT", "MARKER_ATTRIBUTES", "Marker", "build_marker", "committed_batches", "decode_marker",
           "is_marker", "is_transactional_data", "read_marker"]

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
    if record.key is None or len(record.key) != _KEY.size or record.value is None or len(record.value) < _VALUE.size:
        raise CorruptRecords(f"control record at {header.base_offset} is not a transaction marker")
    version, kind = _KEY.unpack(record.key)
    if version != _VERSION or kind not in (ABORT, COMMIT):
        raise CorruptRecords(f"control record at {header.base_offset}: version {version}, type {kind}")
    _, coordinator_epoch = _VALUE.unpack_from(record.value)
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)


def committed_batches(batches: Iterable[tuple[BatchHeader, list[Record]]],
                      aborted: Iterable[tuple[int, int]]) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """What a read_committed reader keeps of a Fetch answer's batches (§19.7): no control batch, and
    no batch of an aborted transaction.  ``aborted``: the answer's (producer id, first offset) list.

    A producer's batches are dropped from its aborted transaction's first offset up to its next
    ABORT marker, as Kafka's consumers do.
    """
    pending = sorted(aborted, key=lambda a: a[1])
    k = 0
    aborting: set[int] = set()
    for header, records in batches:
        while k < len(pending) and pending[k][1] <= header.base_offset:
            aborting.add(pending[k][0])
            k += 1
        if header.attributes & CONTROL:
            if records and is_marker(header) and not decode_marker(header, records[0]).commit:
                aborting.discard(header.producer_id)
            continue
        if header.attributes & TRANSACTIONAL and header.producer_id in aborting:
            continue
        yield header, records
