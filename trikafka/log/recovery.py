"""Loading a partition directory and crash recovery of its newest segment (spec §7.1, §7.3).

Only the newest segment is scanned.  That is sound because a roll fsyncs the
old segment before the new file exists (asserted in ``Flushing.complete_roll``):
every older segment was durable in full before anything was appended after it.

The scan starts at the recovery checkpoint's position when the checkpoint can
be trusted (``checkpoint.trusted_position``), else at byte 0 as in 0.7.  A
rejected checkpoint file is removed once the segment is recovered.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from .batch_index import build_batch_index
from .checkpoint import CHECKPOINT_FILE_NAME, CheckpointRejected, trusted_position
from .errors import LogLoadError
from .fs import FileSystem, SegmentFile
from .names import SEGMENT_SUFFIX, is_temporary_file_name, parse_segment_file_name, segment_file_name
from .record_format import FORMAT_07, RecordFormat
from .segment import Segment
from .swap import load_padding, recover_swaps, remove_orphan_padding

logger = logging.getLogger("trikafka.log")

# Recovery reads the newest segment in chunks so a 1 GB segment never sits in memory whole.
RECOVERY_CHUNK_BYTES = 8 << 20
# A scan longer than this logs its progress (and again every interval).
PROGRESS_INTERVAL_S = 1.0


def load_segments(fs: FileSystem, dir_path: str, needs_recovery: bool,
                  chunk_bytes: int = RECOVERY_CHUNK_BYTES,
                  fmt: RecordFormat = FORMAT_07) -> tuple[list[Segment], int | None]:
    """Open every segment of a partition directory, oldest first, recovering the newest.

    Returns the segments and, when recovery ran, the log offset from which it
    kept bytes on their CRCs alone (before it, every byte was known fsynced:
    older segments and the checkpointed prefix of the newest), else None.

    Finishes interrupted cleaner swaps, sweeps leftover temporary files, ignores files without the ``.kafka``
    suffix, creates an empty segment 0 in a directory without segments, and
    raises ``LogLoadError`` for malformed names or non-contiguous segments.
    The recovery scan reads ``chunk_bytes`` at a time and keeps the entries of
    the directory's record format ``fmt`` (0.7 messages, or v2 batches, §16.6);
    then, for v2, every segment gets its batch index, read in chunks as well.
    """
    recover_swaps(fs, dir_path)  # a complete cleaned segment wins over the sweep below
    names = fs.listdir(dir_path)
    leftovers = [n for n in names if is_temporary_file_name(n)]
    for name in leftovers:
        logger.warning("removing leftover temporary file %s", os.path.join(dir_path, name))
        fs.remove(os.path.join(dir_path, name))
    if leftovers:
        fs.fsync_dir(dir_path)
    names = [n for n in names if n not in leftovers]
    remove_orphan_padding(fs, dir_path, names)
    starts = sorted(parse_segment_file_name(n) for n in names if n.endswith(SEGMENT_SUFFIX))
    if not starts:
        fs.open_segment(os.path.join(dir_path, segment_file_name(0)), create=True).close()
        fs.fsync_dir(dir_path)
        starts = [0]
    segments = []
    for start in starts:
        path = os.path.join(dir_path, segment_file_name(start))
        if fs.is_dir(path):
            raise LogLoadError(f"{path} is a directory, not a segment file")
        file = fs.open_segment(path, create=False)
        segments.append(Segment(start, path, file, file.size))
        segments[-1].padding = load_padding(fs, dir_path, start, file)
    checked_from = None
    try:
        _check_contiguous(segments)
        if needs_recovery:
            checked_from = segments[-1].start + _recover_newest(fs, dir_path, segments[-1], chunk_bytes, fmt)
        if fmt.logical_offsets:
            index_segments(segments, chunk_bytes, checked_from)
    except BaseException:
        for segment in segments:
            segment.file.close()
        raise
    return segments, checked_from


def index_segments(segments: list[Segment], chunk_bytes: int, checked_from: int | None) -> None:
    """Give every segment of a Kafka-format log, oldest first, its batch index (after recovery).  Blocking.

    ``checked_from``: where recovery kept bytes on their CRCs alone (``load_segments``).
    ``baseOffset`` lies outside a batch's CRC, so such a batch may still not
    follow on; the newest segment is cut before the first one that does not,
    as recovery cuts an invalid batch (the cut is fsynced).
    """
    next_offset: int | None = None  # the oldest segment's first batch starts the log
    last = segments[-1]
    for segment in segments:
        end_at_damage_from = checked_from - segment.start if checked_from is not None and segment is last else None
        batches = build_batch_index(segment.file, segment.size, next_offset, chunk_bytes=chunk_bytes,
                                    label=segment.path, end_at_damage_from=end_at_damage_from)
        if batches.size_bytes < segment.size:
            logger.warning("recovery truncates %s from %d to %d bytes: the next batch does not follow on "
                           "offset %d", segment.path, segment.size, batches.size_bytes, batches.next_offset)
            segment.file.truncate(batches.size_bytes)
            segment.file.fsync()
            segment.visible_size = min(segment.visible_size, batches.size_bytes)
        segment.batches = batches
        next_offset = batches.next_offset


def _check_contiguous(segments: list[Segment]) -> None:
    for older, newer in zip(segments, segments[1:]):
        if older.end != newer.start:
            problem = "gap" if older.end < newer.start else "overlap"
            raise LogLoadError(
                f"segments are not contiguous ({problem}): {older.path} covers [{older.start}, {older.end}) "
                f"but the next segment {newer.path} starts at {newer.start}"
            )


def _recover_newest(fs: FileSystem, dir_path: str, segment: Segment, chunk_bytes: int, fmt: RecordFormat) -> int:
    """Recover the newest segment; the position in it where the CRC scan started."""
    file = segment.file
    size = file.size
    checkpoint_path = os.path.join(dir_path, CHECKPOINT_FILE_NAME)
    rejected = False
    try:
        start = trusted_position(fs, dir_path, segment)
    except CheckpointRejected as exc:
        start, rejected = 0, True
        # A missing checkpoint is ordinary (a log from 0.7, or never flushed); a bad one is worth a warning.
        # Missing, it is at DEBUG: a restart after a crash meets it in every log never flushed since.
        level = logging.WARNING if fs.exists(checkpoint_path) else logging.DEBUG
        logger.log(level, "recovery scans all %d bytes of %s: checkpoint not used (%s)", size, segment.path, exc)
    valid = scan_file_valid_prefix(file, size, start=start, chunk_bytes=chunk_bytes, label=segment.path, fmt=fmt)
    assert start <= valid <= size, (start, valid, size)
    if valid < size:
        logger.warning("recovery truncates %s from %d to %d bytes", segment.path, size, valid)
        file.truncate(valid)
    # What survives is made durable before anyone may read it: visible data is
    # always fsynced data, even when the crash was a process crash and the
    # scanned bytes still sat unflushed in the page cache.
    file.fsync()
    segment.visible_size = valid
    if rejected and fs.exists(checkpoint_path):
        fs.remove(checkpoint_path)  # never consulted again; the next flush writes a good one
        fs.fsync_dir(dir_path)
    return start


def scan_file_valid_prefix(file: SegmentFile, size: int, *, start: int = 0,
                           chunk_bytes: int = RECOVERY_CHUNK_BYTES, label: str = "",
                           clock_s: Callable[[], float] = time.monotonic, fmt: RecordFormat = FORMAT_07) -> int:
    """Bytes of ``file`` (of ``size`` bytes) that the recovery scan of ``fmt`` accepts (spec §7.3, §16.6).

    Scans entries from ``start`` (an entry boundary), reading ``chunk_bytes``
    at a time; a scan longer than ``PROGRESS_INTERVAL_S`` logs its progress.
    """
    assert chunk_bytes > 0 and 0 <= start <= size, (chunk_bytes, start, size)
    pos = start
    started_s = clock_s()
    report_s = started_s + PROGRESS_INTERVAL_S
    while pos < size:
        chunk = file.pread(pos, min(chunk_bytes, size - pos))
        if not chunk:
            break
        valid = fmt.scan_valid_prefix(chunk)
        chunk_end = pos + len(chunk)
        pos += valid
        now_s = clock_s()
        if now_s >= report_s:
            _log_progress(label, start, pos, size, now_s - started_s)
            report_s = now_s + PROGRESS_INTERVAL_S
        if pos == chunk_end:
            continue
        # The scan stopped inside the chunk: a bad entry, or one cut by the chunk's end.
        needed = _complete_entry_bytes(file, pos, size, fmt)
        if needed is None or pos + needed <= chunk_end:
            break
        if fmt.scan_valid_prefix(file.pread(pos, needed)) != needed:
            break
        pos += needed
    elapsed_s = clock_s() - started_s
    if elapsed_s >= PROGRESS_INTERVAL_S:
        _log_progress(label, start, pos, size, elapsed_s, done=True)
    return pos


def _log_progress(label: str, start: int, pos: int, size: int, elapsed_s: float, done: bool = False) -> None:
    scanned, total = pos - start, size - start
    logger.info("recovery scan of %s %s %d of %d bytes (%.0f%%) in %.1f s, %.1f MB/s", label,
                "done:" if done else "at", scanned, total, 100 * scanned / total if total else 100,
                elapsed_s, scanned / elapsed_s / 1e6 if elapsed_s > 0 else 0.0)


def _complete_entry_bytes(file: SegmentFile, pos: int, size: int, fmt: RecordFormat) -> int | None:
    """The size of the entry at ``pos`` if it plausibly ends within the file."""
    if size - pos < fmt.prefix_bytes:
        return None
    needed = fmt.entry_bytes(file.pread(pos, fmt.prefix_bytes))
    if needed is None or pos + needed > size:
        return None
    return needed
