"""What the cleaner does differently per record format, as one table (docs/protocol.md §11.3, §16.6.1).

The cleaner's choice of ranges, key map, decisions, rewrite and swap are the
same for both formats; a ``CleanFormat`` names what is not: how a segment's
entries are scanned, the smallest run that padding can cover, the padding
written over a run, and whether the segment keeps a ``.padding`` index (0.7)
or its padding is derived from its batches (v2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from trikafka.kafka.batch import HEADER_BYTES, padding_batch_head, read_header
from trikafka.wire.keyed import MIN_PADDING_ENTRY_BYTES, padding_head, split_run

from .clean_scan import CleanerError, ScannedEntry, scan_batches, scan_segment
from .fs import SegmentFile
from .segment import Segment
from .throttle import Throttler

# (written head, piece size): the piece's bytes after its head are zeros, left as a hole.
PaddingPiece = tuple[bytes, int]


@dataclass(frozen=True, slots=True)
class CleanFormat:
    """The cleaner's per-format steps (see the module docstring).

    ``padding(file, run_start, run_end, max_message_bytes)``: the pieces covering
    the run ``[run_start, run_end)`` of the segment ``file`` exactly, each within
    the topic's ``max.message.size``.  Blocking (may read headers, computes CRCs).
    """

    scan: Callable[[SegmentFile, int, Throttler], Iterator[ScannedEntry]]
    min_run_bytes: int
    padding: Callable[[SegmentFile, int, int, int], list[PaddingPiece]]
    padding_index: bool  # the segment keeps a ``.padding`` index file (§11.4.2); else derived from its batches


def _padding_07(file: SegmentFile, run_start: int, run_end: int, max_message_bytes: int) -> list[PaddingPiece]:
    """0.7 padding entries (§11.3); an entry's payload is at most ``max.message.size``."""
    return [(padding_head(n), n) for n in split_run(run_end - run_start, max_message_bytes + 10)]


def _padding_v2(file: SegmentFile, run_start: int, run_end: int, max_message_bytes: int) -> list[PaddingPiece]:
    """v2 padding batches (§16.6.1): the run's offsets, from its first batch's base offset to the
    base offset of the batch after it (a run never ends a segment), shared out in order."""
    first = read_header(_read_exact(file, run_start, HEADER_BYTES))
    after = read_header(_read_exact(file, run_end, HEADER_BYTES))
    offsets = after.base_offset - first.base_offset
    run_bytes = run_end - run_start
    if offsets < 1:
        raise CleanerError(f"{file!r}: the run [{run_start}, {run_end}) covers {offsets} offsets")
    # Each piece covers at least one offset: never more pieces than offsets.
    sizes = split_run(run_bytes, max(max_message_bytes, 2 * HEADER_BYTES, -(-run_bytes // offsets)))
    share, extra = divmod(offsets, len(sizes))
    pieces, base = [], first.base_offset
    for index, size in enumerate(sizes):
        covered = share + (1 if index < extra else 0)
        pieces.append((padding_batch_head(base, covered, first.leader_epoch, size), size))
        base += covered
    return pieces


def _read_exact(file: SegmentFile, position: int, n: int) -> bytes:
    data = file.pread(position, n)
    if len(data) != n:
        raise CleanerError(f"short read of {file!r} at {position}")
    return data


CLEAN_FORMATS: dict[str, CleanFormat] = {
    "0.7": CleanFormat(scan_segment, MIN_PADDING_ENTRY_BYTES, _padding_07, padding_index=True),
    "v2": CleanFormat(scan_batches, HEADER_BYTES, _padding_v2, padding_index=False),
}


def clean_format(log: object) -> CleanFormat:
    """The cleaner's steps for ``log``'s record format (``Log.record_format``)."""
    return CLEAN_FORMATS[getattr(log, "record_format", "0.7")]


def padded_bytes(segment: Segment) -> int:
    """Bytes of ``segment`` its padding covers, whichever way its format keeps them."""
    return segment.batches.padded_bytes if segment.batches is not None else segment.padding.padded_bytes
