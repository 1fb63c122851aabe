"""The leader-epoch history of one replica: epoch -> start offset, and its crash-safe file.

Every replica of a replicated partition keeps the byte offset at which each
leader epoch began in its log.  A follower that must find where its log
stops agreeing with a new leader's asks "where does my last epoch end on
your side?" and truncates exactly there (KIP-101), never blindly to its high
watermark.  The queries live in ``EpochHistory`` (pure); ``EpochFile`` stores
it in ``leader-epochs.trikafka`` in the partition directory through the log's
``FileSystem``, so the fake file system's crash model applies to it too.

File format (big-endian): the magic ``TKE1``, then 16-byte records
``int32 epoch, int64 start_offset, uint32 crc32(first 12 bytes)``.
A record is fsynced before any message of its epoch is appended; a torn
record at the end (short or bad CRC) and anything after it is cut on load.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
from dataclasses import dataclass
from typing import Iterator

from trikafka.wire.crc import crc32

from .errors import LogFailedError
from .fs import FileSystem, SegmentFile

EPOCH_FILE_NAME = "leader-epochs.trikafka"
EPOCH_FILE_MAGIC = b"TKE1"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

_BODY = struct.Struct(">iq")
_CRC = struct.Struct(">I")
RECORD_BYTES = _BODY.size + _CRC.size  # 16


class EpochOrderError(ValueError):
    """An epoch or start offset that would break the history's ordering."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Epoch ``epoch`` began at byte ``start_offset`` of the log."""

    epoch: int
    start_offset: int


class EpochHistory:
    """Epoch -> start offset, strictly increasing in epoch, non-decreasing in offset."""

    __slots__ = ("_entries",)

    def __init__(self, entries: list[EpochEntry] | tuple[EpochEntry, ...] = ()):
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """The history, oldest first."""
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or UNDEFINED_EPOCH when the history is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def check_assign(self, epoch: int, start_offset: int) -> bool:
        """True if ``assign`` would add an entry; raises EpochOrderError if it is illegal."""
        if epoch < 0 or start_offset < 0:
            raise EpochOrderError(f"epoch {epoch} at offset {start_offset}: both must be >= 0")
        if not self._entries:
            return True
        last = self._entries[-1]
        if epoch == last.epoch:
            if start_offset < last.start_offset:
                raise EpochOrderError(f"epoch {epoch} already starts at {last.start_offset}, not {start_offset}")
            return False
        if epoch < last.epoch:
            raise EpochOrderError(f"epoch {epoch} is older than the latest, {last.epoch}")
        if start_offset < last.start_offset:
            raise EpochOrderError(f"epoch {epoch} at {start_offset} starts before epoch {last.epoch} at {last.start_offset}")
        return True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False if it already was the latest.

        A newer epoch starting where the previous one started means the previous
        one wrote nothing; it is kept (its end is then its own start).
        """
        if not self.check_assign(epoch, start_offset):
            return False
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from(self, offset: int) -> int:
        """Forget epochs that start at or after ``offset`` (the log was cut there).

        Returns how many entries remain.
        """
        keep = bisect.bisect_left([e.start_offset for e in self._entries], offset)
        del self._entries[keep:]
        return keep

    def epoch_at(self, offset: int) -> int:
        """The epoch under which the byte at ``offset`` was written (UNDEFINED_EPOCH if none)."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def next_boundary(self, offset: int) -> int | None:
        """The first epoch start strictly after ``offset`` (None if the latest epoch covers it)."""
        for entry in self._entries:
            if entry.start_offset > offset:
                return entry.start_offset
        return None

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """Where ``epoch`` ends in this log: ``(epoch found, end offset)``.

        * the latest epoch or newer: ``(latest, log_end)``;
        * otherwise the largest known epoch ``e <= epoch`` and the start of the
          epoch after it;
        * below the first known epoch: ``(epoch, first start)`` (nothing of it here);
        * empty history: ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
        """
        if not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self._entries[-1].epoch:
            return self._entries[-1].epoch, log_end
        epochs = [e.epoch for e in self._entries]
        i = bisect.bisect_right(epochs, epoch) - 1
        if i < 0:
            return epoch, self._entries[0].start_offset
        return self._entries[i].epoch, self._entries[i + 1].start_offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochHistory) and self._entries == other._entries

    def __repr__(self) -> str:
        return "EpochHistory(" + ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries) + ")"


def encode_record(entry: EpochEntry) -> bytes:
    """One 16-byte record of the epoch file."""
    body = _BODY.pack(entry.epoch, entry.start_offset)
    return body + _CRC.pack(crc32(body))


def decode_records(data: bytes) -> list[EpochEntry]:
    """The valid prefix of an epoch file's bytes (empty for a missing or foreign header)."""
    if data[: len(EPOCH_FILE_MAGIC)] != EPOCH_FILE_MAGIC:
        return []
    entries: list[EpochEntry] = []
    history = EpochHistory()
    pos = len(EPOCH_FILE_MAGIC)
    while pos + RECORD_BYTES <= len(data):
        body = data[pos : pos + _BODY.size]
        (crc,) = _CRC.unpack_from(data, pos + _BODY.size)
        if crc32(body) != crc:
            break
        entry = EpochEntry(*_BODY.unpack(body))
        try:
            if not history.assign(entry.epoch, entry.start_offset):
                break
        except EpochOrderError:
            break
        entries.append(entry)
        pos += RECORD_BYTES
    return entries


class EpochFile:
    """An ``EpochHistory`` kept durable in ``<partition dir>/leader-epochs.trikafka``.

    Every method does blocking file I/O (fsync): the broker calls them from a
    worker thread.  ``open`` recovers the file after a crash: it keeps the valid
    prefix and drops epochs that start past the recovered log end.
    """

    def __init__(self, fs: FileSystem, path: str, file: SegmentFile, history: EpochHistory):
        self._fs = fs
        self.path = path
        self._file = file
        self.history = history
        self._failure: str | None = None  # set by the first I/O error: the file refuses writes since

    @classmethod
    def open(cls, fs: FileSystem, partition_dir: str, log_end: int) -> "EpochFile":
        """Open (creating if needed) the epoch file of the partition in ``partition_dir``."""
        path = f"{partition_dir.rstrip('/')}/{EPOCH_FILE_NAME}"
        if fs.exists(path):
            file = fs.open_segment(path, create=False)
            data = file.pread(0, file.size)
        else:
            file = fs.open_segment(path, create=True)
            data = b""
            fs.fsync_dir(partition_dir)
        entries = decode_records(data)
        history = EpochHistory(entries)
        history.truncate_from(log_end + 1)  # an epoch starting exactly at the log end is kept
        self = cls(fs, path, file, history)
        self._rewrite_if_needed(data)
        return self

    def _rewrite_if_needed(self, data: bytes) -> None:
        wanted = EPOCH_FILE_MAGIC + b"".join(encode_record(e) for e in self.history.entries)
        if data == wanted:
            return
        if data.startswith(wanted):
            self._file.truncate(len(wanted))
        else:  # a foreign or torn header: start over
            self._file.truncate(0)
            self._file.append(wanted)
        self._file.fsync()

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Durably record that ``epoch`` starts at ``start_offset`` (fsynced before it returns).

        An I/O error fails the file for good (``LogFailedError``, now and on every
        later write): the broker halts, as on a failed log, and recovery decides.
        """
        self._check_failed()
        if not self.history.check_assign(epoch, start_offset):
            return False
        with self._fail_stop("assign"):
            self._file.append(encode_record(EpochEntry(epoch, start_offset)))
            self._file.fsync()
        self.history.assign(epoch, start_offset)
        return True

    def truncate_from(self, offset: int) -> None:
        """Durably forget the epochs starting at or after ``offset`` (I/O errors: as ``assign``)."""
        self._check_failed()
        before = len(self.history.entries)
        kept = self.history.truncate_from(offset)
        if kept != before:
            with self._fail_stop("truncate"):
                self._file.truncate(len(EPOCH_FILE_MAGIC) + kept * RECORD_BYTES)
                self._file.fsync()

    def _check_failed(self) -> None:
        if self._failure is not None:
            raise LogFailedError(self._failure)

    @contextlib.contextmanager
    def _fail_stop(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            self._failure = f"{what} in the epoch file {self.path} failed: {exc}"
            raise LogFailedError(self._failure) from exc

    def close(self) -> None:
        """Close the file handle."""
        self._file.close()
