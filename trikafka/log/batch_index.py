"""One segment's in-memory offset and time index of v2 batches (docs/protocol.md §16.6).

Per batch, in three ``array('q')`` (24 bytes a batch): its base offset, its
byte position in the segment, and the running maximum of the batches'
``maxTimestamp`` up to and including it.  The running maximum answers the
time lookup by binary search: the first batch whose own ``maxTimestamp`` is
``>= t`` is the first one whose running maximum is, and its running maximum
is then its own ``maxTimestamp``.

Invariants (asserted where they are established):

* batches are contiguous and in order: ``positions[0] == 0``, each batch
  ends where the next starts, the last ends at ``size_bytes``;
* offsets are dense: each batch starts at the previous one's next offset
  (the cleaner's padding batches cover removed batches' offsets, §16.6.1),
  and ``next_offset`` is the logical offset after the last batch
  (after an empty segment: the previous segment's ``next_offset``);
* padding runs: ``padding_starts``/``padding_ends`` are the byte ranges of
  consecutive padding batches, sorted and disjoint, never adjacent (two
  padding batches that follow one another are one run); a padding batch's
  ``maxTimestamp`` (-1) never raises the running maximum;
* lookups never read the segment: building the index is the only reader.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import Iterable

from trikafka.kafka.batch import (HEADER_BYTES, LOG_OVERHEAD, NO_PRODUCER_ID, PADDING_ATTRIBUTES, BatchHeader,
                                  read_header, walk_headers)

from .errors import LogLoadError
from .fs import SegmentFile
from .producer_state import SegmentProducers

_INT64 = struct.Struct(">q")
# Opening a log reads every segment in chunks of this size (config.recovery_chunk_bytes, by default).
BUILD_CHUNK_BYTES = 8 << 20


class BatchIndex:
    """The batches of one segment (see the module docstring); positions are relative to the segment."""

    __slots__ = ("offsets", "positions", "max_timestamps_ms", "size_bytes", "next_offset",
                 "largest_timestamp_offset", "padding_starts", "padding_ends", "producers")

    def __init__(self, next_offset: int):
        self.offsets = array("q")  # base offset of each batch
        self.positions = array("q")  # byte position of each batch in the segment
        self.max_timestamps_ms = array("q")  # running maximum of maxTimestamp (non-decreasing)
        self.size_bytes = 0  # where the last batch ends: the segment's size
        self.next_offset = next_offset
        self.largest_timestamp_offset = -1  # the last record of the first batch reaching the largest timestamp
        self.padding_starts = array("q")  # byte ranges of padding runs (see the module docstring)
        self.padding_ends = array("q")
        self.producers = SegmentProducers()  # the idempotent batches' producers (§19.2)

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def start_offset(self) -> int:
        """The first batch's base offset, or ``next_offset`` while the segment holds none."""
        return self.offsets[0] if self.offsets else self.next_offset

    @property
    def largest_timestamp_ms(self) -> int:
        """The largest ``maxTimestamp`` of the segment's batches; -1 while it holds none."""
        return self.max_timestamps_ms[-1] if self.max_timestamps_ms else -1

    # -- keeping in step -----------------------------------------------------------------

    def add_headers(self, headers: Iterable[BatchHeader], base_position: int,
                    data: bytes | bytearray | memoryview | None = None) -> None:
        """Index batches written at the segment's end, ``base_position`` (their ``position`` is relative
        to it, and to ``data``, the bytes that hold them: a transaction marker is read from them,
        §19.6); ``ValueError`` at a batch that does not start where the previous one ended, at its
        next offset (the batches before it stay indexed)."""
        offsets, positions, times = self.offsets, self.positions, self.max_timestamps_ms  # the build's hot loop
        producers = self.producers
        running = times[-1] if times else None
        for header in headers:
            position = base_position + header.position
            next_offset = header.base_offset + header.last_offset_delta + 1
            if position != self.size_bytes or header.base_offset != self.next_offset or next_offset <= self.next_offset:
                raise ValueError(f"the batch at byte {position} has offsets [{header.base_offset}, "
                                 f"{next_offset}); the segment's batches end at byte {self.size_bytes}, "
                                 f"offset {self.next_offset}")
            end = position + LOG_OVERHEAD + header.batch_length
            if header.attributes & PADDING_ATTRIBUTES == PADDING_ATTRIBUTES and header.record_count == 0:
                self._add_padding(position, end)
                times.append(-1 if running is None else running)
            else:
                if running is None or header.max_timestamp_ms > running:
                    running = header.max_timestamp_ms
                    self.largest_timestamp_offset = next_offset - 1
                times.append(running)
            if header.producer_id != NO_PRODUCER_ID:
                producers.add(header, data)
            offsets.append(header.base_offset)
            positions.append(position)
            self.size_bytes = end
            self.next_offset = next_offset

    def _add_padding(self, start: int, end: int) -> None:
        if self.padding_ends and self.padding_ends[-1] == start:
            self.padding_ends[-1] = end
        else:
            self.padding_starts.append(start)
            self.padding_ends.append(end)

    @property
    def padded_bytes(self) -> int:
        """Bytes of the segment's padding batches."""
        return sum(self.padding_ends) - sum(self.padding_starts)

    def is_boundary(self, position: int) -> bool:
        """Whether a batch starts at ``position``, or ``position`` is the end of the last one."""
        if position == self.size_bytes:
            return True
        k = bisect_left(self.positions, position)
        return k < len(self.positions) and self.positions[k] == position

    def truncate(self, position: int) -> bool:
        """Forget the batches at and after ``position``, a batch boundary (a truncation's cut).  False
        when ``producers`` must be read again from the segment's first ``position`` bytes
        (``SegmentProducers.truncate``; ``build_batch_index`` reads them)."""
        assert self.is_boundary(position), (position, self.size_bytes)
        k = bisect_left(self.positions, position)
        if k < len(self.offsets):
            self.next_offset = self.offsets[k]
            del self.offsets[k:], self.positions[k:], self.max_timestamps_ms[k:]
        self.size_bytes = position
        r = bisect_left(self.padding_starts, position)
        del self.padding_starts[r:], self.padding_ends[r:]
        if self.padding_ends and self.padding_ends[-1] > position:
            self.padding_ends[-1] = position
        exact = self.producers.truncate(self.next_offset)
        if not self.offsets:
            self.largest_timestamp_offset = -1
        else:  # the first batch whose running maximum reached the largest timestamp that remains
            first = bisect_left(self.max_timestamps_ms, self.max_timestamps_ms[-1])
            self.largest_timestamp_offset = self._next_offset_of(first) - 1
        return exact or not self.offsets  # an empty segment has no producers

    # -- lookups -------------------------------------------------------------------------

    def batch_at_offset(self, offset: int) -> int | None:
        """The batch holding ``offset`` (the last one based at or below it while ``offset < next_offset``),
        else the first batch after it; None when no batch of the segment is at or after ``offset``."""
        if offset >= self.next_offset:
            return None
        return max(bisect_right(self.offsets, offset) - 1, 0) if self.offsets else None

    def offset_at(self, position: int) -> int:
        """The base offset of the first batch starting at or after ``position``; ``next_offset`` past the last."""
        k = bisect_left(self.positions, position)
        return self.offsets[k] if k < len(self.offsets) else self.next_offset

    def end_within(self, start: int, max_bytes: int, limit: int, at_least_one: bool = True) -> int:
        """The end of the whole batches from ``start`` (a batch boundary) within ``max_bytes`` and
        ``limit``; at least the first batch's end when it ends by ``limit`` (unless not
        ``at_least_one``); ``start`` when none fits."""
        positions = self.positions
        cap = min(start + max_bytes, limit)
        if self.size_bytes <= cap:
            best = self.size_bytes
        else:
            m = bisect_right(positions, cap) - 1  # the batch that crosses cap starts at positions[m]
            best = positions[m] if m >= 0 else start
        if best > start or not at_least_one:
            return max(best, start)
        k = bisect_left(positions, start)
        if k >= len(positions):
            return start
        first_end = positions[k + 1] if k + 1 < len(positions) else self.size_bytes
        return first_end if first_end <= limit else start

    def retained_spans(self, start: int, max_bytes: int, limit: int,
                       at_least_one: bool = True) -> list[tuple[int, int]]:
        """The byte ranges of whole retained batches from ``start`` (a batch boundary, maybe inside a
        padding run) up to ``limit``, padding runs left out, together within ``max_bytes``: at least
        the first retained batch when it ends by ``limit`` (docs/protocol.md §16.6.1), unless not
        ``at_least_one`` (a Fetch's later partitions, §16.4)."""
        spans: list[tuple[int, int]] = []
        starts, ends = self.padding_starts, self.padding_ends
        pos, budget = start, max_bytes
        while pos < limit and (budget > 0 or not spans):
            k = bisect_right(starts, pos) - 1
            if k >= 0 and pos < ends[k]:
                pos = ends[k]  # inside a run: on to the batch after it
                continue
            stretch_end = min(starts[k + 1] if k + 1 < len(starts) else self.size_bytes, limit)
            end = self.end_within(pos, budget, stretch_end, at_least_one=at_least_one and not spans)
            if end <= pos:
                break
            spans.append((pos, end))
            budget -= end - pos
            if end < stretch_end:
                break
            pos = end
        return spans

    def batch_at_time(self, time_ms: int) -> int | None:
        """The first batch whose ``maxTimestamp`` is ``>= time_ms``; None when there is none."""
        k = bisect_left(self.max_timestamps_ms, time_ms)
        return k if k < len(self.max_timestamps_ms) else None

    def _next_offset_of(self, k: int) -> int:
        return self.offsets[k + 1] if k + 1 < len(self.offsets) else self.next_offset

    def __repr__(self) -> str:
        return (f"BatchIndex({len(self)} batches, offsets [{self.start_offset}, {self.next_offset}), "
                f"{self.size_bytes} bytes)")


def build_batch_index(file: SegmentFile, size: int, next_offset: int | None, *, chunk_bytes: int = BUILD_CHUNK_BYTES,
                      label: str = "", end_at_damage_from: int | None = None) -> BatchIndex:
    """Index the first ``size`` bytes of a segment file from its batch headers.  Blocking.

    Reads ``chunk_bytes`` at a time; a batch cut by a chunk's end is read
    again from its start with the next chunk, one larger than a chunk by its
    header alone.  ``next_offset``: the previous segment's; None for the
    oldest segment, whose first batch starts the log (0 when it has none).
    Raises ``LogLoadError`` when the bytes are not whole batches that follow
    on (recovery cut the newest segment to whole batches; older ones were
    whole when rolled), except at or after byte ``end_at_damage_from``: there
    the index ends before the first such batch (``size_bytes < size``).
    """
    assert chunk_bytes > 0, chunk_bytes
    if next_offset is None:
        next_offset = _INT64.unpack(file.pread(0, 8))[0] if size >= 8 else 0
    index = BatchIndex(next_offset)
    pos = 0
    while pos < size:
        chunk = file.pread(pos, min(chunk_bytes, size - pos))
        try:
            index.add_headers(walk_headers(chunk), pos, chunk)
            if index.size_bytes == pos:  # no whole batch in the chunk: one longer than it, or damage
                header = read_header(file.pread(pos, HEADER_BYTES)) if size - pos >= HEADER_BYTES else None
                if header is None or header.batch_length < HEADER_BYTES - LOG_OVERHEAD or pos + header.size > size:
                    raise ValueError(f"no whole v2 batch at byte {pos} of {size}")
                index.add_headers([header], pos, file.pread(pos, header.size))
        except ValueError as exc:
            if end_at_damage_from is not None and index.size_bytes >= end_at_damage_from:
                break
            raise LogLoadError(f"{label or file!r}: {exc}") from None
        pos = index.size_bytes
    return index
