"""Loading a partition directory and crash recovery of its newest segment (spec §10.2, §10.5).

Only the newest segment is scanned.  That is sound because a roll fsyncs the
old segment before the new file exists (asserted in ``Log.complete_roll``):
every older segment was durable in full before anything was appended after it.
"""

from __future__ import annotations

import logging
import os
import struct

from trikafka.wire.messageset import scan_valid_prefix

from .errors import LogLoadError
from .fs import FileSystem, SegmentFile
from .names import SEGMENT_SUFFIX, is_temporary_file_name, parse_segment_file_name, segment_file_name
from .segment import Segment
from .swap import load_padding, recover_swaps, remove_orphan_padding

logger = logging.getLogger("trikafka.log")

# Recovery reads the newest segment in chunks so a 1 GB segment never sits in memory whole.
RECOVERY_CHUNK_BYTES = 8 << 20
_INT32 = struct.Struct(">i")


def load_segments(fs: FileSystem, dir_path: str, needs_recovery: bool) -> list[Segment]:
    """Open every segment of a partition directory, oldest first, recovering the newest.

    Finishes interrupted cleaner swaps, sweeps leftover temporary files, ignores files without the ``.kafka``
    suffix, creates an empty segment 0 in a directory without segments, and
    raises ``LogLoadError`` for malformed names or non-contiguous segments.
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
    try:
        _check_contiguous(segments)
        if needs_recovery:
            _recover_newest(segments[-1])
    except BaseException:
        for segment in segments:
            segment.file.close()
        raise
    return segments


def _check_contiguous(segments: list[Segment]) -> None:
    for older, newer in zip(segments, segments[1:]):
        if older.end != newer.start:
            problem = "gap" if older.end < newer.start else "overlap"
            raise LogLoadError(
                f"segments are not contiguous ({problem}): {older.path} covers [{older.start}, {older.end}) "
                f"but the next segment {newer.path} starts at {newer.start}"
            )


def _recover_newest(segment: Segment) -> None:
    file = segment.file
    size = file.size
    valid = scan_file_valid_prefix(file, size)
    assert 0 <= valid <= size, (valid, size)
    if valid < size:
        logger.warning("recovery truncates %s from %d to %d bytes", segment.path, size, valid)
        file.truncate(valid)
    # What survives is made durable before anyone may read it: visible data is
    # always fsynced data, even when the crash was a process crash and the
    # scanned bytes still sat unflushed in the page cache.
    file.fsync()
    segment.visible_size = valid


def scan_file_valid_prefix(file: SegmentFile, size: int) -> int:
    """Bytes of ``file`` (of ``size`` bytes) that the recovery scan accepts (spec §10.5)."""
    pos = 0
    while pos < size:
        chunk = file.pread(pos, min(RECOVERY_CHUNK_BYTES, size - pos))
        if not chunk:
            break
        valid = scan_valid_prefix(chunk)
        chunk_end = pos + len(chunk)
        pos += valid
        if pos == chunk_end:
            continue
        # The scan stopped inside the chunk: a bad entry, or one cut by the chunk's end.
        needed = _complete_entry_bytes(file, pos, size)
        if needed is None or pos + needed <= chunk_end:
            break
        if scan_valid_prefix(file.pread(pos, needed)) != needed:
            break
        pos += needed
    return pos


def _complete_entry_bytes(file: SegmentFile, pos: int, size: int) -> int | None:
    """``4 + N`` of the entry at ``pos`` if it plausibly ends within the file."""
    if size - pos < 4:
        return None
    (n,) = _INT32.unpack(file.pread(pos, 4))
    if n < 5 or pos + 4 + n > size:
        return None
    return 4 + n
