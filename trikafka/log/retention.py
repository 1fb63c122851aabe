"""Retention (spec §10.6): the two rules, and a pass packaged as a ticket so its I/O leaves the loop.

A pass over one log, in the manner of flush and roll tickets (``tickets.py``)::

    ticket = log.begin_retention(now_ms)   # loop: snapshot the segments
    ticket.stat()                          # blocking: read their mtimes
    while log.retention_needs_roll(ticket):
        roll the log                       # the broker rolls off the loop too
    log.drop_retained(ticket)              # loop: the oldest segments leave the log
    ticket.remove()                        # blocking: unlink them, fsync the directory
    log.complete_retention(ticket)         # loop: an I/O error fails the log here

``apply_retention`` runs the same steps on one thread (tools and tests).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Sequence

from .config import LogConfig
from .fs import FileSystem
from .segment import Segment

if TYPE_CHECKING:
    from .log import Log

_CAPTURED, _RUNNING, _FINISHED = "captured", "running", "finished"


def count_expired(mtimes_ms: Sequence[int], now_ms: int, retention_ms: int) -> int:
    """How many of the oldest segments the time rule deletes: those older than ``retention_ms``."""
    count = 0
    for mtime_ms in mtimes_ms:
        if now_ms - mtime_ms <= retention_ms:
            break
        count += 1
    return count


def count_over_size(visible_sizes: Sequence[int], retention_bytes: int) -> int:
    """How many of the oldest segments the size rule deletes (0.7: whole segments while over the limit)."""
    total = sum(visible_sizes)
    if retention_bytes < 0 or total < retention_bytes:
        return 0
    diff, count = total - retention_bytes, 0
    for size in visible_sizes:
        if size > diff:
            break
        diff -= size
        count += 1
    return count


def apply_retention(log: Log, now_ms: int) -> int:
    """Delete ``log``'s old segments by the time rule, then the size rule (spec §10.6), on this thread.

    Returns the number of segments deleted.  ``E`` is kept: when the rules
    would delete every segment, a non-empty last segment is rolled first, an
    empty one is kept with a fresh mtime.  Deleted files are unlinked but not
    closed: a reader's ``FileRegion`` may still use them, and the descriptor
    closes when the last reference goes.
    """
    ticket = log.begin_retention(now_ms)
    ticket.stat()
    if log.retention_needs_roll(ticket):
        log.roll()  # so an empty segment named E survives
    deleted = log.drop_retained(ticket)
    ticket.remove()
    log.complete_retention(ticket)
    return deleted


class RetentionTicket:
    """One retention pass of a log; ``stat()`` and ``remove()`` block and may run in a worker thread.

    Like the other tickets, the blocking parts never raise an ``OSError``:
    they record it, and the log's next retention step fails the log with it.
    """

    __slots__ = ("_fs", "dir_path", "segments", "now_ms", "mtimes_ms", "touch_path", "deleted", "keep_open",
                 "error", "_state")

    def __init__(self, fs: FileSystem, dir_path: str, segments: tuple[Segment, ...], now_ms: int):
        self._fs = fs
        self.dir_path = dir_path
        self.segments = segments  # the snapshot the time rule judges, oldest first
        self.now_ms = now_ms
        self.mtimes_ms: list[int] | None = None
        self.touch_path: str | None = None  # an empty last segment kept young instead of deleted
        self.deleted: tuple[Segment, ...] = ()
        self.keep_open: Segment | None = None  # a dropped segment a flush in flight still fsyncs
        self.error: BaseException | None = None
        self._state = _CAPTURED

    @property
    def running(self) -> bool:
        return self._state == _RUNNING

    def count(self, segments: tuple[Segment, ...], config: LogConfig) -> int:
        """How many of the oldest of ``segments`` (the log's now) the time rule, then the size rule delete.

        Only retention removes segments, one pass at a time, so the snapshot is
        still their prefix; segments rolled since it was taken were not
        ``stat()``ed, so the time rule stops at its end.  0 when ``stat()`` failed
        (``Log.complete_retention`` then fails the log).
        """
        if self.mtimes_ms is None:
            assert self.error is not None, f"{self!r}: count() before stat()"
            return 0
        assert segments[:len(self.segments)] == self.segments, (self, segments)
        expired = count_expired(self.mtimes_ms, self.now_ms, config.retention_ms)
        return expired + count_over_size([s.visible_size for s in segments[expired:]], config.retention_bytes)

    def stat(self) -> None:
        """Read the mtime of every segment of the snapshot (one ``stat`` each)."""
        self._state = _RUNNING
        try:
            self.mtimes_ms = [self._fs.mtime_ms(s.path) for s in self.segments]
        except OSError as exc:
            self.error = exc
        finally:
            self._state = _CAPTURED

    def remove(self) -> None:
        """Unlink the dropped segments, oldest first, with one directory fsync each
        (a crash never leaves a gap), after touching the kept empty segment, if any.

        Then close each dropped file that no reader holds any more: the last
        close of an unlinked file frees its blocks, which for a large segment
        is a long wait for the disk, and it would otherwise happen wherever
        the last reference goes, on the loop.  A file that a reader's
        ``FileRegion`` still holds is left for it (its descriptor closes with
        its last reference).
        """
        if self.error is not None:
            self._state = _FINISHED
            return  # stat() failed: nothing was dropped
        self._state = _RUNNING
        try:
            if self.touch_path is not None:
                self._fs.touch(self.touch_path, self.now_ms)
            for segment in self.deleted:
                self._fs.remove(segment.path)
                self._fs.fsync_dir(self.dir_path)
            for segment in self.deleted:
                # No new reader can take the file (it left the log); two references
                # are the segment's and getrefcount's own argument.
                if segment is not self.keep_open and sys.getrefcount(segment.file) <= 2:
                    segment.file.close()
        except OSError as exc:
            self.error = exc
        finally:
            self._state = _FINISHED

    def __repr__(self) -> str:
        return f"RetentionTicket({self.dir_path!r}, deleting={len(self.deleted)}, state={self._state})"
