"""The log cleaner: compaction that keeps every byte offset (docs/protocol.md §11.4; Kafka format §16.6.1).

``LogCleaner.clean(log, policy)`` does one pass over one log and blocks (reads,
writes, fsyncs, renames): call it from a worker thread.  It never mutates the
``Log``: it returns the cleaned segments, which the owner of the log installs
on its own thread with ``Log.install_cleaned`` (the files are already swapped
on disk by then, and the old segments' bytes at every retained offset are the
same, so readers of either see the same messages).  Set ``log.cleaning`` for
the duration (retention waits).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable

from .batch_index import build_batch_index
from .clean_format import CleanFormat, clean_format, padded_bytes
from .clean_scan import CleanerError, ScannedEntry, add_to_map, new_keys, pinned_tombstones, removable_runs
from .fs import FileSystem, SegmentFile
from .keymap import KeyMap
from .padding import PaddingRuns
from .segment import Segment
from .swap import create_cleaned, swap_in, write_small_file
from .throttle import Throttler

logger = logging.getLogger("trikafka.log.cleaner")

CHECKPOINT_FILE = "cleaner-checkpoint"
COPY_CHUNK_BYTES = 1 << 20
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """Per-topic cleaning settings (cleanup.policy and friends)."""

    compact: bool = False
    delete: bool = True
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = DAY_MS
    min_cleanable_dirty_ratio: float = 0.5


@dataclass(slots=True)
class CleanResult:
    """What one pass did; ``segments`` are to be installed with ``Log.install_cleaned``."""

    topic: str
    partition: int
    segments: list[Segment] = field(default_factory=list)
    read_bytes: int = 0
    written_bytes: int = 0
    padded_bytes: int = 0  # bytes newly covered by padding
    first_dirty: int = 0
    map_end: int = 0


class CleanerStopped(Exception):
    """A pass ended early because ``should_stop()`` became true (shutdown)."""


def parse_cleanup_policy(text: str) -> tuple[bool, bool]:
    """``(compact, delete)`` from ``delete``, ``compact``, ``compact,delete`` (``+`` works too)."""
    parts = {p.strip() for p in text.replace("+", ",").split(",") if p.strip()}
    if not parts or not parts <= {"compact", "delete"}:
        raise ValueError(f"cleanup.policy must be delete, compact or compact,delete, not {text!r}")
    return "compact" in parts, "delete" in parts


class LogCleaner:
    """Cleans logs one pass at a time; thread-safe (each pass works on one log)."""

    def __init__(self, fs: FileSystem, clock_ms: Callable[[], int], *, dedupe_buffer_bytes: int = 128 << 20,
                 throttler: Throttler | None = None, should_stop: Callable[[], bool] = lambda: False):
        self.fs = fs
        self.clock_ms = clock_ms
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.throttler = throttler if throttler is not None else Throttler(0)
        self.should_stop = should_stop  # polled between segments and copies: a shutdown stops a pass

    # -- choosing ----------------------------------------------------------------------

    def cleanable_range(self, log, policy: CompactionPolicy) -> tuple[int, int, int]:
        """``(S, first_dirty, L)``: the log start, where the last pass stopped, the clean limit.

        ``L`` is the start of the first segment that must stay: the active one, one
        modified within ``min.compaction.lag.ms``, or (replicated partitions) one that
        reaches past the high watermark.  Blocks (stats every segment).
        """
        segments = log.segments.segments
        now_ms = self.clock_ms()
        limit = segments[-1].start
        for segment in segments[:-1]:
            if now_ms - self.fs.mtime_ms(segment.path) < policy.min_compaction_lag_ms:
                limit = segment.start
                break
        cleanable_end = getattr(log, "cleanable_end", None)
        if cleanable_end is not None:
            committed = cleanable_end()
            limit = min(limit, next((s.start for s in segments if s.end > committed), limit))
        start = segments[0].start
        first_dirty = min(max(self.read_checkpoint(log.dir_path), start), limit)
        return start, first_dirty, limit

    def dirty_ratio(self, log, policy: CompactionPolicy) -> float:
        """Share of the cleanable bytes not yet cleaned (0 when nothing is cleanable)."""
        start, first_dirty, limit = self.cleanable_range(log, policy)
        return 0.0 if limit <= start else (limit - first_dirty) / (limit - start)

    # -- one pass ----------------------------------------------------------------------

    def clean(self, log, policy: CompactionPolicy,
              install: Callable[[Segment], object] | None = None) -> CleanResult:
        """One pass over ``log`` (see the module docstring).

        ``install(segment)`` is called after each segment's swap (it must hand the
        segment to ``Log.install_cleaned`` on the log's thread); without it the
        segments are only returned.  Raises ``CleanerError`` for a segment that does
        not parse and ``CleanerStopped`` when ``should_stop()`` turned true: segments
        swapped before that stay swapped (and installed), the others are untouched.
        """
        fmt = clean_format(log)
        start, first_dirty, limit = self.cleanable_range(log, policy)
        result = CleanResult(log.topic, log.partition, first_dirty=first_dirty, map_end=first_dirty)
        charged_before = self.throttler.charged_bytes
        segments = [s for s in log.segments.segments if s.end <= limit]
        keymap = KeyMap(self.dedupe_buffer_bytes)
        dirty_entries: dict[int, list[ScannedEntry]] = {}  # the dirty segments' entries, read once for both steps
        for segment in segments:
            if segment.start < first_dirty:
                continue
            self._check_stop()
            entries = list(fmt.scan(segment.file, segment.size, self.throttler))
            if len(keymap) and new_keys(keymap, entries) > keymap.room():
                break  # the map is full: this pass stops at a segment boundary
            add_to_map(keymap, segment.start, entries)
            dirty_entries[segment.start] = entries
            result.map_end = segment.end
        if result.map_end <= first_dirty:
            return result
        horizon_ms = self.clock_ms() - policy.delete_retention_ms
        scanned = []
        for segment in segments:
            if segment.end > result.map_end:
                break
            self._check_stop()
            mtime_ms = self.fs.mtime_ms(segment.path)
            cached = dirty_entries.pop(segment.start, None)
            entries = cached if cached is not None else list(fmt.scan(segment.file, segment.size, self.throttler))
            scanned.append((segment, mtime_ms, entries))
        keep: set[int] = set()
        while True:  # until no dropped tombstone would let an older value come back
            plans = [(segment.start, entries, removable_runs(segment.start, entries, keymap, mtime_ms < horizon_ms,
                                                               frozenset(keep), fmt.min_run_bytes))
                     for segment, mtime_ms, entries in scanned]
            pins = pinned_tombstones(plans, keymap)
            if pins <= keep:
                break
            keep |= pins
        for (segment, mtime_ms, _), (_, _, runs) in zip(scanned, plans):
            if not any(news for _, _, news in runs):
                continue
            self._check_stop()
            cleaned = self._rewrite(log, fmt, segment, runs, mtime_ms)
            result.segments.append(cleaned)
            if install is not None:
                install(cleaned)
            result.padded_bytes += padded_bytes(cleaned) - padded_bytes(segment)
            result.written_bytes += segment.size - padded_bytes(cleaned)
        self.write_checkpoint(log.dir_path, result.map_end)
        result.read_bytes = self.throttler.charged_bytes - charged_before - result.written_bytes
        return result

    def _rewrite(self, log, fmt: CleanFormat, segment: Segment, runs: list[tuple[int, int, bool]],
                 mtime_ms: int) -> Segment:
        new = create_cleaned(self.fs, log.dir_path, segment.start)
        try:
            pos = 0
            for run_start, run_end, _ in runs:
                self._copy(segment.file, new, pos, run_start)
                for head, piece_bytes in fmt.padding(segment.file, run_start, run_end, log.config.max_message_size):
                    new.append(head)
                    new.truncate(new.size + piece_bytes - len(head))  # the zeros: a hole, not written
                    self.throttler.charge(len(head))
                pos = run_end
            self._copy(segment.file, new, pos, segment.size)
            assert new.size == segment.size, (new, segment)
        except BaseException:
            new.close()
            raise
        padding = PaddingRuns.of([(a, b) for a, b, _ in runs]) if fmt.padding_index else None
        file = swap_in(self.fs, log.dir_path, segment.start, new, padding, mtime_ms)
        cleaned = Segment(segment.start, segment.path, file, file.size)
        if padding is not None:
            cleaned.padding = padding
        if segment.batches is not None:  # the swapped bytes' own index, padding runs included
            cleaned.batches = build_batch_index(file, file.size, segment.batches.start_offset, label=segment.path)
        logger.info("cleaned %s: %d of %d bytes are padding now", segment.path, padded_bytes(cleaned), segment.size)
        return cleaned

    def _check_stop(self) -> None:
        if self.should_stop():
            raise CleanerStopped("the cleaner was asked to stop")

    def _copy(self, source: SegmentFile, target: SegmentFile, start: int, end: int) -> None:
        while start < end:
            self._check_stop()
            n = min(COPY_CHUNK_BYTES, end - start)
            self.throttler.charge(2 * n)  # read and written
            data = source.pread(start, n)
            if len(data) != n:
                raise CleanerError(f"short read of {source!r} at {start}")
            target.append(data)
            start += n

    # -- checkpoint ------------------------------------------------------------------------

    def read_checkpoint(self, dir_path: str) -> int:
        """Where the previous pass stopped (0 if none or unreadable)."""
        path = os.path.join(dir_path, CHECKPOINT_FILE)
        if not self.fs.exists(path):
            return 0
        file = self.fs.open_segment(path, create=False)
        try:
            text = file.pread(0, file.size).decode("ascii", "replace").strip()
        finally:
            file.close()
        return int(text) if text.isdigit() else 0

    def write_checkpoint(self, dir_path: str, offset: int) -> None:
        path = os.path.join(dir_path, CHECKPOINT_FILE)
        write_small_file(self.fs, path + ".tmp", str(offset).encode("ascii"))
        self.fs.rename(path + ".tmp", path)
        self.fs.fsync_dir(dir_path)
