"""Retention (docs/protocol.md §7.4): the two rules, and a pass packaged as a ticket so its I/O leaves the loop.

A pass over one log, in the manner of flush and roll tickets (``flushing.py``)::

    ticket = log.retention.begin(now_ms)   # loop: snapshot the segments
    ticket.stat()                          # blocking: read their mtimes
    while log.retention.needs_roll(ticket):
        roll the log                       # the broker rolls off the loop too
    log.retention.drop(ticket)             # loop: the oldest segments leave the log
    ticket.remove()                        # blocking: unlink them, fsync the directory
    log.retention.complete(ticket)         # loop: an I/O error fails the log here

``Log.apply_retention`` runs the same steps on one thread (tools and tests).
``Retention`` is the log's collaborator that owns the pass in flight.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from .config import LogConfig
from .errors import LogError
from .flushing import Flushing
from .fs import FileSystem
from .gate import RETENTION, Gate
from .names import padding_file_name
from .segment import Segment
from .segment_list import SegmentList
from .tickets import CAPTURED, FINISHED, RUNNING, Ticket
from .truncation import close_dropped


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


def retention_times_ms(segments: Sequence[Segment], mtimes_ms: Sequence[int]) -> list[int]:
    """What the time rule judges each segment by: in a Kafka-format log its largest ``maxTimestamp``
    where it holds a batch (docs/protocol.md §16.6), else its file's time."""
    return [s.batches.largest_timestamp_ms if s.batches is not None and len(s.batches) else mtime_ms
            for s, mtime_ms in zip(segments, mtimes_ms)]


def count_below_start(segments: Sequence[Segment], log_start: int) -> int:
    """How many of the oldest segments of a Kafka-format log hold only batches below ``log_start``,
    the offset DeleteRecords set (docs/protocol.md §16.6); 0 in a 0.7 log."""
    count = 0
    for segment in segments:
        batches = segment.batches
        if batches is None or batches.next_offset > log_start:
            break
        count += 1
    return count


def deletable(segments: Sequence[Segment]) -> int:
    """How many of the oldest segments retention may delete at most.

    A Kafka-format log keeps its newest segment that holds a batch: nothing
    of its logical offsets is on disk but its batches, so a log emptied by
    retention would number its records from 0 again after a restart.
    """
    for k in range(len(segments) - 1, -1, -1):
        batches = segments[k].batches
        if batches is None:
            return len(segments)
        if len(batches):
            return k
    return len(segments)


class RetentionTicket(Ticket):
    """One retention pass of a log; ``stat()`` and ``remove()`` block and may run in a worker thread.

    Like the other tickets, the blocking parts never raise an ``OSError``:
    they record it, and the log's next retention step fails the log with it.
    """

    __slots__ = ("_fs", "dir_path", "segments", "now_ms", "mtimes_ms", "touch_path", "deleted", "keep_open",
                 "error")

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
        super().__init__()

    def count(self, segments: tuple[Segment, ...], config: LogConfig, log_start: int = 0) -> int:
        """How many of the oldest of ``segments`` (the log's now) the time rule, then the size rule delete,
        or, when more, those wholly below ``log_start`` (DeleteRecords', §16.6).

        Only retention removes segments, one pass at a time, so the snapshot is
        still their prefix; segments rolled since it was taken were not
        ``stat()``ed, so the time rule stops at its end.  0 when ``stat()`` failed
        (``Retention.complete`` then fails the log).
        """
        if self.mtimes_ms is None:
            assert self.error is not None, f"{self!r}: count() before stat()"
            return 0
        assert segments[:len(self.segments)] == self.segments, (self, segments)
        expired = count_expired(retention_times_ms(self.segments, self.mtimes_ms), self.now_ms, config.retention_ms)
        count = expired + count_over_size([s.visible_size for s in segments[expired:]], config.retention_bytes)
        return min(max(count, count_below_start(segments, log_start)), deletable(segments))

    def stat(self) -> None:
        """Read the mtime of every segment of the snapshot (one ``stat`` each)."""
        self._state = RUNNING
        try:
            self.mtimes_ms = [self._fs.mtime_ms(s.path) for s in self.segments]
        except OSError as exc:
            self.error = exc
        finally:
            self._state = CAPTURED

    def remove(self) -> None:
        """Unlink the dropped segments, oldest first, with one directory fsync each
        (a crash never leaves a gap), after touching the kept empty segment, if any.

        Then close each dropped file here: the last close of an unlinked file
        frees its blocks, which for a large segment is a long wait for the
        disk, and it would otherwise happen wherever the last reference goes,
        on the loop.  A file that a fetch answer's ``FileRegion`` still reads
        stays open for it (its ``reader``'s descriptor closes with its last
        reference: the answer's end).
        """
        if self.error is not None:
            self._state = FINISHED
            return  # stat() failed: nothing was dropped
        self._state = RUNNING
        try:
            if self.touch_path is not None:
                self._fs.touch(self.touch_path, self.now_ms)
            for segment in self.deleted:
                self._fs.remove(segment.path)
                self._fs.fsync_dir(self.dir_path)
                if segment.padding:  # its padding index (an orphan left by a crash is swept at load)
                    self._fs.remove(os.path.join(self.dir_path, padding_file_name(segment.start)))
            close_dropped(self.deleted, self.keep_open)
        except OSError as exc:
            self.error = exc
        finally:
            self._state = FINISHED

    def __repr__(self) -> str:
        return f"RetentionTicket({self.dir_path!r}, deleting={len(self.deleted)}, state={self._state})"


class Retention:
    """A log's retention passes over its ``SegmentList``, one at a time (docs/protocol.md §7.4).

    It owns the pass in flight, judges the oldest segments by the rules of
    the log's current ``config()`` and takes them out of the list; its
    ``Gate`` says whether a pass may start and turns a ticket's I/O error
    into the log's failure.  Retention never moves the visible end ``E``:
    the last segment always stays.
    """

    __slots__ = ("_fs", "_dir_path", "_segments", "_gate", "_flushing", "_config", "_name", "_log_start", "ticket")

    def __init__(self, fs: FileSystem, dir_path: str, segments: SegmentList, gate: Gate, flushing: Flushing,
                 config: Callable[[], LogConfig], name: str, log_start: Callable[[], int] = lambda: 0):
        self._fs = fs
        self._dir_path = dir_path
        self._segments = segments
        self._gate = gate
        self._flushing = flushing  # a flush in flight keeps the file of a segment it fsyncs open
        self._config = config  # the log's settings at each look (the broker replaces them on a config change)
        self._name = name  # the log's name, for error messages
        self._log_start = log_start  # DeleteRecords' offset at each look (§16.6)
        self.ticket: RetentionTicket | None = None  # the pass in flight

    @property
    def busy(self) -> bool:
        """A pass is in flight (from ``begin`` to ``complete``): the cleaner leaves the log alone meanwhile."""
        return self.ticket is not None

    def begin(self, now_ms: int) -> RetentionTicket:
        """Snapshot the segments for a pass judged at ``now_ms``.

        Raises ``LogBusyError`` while a pass or a truncation is in flight.
        """
        self._gate.check(RETENTION)
        assert self.ticket is None, self.ticket
        self.ticket = RetentionTicket(self._fs, self._dir_path, self._segments.view.segments, now_ms)
        return self.ticket

    def needs_roll(self, ticket: RetentionTicket) -> bool:
        """Whether the rules delete every segment while the last one holds data: roll first, then ask again."""
        return self._count(ticket) == len(self._segments) and self._segments.last.size > 0

    def drop(self, ticket: RetentionTicket) -> int:
        """Take the segments the rules delete out of the list (readers stop seeing them now);
        ``ticket.remove()`` then unlinks them.  Returns how many.

        When the rules delete every segment, the last one is empty (else
        ``LogError``: ``needs_roll`` said to roll first) and stays, named ``E``,
        with a fresh mtime.
        """
        count = self._count(ticket)
        last = self._segments.last
        visible_end = last.visible_end
        if count == len(self._segments):
            if last.size > 0:
                raise LogError(f"{self._name}: retention would delete every segment; roll first")
            ticket.touch_path = last.path
            count -= 1
        ticket.deleted = self._segments.drop_first(count)
        flush_ticket = self._flushing.flush_ticket
        ticket.keep_open = flush_ticket.segment if flush_ticket is not None else None
        assert self._segments.last is last and last.visible_end == visible_end, (last, visible_end)
        return count

    def complete(self, ticket: RetentionTicket) -> None:
        """After ``ticket.remove()``: end the pass; an unlink or fsync error fails the log (``LogFailedError``)."""
        self._check_own(ticket)
        self.ticket = None
        with self._gate.settling():
            if ticket.error is not None:
                raise self._gate.fail(f"retention in {self._dir_path} failed: {ticket.error}")

    def abandon(self) -> None:
        """Discard the pass in flight, if any (the log closes; its blocking parts are not running)."""
        assert self.ticket is None or not self.ticket.running, self.ticket
        self.ticket = None

    def _count(self, ticket: RetentionTicket) -> int:
        # How many of the oldest segments the rules delete now (0 after a stat() error).
        self._check_own(ticket)
        count = ticket.count(self._segments.view.segments, self._config(), self._log_start())
        self._gate.check_writable()
        return count

    def _check_own(self, ticket: RetentionTicket) -> None:
        if ticket is not self.ticket:
            raise LogError(f"{self._name}: {ticket!r} is not this log's retention pass")
