"""A Kafka-format log's logical offsets and times, answered from its segments' batch indexes
(docs/protocol.md §16.6).

``KafkaOffsets`` holds no state of its own but the log start offset that
DeleteRecords set (``log_start``): each lookup takes the log's current
segment snapshot and binary-searches the ``BatchIndex`` of its segments, in
memory, so it may run on the event loop.  Byte positions are
the log's (a segment's start plus the position in it), as ``Log.read`` takes them.
"""

from __future__ import annotations

from bisect import bisect_right

from .batch_index import BatchIndex
from .log_start import LogStart
from .segment import Segment
from .segment_list import SegmentList


def batches_of(segment: Segment) -> BatchIndex:
    """The batch index of a Kafka-format log's segment (every one has an index)."""
    batches = segment.batches
    assert batches is not None, f"{segment!r} of a Kafka-format log has no batch index"
    return batches


class KafkaOffsets:
    """Lookups by logical offset, byte position and time over one log's segments."""

    __slots__ = ("_segments", "log_start")

    def __init__(self, segments: SegmentList, log_start: LogStart):
        self._segments = segments
        self.log_start = log_start  # DeleteRecords' offset, stored in the partition directory

    @property
    def next_offset(self) -> int:
        """The logical log end: the offset the next appended record gets."""
        return batches_of(self._segments.last).next_offset

    @property
    def start_offset(self) -> int:
        """The log start offset: the first batch's base offset or, when larger, DeleteRecords'
        (§16.6), never past ``next_offset``; ``next_offset`` while the log holds no batch."""
        first = batches_of(self._segments.first).start_offset
        return min(max(first, self.log_start.offset), self.next_offset)

    def position_of(self, offset: int) -> int | None:
        """Byte position of the batch holding ``offset``, or of the first batch after it; None past the end."""
        segments = self._segments.view.segments
        first = max(bisect_right(segments, offset, key=lambda s: batches_of(s).start_offset) - 1, 0)
        for segment in segments[first:]:
            batches = batches_of(segment)
            k = batches.batch_at_offset(offset)
            if k is not None:
                return segment.start + batches.positions[k]
        return None

    def offset_at(self, byte_position: int) -> int:
        """The base offset of the first batch starting at or after ``byte_position`` (a replicated
        partition's high watermark, §16.6); ``next_offset`` at or past the end."""
        view = self._segments.view
        segment = view.find(byte_position)
        return batches_of(segment).offset_at(byte_position - segment.start)

    def retained_spans(self, byte_start: int, max_bytes: int, byte_limit: int,
                       at_least_one: bool = True) -> list[tuple[int, int]]:
        """Byte ranges ``[a, b)`` of the whole retained batches from ``byte_start`` (a batch boundary,
        maybe inside a padding run), padding runs left out, within ``max_bytes`` together, bounded by
        ``byte_limit`` and ``byte_start``'s segment: at least the first retained batch when it ends by
        ``byte_limit`` unless not ``at_least_one`` (docs/protocol.md §16.4, §16.6.1); empty when
        nothing can be sent."""
        segment = self._segments.view.find(byte_start)
        limit = min(byte_limit, segment.end) - segment.start
        rel = byte_start - segment.start
        if limit <= rel:
            return []
        return [(segment.start + a, segment.start + b)
                for a, b in batches_of(segment).retained_spans(rel, max_bytes, limit, at_least_one)]

    def offset_for_time(self, time_ms: int) -> tuple[int, int] | None:
        """``(base offset, maxTimestamp)`` of the first batch whose ``maxTimestamp`` is ``>= time_ms``
        (the first segment whose largest timestamp reaches it, then the first batch in it); None if none."""
        for segment in self._segments.view.segments:
            batches = batches_of(segment)
            k = batches.batch_at_time(time_ms)
            if k is not None:
                return batches.offsets[k], batches.max_timestamps_ms[k]
        return None

    def batch_at_time(self, time_ms: int) -> tuple[int, int, int, int] | None:
        """``(base offset, maxTimestamp, byte start, byte end)`` of the batch ``offset_for_time`` finds,
        whose records a reader scans for the first one stamped ``>= time_ms`` (docs/protocol.md §16.4);
        None if none."""
        for segment in self._segments.view.segments:
            batches = batches_of(segment)
            k = batches.batch_at_time(time_ms)
            if k is not None:
                end = batches.positions[k + 1] if k + 1 < len(batches) else batches.size_bytes
                return (batches.offsets[k], batches.max_timestamps_ms[k], segment.start + batches.positions[k],
                        segment.start + end)
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """``(offset, timestamp)`` of the record with the largest timestamp (the last record of the first
        batch that has it); ``(-1, -1)`` while the log holds no batch."""
        best: tuple[int, int] | None = None
        for segment in self._segments.view.segments:
            batches = batches_of(segment)
            if len(batches) and (best is None or batches.largest_timestamp_ms > best[1]):
                best = (batches.largest_timestamp_offset, batches.largest_timestamp_ms)
        return best if best is not None else (-1, -1)

    def __repr__(self) -> str:
        return f"KafkaOffsets([{self.start_offset}, {self.next_offset}))"
