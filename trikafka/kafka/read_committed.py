"""What a ``read_committed`` reader keeps of fetched batches (docs/protocol.md §19.6), sans I/O.

``committed_batches`` walks decoded batches in offset order with the
partition's aborted-transactions list from the Fetch answer and yields only
the data batches a committed reader sees: no control batch (markers, the
cleaner's padding), no batch of a transaction the list names as aborted.
"""

from __future__ import annotations

import heapq
import struct
from typing import Iterable, Iterator

from .batch import CONTROL, TRANSACTIONAL, BatchHeader
from .records import Record

_CONTROL_KEY = struct.Struct(">hh")  # version, type
ABORT_MARKER = 0
COMMIT_MARKER = 1


def control_type(record: Record) -> int | None:
    """The marker type of a control record (``ABORT_MARKER``, ``COMMIT_MARKER``), None if its key is not one."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack_from(key)[1]


def committed_batches(batches: Iterable[tuple[BatchHeader, list[Record]]],
                      aborted: Iterable[tuple[int, int]]) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """The data batches of ``batches`` a ``read_committed`` reader delivers.

    ``aborted`` is the Fetch answer's (producer id, first offset) list.
    Invariant of the walk: ``open_aborts`` holds the producers whose aborted
    transaction has started at or before the current batch and whose abort
    marker has not been passed yet.
    """
    pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
    heapq.heapify(pending)
    open_aborts: set[int] = set()
    for header, records in batches:
        while pending and pending[0][0] <= header.base_offset + header.last_offset_delta:
            open_aborts.add(heapq.heappop(pending)[1])
        if header.attributes & CONTROL:
            if header.producer_id in open_aborts and any(control_type(r) == ABORT_MARKER for r in records):
                open_aborts.discard(header.producer_id)
            continue
        if header.attributes & TRANSACTIONAL and header.producer_id in open_aborts:
            continue
        yield header, records
