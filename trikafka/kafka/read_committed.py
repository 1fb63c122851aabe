"""What a ``read_committed`` reader keeps of fetched batches (docs/protocol.md §19.6), sans I/O.

``committed_batches`` walks decoded batches in offset order with the
partition's aborted-transactions list from the Fetch answer and yields only
the data batches a committed reader sees: no control batch (markers, the
cleaner's padding), no batch of a transaction the list names as aborted.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator, Sequence, TypeVar

from .batch import CONTROL, TRANSACTIONAL, BatchHeader
from .markers import ABORT, marker_type
from .records import Record


Records = TypeVar("Records", bound=Sequence[Record])  # a batch's records: a list, a RecordBatch


def committed_batches(batches: Iterable[tuple[BatchHeader, Records]],
                      aborted: Iterable[tuple[int, int]]) -> Iterator[tuple[BatchHeader, Records]]:
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
            if header.producer_id in open_aborts and any(marker_type(r) == ABORT for r in records):
                open_aborts.discard(header.producer_id)
            continue
        if header.attributes & TRANSACTIONAL and header.producer_id in open_aborts:
            continue
        yield header, records
