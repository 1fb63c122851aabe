"""The recovery checkpoint: how far the newest segment is known to be fsynced.

After a crash, recovery CRC-scans the newest segment from the checkpoint's
position instead of from byte 0 (the file, its 34 bytes and the rules for
trusting it are in the protocol document, "Recovery checkpoint").  The segment
files keep the 0.7 format; 0.7 never reads this file.

Writing happens in the worker thread of a flush, after the segment's fsync
returned (``FlushTicket.fsync`` calls ``RecoveryCheckpointer.after_flush``):
temp file + fsync, rename, directory fsync.  It is rate-limited: a checkpoint
costs two more fsyncs, so it is written when the flushed position moved at
least ``CHECKPOINT_MIN_BYTES`` or ``CHECKPOINT_INTERVAL_MS`` passed since the
last one.  A failed write is logged and ignored: the data is durable, and an
older checkpoint (or a full scan) stays correct.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from typing import Callable

from trikafka.wire.crc import crc32

from .fs import FileSystem
from .segment import Segment

logger = logging.getLogger("trikafka.log")

CHECKPOINT_FILE_NAME = ".trikafka-recovery-checkpoint"
CHECKPOINT_TEMP_NAME = CHECKPOINT_FILE_NAME + ".tmp"  # swept at load like every temporary file
CHECKPOINT_MAGIC = b"TKRC"
CHECKPOINT_VERSION = 1
CHECKPOINT_TAIL_BYTES = 4096
# A busy log's scan after a crash stays under ~50 ms (at ~300 MB/s) plus its unflushed tail.
CHECKPOINT_MIN_BYTES = 16 << 20
# A slow log still gets its checkpoint within a few seconds, at most one per interval.
CHECKPOINT_INTERVAL_MS = 5000

_BODY = struct.Struct(">4shqqiI")
_CRC = struct.Struct(">I")
CHECKPOINT_BYTES = _BODY.size + _CRC.size  # 34


class CheckpointRejected(ValueError):
    """The checkpoint cannot be trusted; the message says why (recovery then scans in full)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """``position`` bytes of the segment starting at ``segment_start`` were fsynced."""

    segment_start: int
    position: int
    tail_crc: int

    @property
    def tail_bytes(self) -> int:
        return min(self.position, CHECKPOINT_TAIL_BYTES)


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    body = _BODY.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, checkpoint.segment_start, checkpoint.position,
                      checkpoint.tail_bytes, checkpoint.tail_crc)
    return body + _CRC.pack(crc32(body))


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Parse the 34 bytes of a checkpoint file; ``CheckpointRejected`` if torn or garbage."""
    if len(data) != CHECKPOINT_BYTES:
        raise CheckpointRejected(f"{len(data)} bytes, expected {CHECKPOINT_BYTES}")
    body = data[:_BODY.size]
    (crc,) = _CRC.unpack_from(data, _BODY.size)
    if crc32(body) != crc:
        raise CheckpointRejected("checksum mismatch")
    magic, version, segment_start, position, tail_bytes, tail_crc = _BODY.unpack(body)
    if magic != CHECKPOINT_MAGIC or version != CHECKPOINT_VERSION:
        raise CheckpointRejected(f"magic {magic!r} version {version}, expected {CHECKPOINT_MAGIC!r} version 1")
    if segment_start < 0 or position < 0 or tail_bytes != min(position, CHECKPOINT_TAIL_BYTES):
        raise CheckpointRejected(f"inconsistent fields: start {segment_start}, position {position}, "
                                 f"tail {tail_bytes}")
    return Checkpoint(segment_start, position, tail_crc)


def checkpoint_of(segment: Segment, position: int) -> Checkpoint:
    """The checkpoint for ``position`` fsynced bytes of ``segment`` (reads its tail)."""
    tail = min(position, CHECKPOINT_TAIL_BYTES)
    return Checkpoint(segment.start, position, crc32(segment.file.pread(position - tail, tail)))


def write_checkpoint(fs: FileSystem, dir_path: str, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint of ``dir_path`` crash-safely.  Blocking: a worker thread's job."""
    temp = os.path.join(dir_path, CHECKPOINT_TEMP_NAME)
    fs.write_synced(temp, encode_checkpoint(checkpoint))
    fs.rename(temp, os.path.join(dir_path, CHECKPOINT_FILE_NAME))
    fs.fsync_dir(dir_path)


def trusted_position(fs: FileSystem, dir_path: str, newest: Segment) -> int:
    """Where the recovery scan of ``newest`` may start; ``CheckpointRejected`` says why not past 0."""
    path = os.path.join(dir_path, CHECKPOINT_FILE_NAME)
    if not fs.exists(path):
        raise CheckpointRejected("no checkpoint")
    try:
        data = fs.read_file(path)
    except OSError as exc:
        raise CheckpointRejected(f"unreadable: {exc}") from None
    checkpoint = decode_checkpoint(data)
    if checkpoint.segment_start != newest.start:
        raise CheckpointRejected(f"stale: names segment {checkpoint.segment_start}, the newest is {newest.start}")
    size = newest.file.size
    if checkpoint.position > size:
        raise CheckpointRejected(f"stale: position {checkpoint.position} is past the file's {size} bytes")
    if checkpoint_of(newest, checkpoint.position).tail_crc != checkpoint.tail_crc:
        raise CheckpointRejected(f"stale: the {checkpoint.tail_bytes} bytes before position "
                                 f"{checkpoint.position} changed")
    return checkpoint.position


class RecoveryCheckpointer:
    """One log's checkpoint writer; ``after_flush`` runs in the flush's worker thread.

    One flush per log is in flight at a time, so calls never overlap; its
    state is only touched from those calls.
    """

    __slots__ = ("_fs", "_dir_path", "_clock_ms", "_min_bytes", "_interval_ms", "_last", "_last_ms",
                 "written")

    def __init__(self, fs: FileSystem, dir_path: str, clock_ms: Callable[[], int], *,
                 min_bytes: int = CHECKPOINT_MIN_BYTES, interval_ms: int = CHECKPOINT_INTERVAL_MS):
        self._fs = fs
        self._dir_path = dir_path
        self._clock_ms = clock_ms
        self._min_bytes = min_bytes
        self._interval_ms = interval_ms
        self._last: tuple[int, int] | None = None  # (segment start, position) last written
        self._last_ms = 0
        self.written = 0  # checkpoints written (for tests and benches)

    def due(self, segment: Segment, position: int, now_ms: int) -> bool:
        """Whether a flush of ``segment`` up to ``position`` should write a checkpoint now."""
        last = self._last
        if last is None or last[0] != segment.start:
            return True  # the first flush after opening, or the first of a new segment
        if position <= last[1]:
            return False
        return position - last[1] >= self._min_bytes or now_ms - self._last_ms >= self._interval_ms

    def after_flush(self, segment: Segment, position: int) -> bool:
        """After an fsync covered ``position`` bytes of ``segment``: write the checkpoint if due.

        Blocking.  Returns whether one was written; an ``OSError`` is logged, not raised.
        """
        now_ms = self._clock_ms()
        if not self.due(segment, position, now_ms):
            return False
        try:
            write_checkpoint(self._fs, self._dir_path, checkpoint_of(segment, position))
        except OSError as exc:
            logger.warning("recovery checkpoint of %s not written (recovery will scan more): %s",
                           self._dir_path, exc)
            return False
        self._last, self._last_ms = (segment.start, position), now_ms
        self.written += 1
        return True

    # A truncation (``log/truncation.py``) replaces the checkpoint in two steps, in its
    # worker thread, while no flush is in flight: ``remove`` before it cuts anything,
    # ``after_truncate`` once the cut segment is fsynced.  Between them a crash finds no
    # checkpoint and scans the newest segment in full, which is right whatever the crash kept.

    def remove(self) -> None:
        """Delete the checkpoint file, durably.  Blocking; an ``OSError`` propagates."""
        path = os.path.join(self._dir_path, CHECKPOINT_FILE_NAME)
        if self._fs.exists(path):
            self._fs.remove(path)
            self._fs.fsync_dir(self._dir_path)
        self._last = None

    def after_truncate(self, segment: Segment, position: int) -> None:
        """After a truncation cut ``segment`` at ``position`` and fsynced it: checkpoint exactly
        there, so recovery neither scans nor trusts anything past the cut.  Blocking; an
        ``OSError`` propagates (the truncation fails the log)."""
        write_checkpoint(self._fs, self._dir_path, checkpoint_of(segment, position))
        self._last, self._last_ms = (segment.start, position), self._clock_ms()
        self.written += 1
