"""The copy-on-write list of a log's segments (0.7's ``SegmentList``) and the reads of a snapshot.

Every change builds a new immutable ``SegmentView`` and swaps it in with one
assignment.  A reader takes ``view`` once and binary-searches it, making its
``FileRegion`` in the same step (``read``); retention may drop segments
meanwhile, but the snapshot never shifts, and a region taken before the drop
stays readable: retention closes a dropped file only once no region holds it.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, NamedTuple

from trikafka.wire.requests import OFFSETS_EARLIEST, OFFSETS_LATEST
from trikafka.wire.responses import ChunkSequence, FileRegion

from .errors import OffsetOutOfRangeError
from .segment import Segment

TIME_LATEST = OFFSETS_LATEST  # the visible end and segment starts (spec §5.5)
TIME_EARLIEST = OFFSETS_EARLIEST  # the start of the log


class SegmentView(NamedTuple):
    """An immutable snapshot: the segments, oldest first, and their start offsets."""

    segments: tuple[Segment, ...]
    starts: tuple[int, ...]

    def find(self, offset: int) -> Segment:
        """The segment whose range holds ``offset`` (the last one if past every start)."""
        index = bisect_right(self.starts, offset) - 1
        assert index >= 0, (offset, self.starts)
        return self.segments[index]

    def read(self, offset: int, max_bytes: int, end: int | None = None) -> FileRegion | ChunkSequence | None:
        """Bytes from ``offset`` up to ``end``, at most ``max_bytes``, within one segment (``Log.read``).

        ``end`` defaults to the visible end ``E``; at most the log end (the
        next append offset), else ``ValueError``.  Raises
        ``OffsetOutOfRangeError`` when ``offset < S`` or ``offset > end``.
        Returns None at exactly ``end`` or for ``max_bytes == 0``.  The region
        may end inside an entry; it never crosses into the next segment.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        last = self.segments[-1]
        if end is None:
            end = last.visible_end
        elif end > last.end:
            raise ValueError(f"read end {end} is past the log end {last.end}")
        start_offset = self.segments[0].start
        if offset < start_offset or offset > end:
            raise OffsetOutOfRangeError(offset, start_offset, end)
        if offset == end or max_bytes == 0:
            return None
        segment = self.find(offset)
        return segment.region(offset - segment.start, max_bytes, min(end, segment.end) - segment.start)

    def offsets_before(self, time_ms: int, max_offsets: int, mtime_ms: Callable[[str], int],
                       now_ms: int) -> list[int]:
        """The OFFSETS answer of spec §5.5, newest first.

        ``time_ms`` -1 means latest, -2 earliest; otherwise each segment's file
        time (``mtime_ms(path)``) is compared with it, and a visible end after
        the last segment's start counts as written at ``now_ms``.
        ``max_offsets < 0`` raises ``ValueError``.
        """
        if max_offsets < 0:
            raise ValueError(f"max_offsets must be >= 0, got {max_offsets}")
        segments = self.segments
        offsets = [s.start for s in segments]
        last_visible = segments[-1].visible_size > 0
        if last_visible:
            offsets.append(segments[-1].visible_end)
        if time_ms == TIME_LATEST:
            index = len(offsets) - 1
        elif time_ms == TIME_EARLIEST:
            index = 0
        else:
            times = [mtime_ms(s.path) for s in segments]
            if last_visible:
                times.append(now_ms)
            index = max((i for i, t in enumerate(times) if t <= time_ms), default=-1)
        count = min(max_offsets, index + 1)
        return [offsets[i] for i in range(index, index - count, -1)]


class SegmentList:
    """Segments of one log; never empty, always contiguous."""

    __slots__ = ("_view",)

    def __init__(self, segments: list[Segment]):
        assert segments, "a log always has at least one segment"
        for older, newer in zip(segments, segments[1:]):
            assert older.end == newer.start, (older, newer)
        self._view = SegmentView(tuple(segments), tuple(s.start for s in segments))

    @property
    def view(self) -> SegmentView:
        return self._view

    @property
    def first(self) -> Segment:
        return self._view.segments[0]

    @property
    def last(self) -> Segment:
        return self._view.segments[-1]

    def __len__(self) -> int:
        return len(self._view.segments)

    def append(self, segment: Segment) -> None:
        """Add a new last segment, which must start where the current last one ends."""
        old = self._view
        assert segment.start == old.segments[-1].end, (old.segments[-1], segment)
        self._view = SegmentView(old.segments + (segment,), old.starts + (segment.start,))

    def drop_first(self, count: int) -> tuple[Segment, ...]:
        """Remove the ``count`` oldest segments (never all of them) and return them."""
        old = self._view
        assert 0 <= count < len(old.segments), (count, len(old.segments))
        self._view = SegmentView(old.segments[count:], old.starts[count:])
        return old.segments[:count]

    def drop_after(self, segment: Segment) -> tuple[Segment, ...]:
        """Make ``segment`` the last one (a truncation); returns the later segments, oldest first."""
        old = self._view
        index = old.segments.index(segment)
        self._view = SegmentView(old.segments[:index + 1], old.starts[:index + 1])
        return old.segments[index + 1:]

    def restore(self, view: SegmentView) -> None:
        """Put back a view taken before ``drop_after`` (a truncation that was refused)."""
        assert view.segments[:len(self._view.segments)] == self._view.segments, (view, self._view)
        self._view = view

    def replace(self, segment: Segment) -> Segment | None:
        """Swap in ``segment`` for the one with the same start and size (a cleaned copy).

        Returns the replaced segment, or None when no such segment is left
        (retention dropped it, or the log rolled past it in size).
        """
        old = self._view
        for i, current in enumerate(old.segments):
            if current.start == segment.start and current.size == segment.size and i < len(old.segments) - 1:
                segments = old.segments[:i] + (segment,) + old.segments[i + 1:]
                self._view = SegmentView(segments, old.starts)
                return current
        return None
