"""Crash-safe replacement of a segment by its cleaned copy (docs/protocol.md §11.4.2).

Files, for the segment ``S.kafka``:

* ``S.kafka.cleaned``: being written; load deletes it;
* ``S.padding.cleaned``: the new segment's padding index, complete and fsynced
  before the swap name exists; load installs it as ``S.padding`` when its runs
  are padding in ``S.kafka`` (the new segment is in place) and deletes it otherwise;
* ``S.kafka.swap``: the cleaned segment, complete and fsynced; load finishes the swap;
* ``S.padding``: the padding index of the segment in place.

A rename's two directory entries are not durable until the directory is fsynced,
and a crash may keep either change alone (the source gone, the target not yet
replaced), so no file is renamed over one that a crash could still need: the old
``S.padding`` is replaced only by writing the new index anew once ``S.kafka`` is
the new segment for good.

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


def swap_in(fs: FileSystem, dir_path: str, start: int, cleaned: SegmentFile, runs: PaddingRuns | None,
            mtime_ms: int) -> SegmentFile:
    """Make the cleaned file ``S.kafka`` and its runs ``S.padding``; return the segment reopened
    under its final name.  ``runs`` None: the segment's padding is derived from its batches
    (Kafka format, docs/protocol.md §16.6.1), so no index file is written, only the segment swapped.

    ``cleaned`` must hold every byte of the new segment; it is fsynced here.  The order is
    docs/protocol.md §11.4.2 step 4: the old padding index stays until the new segment is
    durable as ``S.kafka``, and ``S.padding.cleaned`` stays until the new index is durable
    as ``S.padding``, so after a crash each segment is old or new with its own index.
    """
    cleaned_path, padding_cleaned = cleaned_paths(dir_path, start)
    final = os.path.join(dir_path, segment_file_name(start))
    cleaned.fsync()
    size = cleaned.size
    cleaned.close()
    index = encode_padding_index(size, runs) if runs is not None else None
    if index is not None:
        write_small_file(fs, padding_cleaned, index)
    fs.touch(cleaned_path, mtime_ms)  # retention and OFFSETS read segment mtimes
    fs.fsync_dir(dir_path)  # the index's entry is durable before the swap name can be
    fs.rename(cleaned_path, final + SWAP_SUFFIX)
    fs.fsync_dir(dir_path)
    _finish_swap(fs, dir_path, start)
    if index is not None:
        _install_padding(fs, dir_path, start, index)
    return fs.open_segment(final, create=False)


def _finish_swap(fs: FileSystem, dir_path: str, start: int) -> None:
    final = os.path.join(dir_path, segment_file_name(start))
    fs.rename(final + SWAP_SUFFIX, final)
    fs.fsync_dir(dir_path)


def _install_padding(fs: FileSystem, dir_path: str, start: int, index: bytes) -> None:
    """Write ``index`` as ``S.padding``, then drop ``S.padding.cleaned`` once that is durable."""
    _, padding_cleaned = cleaned_paths(dir_path, start)
    write_small_file(fs, os.path.join(dir_path, padding_file_name(start)), index)
    fs.fsync_dir(dir_path)
    fs.remove(padding_cleaned)
    fs.fsync_dir(dir_path)


def recover_swaps(fs: FileSystem, dir_path: str) -> None:
    """Finish every interrupted swap of ``dir_path`` (run before temporary files are swept).

    A ``S.padding.cleaned`` whose runs are padding in ``S.kafka`` belongs to the segment in
    place and is installed; any other is left to the sweep (its segment never became durable).
    """
    for name in fs.listdir(dir_path):
        if name.endswith(SEGMENT_SUFFIX + SWAP_SUFFIX):
            start = parse_segment_file_name(name[:-len(SWAP_SUFFIX)])
            logger.warning("finishing the interrupted swap of %s", os.path.join(dir_path, name))
            _finish_swap(fs, dir_path, start)
    for name in fs.listdir(dir_path):
        if not name.endswith(PADDING_SUFFIX + CLEANED_SUFFIX):
            continue
        segment_name = name[:-len(PADDING_SUFFIX + CLEANED_SUFFIX)] + SEGMENT_SUFFIX
        segment_path = os.path.join(dir_path, segment_name)
        if not fs.exists(segment_path) or fs.is_dir(segment_path):
            continue
        start = parse_segment_file_name(segment_name)
        index = _read_small_file(fs, os.path.join(dir_path, name))
        segment = fs.open_segment(segment_path, create=False)
        try:
            runs = decode_padding_index(index, segment.size)
            belongs = runs is not None and runs_match_file(runs, segment)
        finally:
            segment.close()
        if belongs:
            logger.warning("finishing the interrupted installation of %s", os.path.join(dir_path, name))
            _install_padding(fs, dir_path, start, index)


def _read_small_file(fs: FileSystem, path: str) -> bytes:
    file = fs.open_segment(path, create=False)
    try:
        return file.pread(0, file.size)
    finally:
        file.close()


def load_padding(fs: FileSystem, dir_path: str, start: int, segment: SegmentFile) -> PaddingRuns:
    """The padding runs of a segment from its sidecar; a stale or damaged sidecar is deleted."""
    path = os.path.join(dir_path, padding_file_name(start))
    if not fs.exists(path):
        return NO_PADDING
    runs = decode_padding_index(_read_small_file(fs, path), segment.size)
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
