"""The copy-on-write list of a log's segments (0.7's ``SegmentList``).

Every change builds a new immutable ``SegmentView`` and swaps it in with one
assignment.  A reader takes ``view`` once and binary-searches it; retention
may drop segments meanwhile, but the reader's snapshot never shifts, and the
dropped segments' files stay readable through the objects it holds.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from .segment import Segment


class SegmentView(NamedTuple):
    """An immutable snapshot: the segments, oldest first, and their start offsets."""

    segments: tuple[Segment, ...]
    starts: tuple[int, ...]

    def find(self, offset: int) -> Segment:
        """The segment whose range holds ``offset`` (the last one if past every start)."""
        index = bisect_right(self.starts, offset) - 1
        assert index >= 0, (offset, self.starts)
        return self.segments[index]


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
