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

import os
from typing import Sequence

from .config import LogConfig
from .errors import LogBusyError, LogError
from .fs import FileSystem
from .names import padding_file_name
from .segment import Segment
from .truncation import TruncateTicket, close_unread

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
                if segment.padding:  # its padding index (an orphan left by a crash is swept at load)
                    self._fs.remove(os.path.join(self.dir_path, padding_file_name(segment.start)))
            close_unread(self.deleted, self.keep_open)
        except OSError as exc:
            self.error = exc
        finally:
            self._state = _FINISHED

    def __repr__(self) -> str:
        return f"RetentionTicket({self.dir_path!r}, deleting={len(self.deleted)}, state={self._state})"


class RetentionSteps:
    """``Log``'s retention steps (a mixin: they use the log's segments and tickets).

    A pass is ``begin_retention`` (on the loop), ``ticket.stat()`` (a worker
    thread), ``retention_needs_roll`` (roll first through the flusher),
    ``drop_retained`` (on the loop), ``ticket.remove()`` (a worker thread),
    ``complete_retention``; ``apply_retention`` runs them all on one thread.
    """

    _retention_ticket: RetentionTicket | None
    _truncate_ticket: TruncateTicket | None

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by the time rule, then the size rule (spec §10.6), on this
        thread; returns how many.  0 while a roll or a cleaning is in flight.  ``E`` is
        kept: when the rules would delete every segment, a non-empty last segment is
        rolled first, an empty one is kept with a fresh mtime."""
        self._check_writable()
        if self._roll_ticket is not None or self.cleaning or self._truncate_ticket is not None:
            return 0
        ticket = self.begin_retention(self._clock_ms() if now_ms is None else now_ms)
        ticket.stat()
        if self.retention_needs_roll(ticket):
            self.roll()  # so an empty segment named E survives
        deleted = self.drop_retained(ticket)
        ticket.remove()
        self.complete_retention(ticket)
        return deleted

    def begin_retention(self, now_ms: int) -> RetentionTicket:
        """Snapshot the segments for a retention pass judged at ``now_ms`` (one pass at a time)."""
        self._check_writable()
        if self._retention_ticket is not None or self._truncate_ticket is not None:
            raise LogBusyError(f"{self}: a retention pass or truncation is already in flight")
        self._retention_ticket = RetentionTicket(self._fs, self.dir_path, self._segments.view.segments, now_ms)
        return self._retention_ticket

    @property
    def retention_busy(self) -> bool:
        """A retention pass is in flight: the cleaner leaves this log alone meanwhile."""
        return self._retention_ticket is not None

    def retention_needs_roll(self, ticket: RetentionTicket) -> bool:
        """Whether the rules delete every segment while the last one holds data: roll first, then ask again."""
        return self._retention_count(ticket) == len(self._segments) and self._segments.last.size > 0

    def drop_retained(self, ticket: RetentionTicket) -> int:
        """Take the segments the rules delete out of the log (readers stop seeing them
        now); ``ticket.remove()`` then unlinks them.  Returns how many."""
        count = self._retention_count(ticket)
        if count == len(self._segments):
            if self._segments.last.size > 0:
                raise LogError(f"{self}: retention would delete every segment; roll first")
            ticket.touch_path = self._segments.last.path  # kept (it is named E), young again
            count -= 1
        ticket.deleted = self._segments.drop_first(count)
        ticket.keep_open = self._flush_ticket.segment if self._flush_ticket is not None else None
        assert self._segments.last.end >= self.visible_end
        return count

    def complete_retention(self, ticket: RetentionTicket) -> None:
        """After ``ticket.remove()``: end the pass; an unlink or fsync error fails the log."""
        if ticket is not self._retention_ticket:
            raise LogError(f"{self}: {ticket!r} is not this log's retention pass")
        self._retention_ticket = None
        try:
            if ticket.error is not None:
                raise self._fail(f"retention in {self.dir_path} failed: {ticket.error}")
        finally:
            self._notify_idle()

    def _retention_count(self, ticket: RetentionTicket) -> int:
        if ticket is not self._retention_ticket:
            raise LogError(f"{self}: {ticket!r} is not this log's retention pass")
        self._check_writable()
        return ticket.count(self._segments.view.segments, self.config)  # 0 after a stat() error

