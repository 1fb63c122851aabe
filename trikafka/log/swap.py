"""Crash-safe replacement of a segment by its cleaned copy (docs/protocol.md §11.4.2).

Files, for the segment ``S.kafka``:

* ``S.kafka.cleaned`` and ``S.padding.cleaned``: being written; a crash leaves
  them incomplete, and load deletes them;
* ``S.kafka.swap``: the cleaned segment, complete and fsynced; from the moment
  its name is durable the new segment wins, and load finishes the swap;
* ``S.padding``: the padding index of the segment in place.

Everything here blocks (fsync, rename): worker threads or load only.
"""

from __future__ import annotations

import logging
import os

from .fs import FileSystem, SegmentFile
from .names import (
    CLEANED_SUFFIX,
    PADDING_SUFFIX,
    SEGMENT_SUFFIX,
    SWAP_SUFFIX,
    padding_file_name,
    parse_segment_file_name,
    segment_file_name,
)
from .padding import NO_PADDING, PaddingRuns, decode_padding_index, encode_padding_index, runs_match_file

logger = logging.getLogger("trikafka.log")


def cleaned_paths(dir_path: str, start: int) -> tuple[str, str]:
    """``(segment, padding index)`` paths a cleaning of segment ``start`` writes first."""
    return (os.path.join(dir_path, segment_file_name(start) + CLEANED_SUFFIX),
            os.path.join(dir_path, padding_file_name(start) + CLEANED_SUFFIX))


def create_cleaned(fs: FileSystem, dir_path: str, start: int) -> SegmentFile:
    """A new, empty ``S.kafka.cleaned`` (a leftover of an earlier attempt is replaced)."""
    path, _ = cleaned_paths(dir_path, start)
    if fs.exists(path):
        fs.remove(path)
    return fs.open_segment(path, create=True)


def write_small_file(fs: FileSystem, path: str, data: bytes) -> None:
    """Create ``path`` with ``data``, fsynced (its directory entry is the caller's to sync)."""
    if fs.exists(path):
        fs.remove(path)
    file = fs.open_segment(path, create=True)
    try:
        file.append(data)
        file.fsync()
    finally:
        file.close()


def swap_in(fs: FileSystem, dir_path: str, start: int, cleaned: SegmentFile, runs: PaddingRuns,
            mtime_ms: int) -> SegmentFile:
    """Make the cleaned file ``S.kafka`` and return it, reopened under its final name.

    ``cleaned`` must hold every byte of the new segment; it is fsynced here.
    """
    cleaned_path, padding_cleaned = cleaned_paths(dir_path, start)
    final = os.path.join(dir_path, segment_file_name(start))
    swap = final + SWAP_SUFFIX
    cleaned.fsync()
    size = cleaned.size
    cleaned.close()
    write_small_file(fs, padding_cleaned, encode_padding_index(size, runs))
    fs.touch(cleaned_path, mtime_ms)  # retention and OFFSETS read segment mtimes
    fs.fsync_dir(dir_path)  # the index's entry is durable before the swap name can be
    fs.rename(cleaned_path, swap)
    fs.fsync_dir(dir_path)  # the new segment wins from here on
    _finish_swap(fs, dir_path, start)
    return fs.open_segment(final, create=False)


def _finish_swap(fs: FileSystem, dir_path: str, start: int) -> None:
    final = os.path.join(dir_path, segment_file_name(start))
    _, padding_cleaned = cleaned_paths(dir_path, start)
    if fs.exists(padding_cleaned):
        fs.rename(padding_cleaned, os.path.join(dir_path, padding_file_name(start)))
        fs.fsync_dir(dir_path)  # the index is in place before the segment it describes
    fs.rename(final + SWAP_SUFFIX, final)
    fs.fsync_dir(dir_path)


def recover_swaps(fs: FileSystem, dir_path: str) -> None:
    """Finish every interrupted swap of ``dir_path`` (run before temporary files are swept)."""
    for name in fs.listdir(dir_path):
        if name.endswith(SEGMENT_SUFFIX + SWAP_SUFFIX):
            start = parse_segment_file_name(name[:-len(SWAP_SUFFIX)])
            logger.warning("finishing the interrupted swap of %s", os.path.join(dir_path, name))
            _finish_swap(fs, dir_path, start)


def load_padding(fs: FileSystem, dir_path: str, start: int, segment: SegmentFile) -> PaddingRuns:
    """The padding runs of a segment from its sidecar; a stale or damaged sidecar is deleted."""
    path = os.path.join(dir_path, padding_file_name(start))
    if not fs.exists(path):
        return NO_PADDING
    file = fs.open_segment(path, create=False)
    try:
        runs = decode_padding_index(file.pread(0, file.size), segment.size)
    finally:
        file.close()
    if runs is None or not runs_match_file(runs, segment):
        logger.warning("removing the stale padding index %s", path)
        fs.remove(path)
        fs.fsync_dir(dir_path)
        return NO_PADDING
    return runs


def remove_orphan_padding(fs: FileSystem, dir_path: str, names: list[str]) -> None:
    """Delete padding indexes whose segment is gone (retention died between two unlinks)."""
    segments = {n[:-len(SEGMENT_SUFFIX)] for n in names if n.endswith(SEGMENT_SUFFIX)}
    orphans = [n for n in names if n.endswith(PADDING_SUFFIX) and n[:-len(PADDING_SUFFIX)] not in segments]
    for name in orphans:
        fs.remove(os.path.join(dir_path, name))
    if orphans:
        fs.fsync_dir(dir_path)
