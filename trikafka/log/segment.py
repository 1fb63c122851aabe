"""One segment file of a log (spec §7.1): a start offset, a file, a visible size."""

from __future__ import annotations

from trikafka.wire.responses import ChunkSequence, FileRegion

from .batch_index import BatchIndex
from .fs import SegmentFile
from .padding import NO_PADDING, PaddingRuns, synthesized_region


class Segment:
    """Bytes ``[start, start + size)`` of a partition's stream, in one file.

    ``visible_size`` is what readers may see: bytes that were fsynced (spec
    §7.2).  It never exceeds what a completed fsync covered, and only grows,
    except when a truncation cuts the segment (``cut``).
    ``first_append_ms`` (for age-based rolling) lives in memory only, as in
    0.7: it is ``None`` until this process appends to the segment.  ``padding``:
    the runs the cleaner covered with 0.7 padding entries (empty unless cleaned;
    always empty in a Kafka-format log, whose padding runs its ``batches`` hold, §16.6.1).
    ``cut``: while a truncation is in flight, the segment's logical size; the
    file may still be longer until the truncation ticket has run (None otherwise).
    ``batches``: in a Kafka-format log, the index of every batch in the file
    (docs/protocol.md §16.6), unflushed ones too; None in a 0.7 log.
    """

    __slots__ = ("start", "path", "file", "visible_size", "first_append_ms", "padding", "cut", "batches")

    def __init__(self, start: int, path: str, file: SegmentFile, visible_size: int):
        assert start >= 0, start
        assert 0 <= visible_size <= file.size, (visible_size, file.size)
        self.start = start
        self.path = path
        self.file = file
        self.visible_size = visible_size
        self.first_append_ms: int | None = None
        self.padding: PaddingRuns = NO_PADDING
        self.cut: int | None = None
        self.batches: BatchIndex | None = None

    @property
    def size(self) -> int:
        """Bytes in the file, flushed or not (bytes a truncation in flight cuts do not count)."""
        return self.file.size if self.cut is None else self.cut

    @property
    def end(self) -> int:
        """Offset just after the last byte written (the next append offset)."""
        return self.start + self.size

    @property
    def visible_end(self) -> int:
        return self.start + self.visible_size

    @property
    def fully_flushed(self) -> bool:
        return self.visible_size == self.size

    def mark_flushed(self, size: int) -> bool:
        """Make the first ``size`` bytes visible, after an fsync covered them.

        Returns True when the visible size grew.  A stale, smaller size (from a
        flush that finished after a later one) changes nothing.
        """
        assert size <= self.size, (size, self.size)
        if size <= self.visible_size:
            return False
        self.visible_size = size
        return True

    def successor_batches(self) -> BatchIndex | None:
        """The empty batch index of the segment that follows this one (None in a 0.7 log)."""
        return BatchIndex(self.batches.next_offset) if self.batches is not None else None

    def region(self, position: int, max_bytes: int, limit: int | None = None) -> FileRegion | ChunkSequence:
        """Up to ``max_bytes`` bytes from ``position`` (relative to ``start``), none at or past ``limit``.

        ``limit`` defaults to the visible size; a replica fetch passes more (its
        bytes are in the file, flushed or not).  At or inside a padding run
        that ends by ``limit``, one synthesized padding entry to the run's end
        comes first (docs/protocol.md §11.3.2): the answer is then a
        ``ChunkSequence`` and may exceed ``max_bytes``.
        """
        if limit is None:
            limit = self.visible_size
        assert 0 <= position < limit <= self.size, (position, limit, self.size)
        assert max_bytes > 0, max_bytes
        run = self.padding.find(position) if self.padding else None
        if run is not None and run[1] <= limit:
            region = synthesized_region(self.file, position, run[1], max_bytes, limit)
            if region is not None:
                return region
        return FileRegion(self.file.reader, position, min(max_bytes, limit - position))

    def __repr__(self) -> str:
        return f"Segment(start={self.start}, size={self.size}, visible={self.visible_size})"
