"""Flushing and rolling (docs/protocol.md §7.2): how appended bytes become durable, then visible.

A flush or roll ticket is taken on the loop (``log.flushing.begin_flush()`` /
``begin_roll()``), its blocking half runs in a worker thread (``FlushTicket.fsync``
/ ``RollTicket.run``), and it is handed back on the loop (``complete_flush`` /
``complete_roll``).
``Flushing`` is the log's collaborator that owns what lies between: the flush
or roll in flight, how many appended messages a completed one covered, whether
anything was appended since the last capture (the dirty flag), and the
listeners that hear the visible end ``E`` advance.

Invariants (asserted where they are established):

* at most one flush or roll is captured through ``begin_flush``/``begin_roll``
  at a time; an inline roll (``roll``) may overtake a flush in flight, and
  that flush's completion then changes nothing;
* a segment's visible size grows only by what a completed fsync covered;
* a roll fsyncs the old segment in full before the new segment is installed;
* the flushed message count never exceeds the appended one.
"""

from __future__ import annotations

import os
from typing import Callable

from .checkpoint import RecoveryCheckpointer
from .config import LogConfig
from .errors import LogError
from .fs import FileSystem, SegmentFile
from .gate import FLUSH, INLINE_ROLL, ROLL, TRUNCATION, Gate
from .names import segment_file_name
from .segment import Segment
from .segment_list import SegmentList
from .tickets import CAPTURED, FINISHED, RUNNING, Ticket


class FlushTicket(Ticket):
    """One flush of the active segment up to ``size`` bytes, captured on the loop.

    Appends may continue while ``fsync()`` runs; they are not covered by it and
    stay invisible until a later flush.
    """

    __slots__ = ("segment", "size", "message_seq", "checkpointer", "error", "synced")

    def __init__(self, segment: Segment, size: int, message_seq: int,
                 checkpointer: RecoveryCheckpointer | None = None):
        self.segment = segment
        self.checkpointer = checkpointer  # writes the recovery checkpoint after the fsync, when due
        self.size = size  # the visible size after completion: captured BEFORE the fsync
        self.message_seq = message_seq  # messages appended up to the capture
        self.error: BaseException | None = None
        self.synced = False
        super().__init__()

    def fsync(self) -> None:
        """Fsync the segment's file.  Blocking; safe to run in a worker thread.

        An ``OSError`` is recorded, not raised; ``Flushing.complete_flush`` raises it
        as ``LogFailedError``.  Call it exactly once.
        """
        if self._state != CAPTURED:
            raise RuntimeError("FlushTicket.fsync() called twice")
        self._state = RUNNING
        try:
            self.segment.file.fsync()
            self.synced = True
            if self.checkpointer is not None:  # only after the fsync: it vouches for fsynced bytes
                self.checkpointer.after_flush(self.segment, self.size)
        except OSError as exc:
            self.error = exc
        finally:
            self._state = FINISHED

    def __repr__(self) -> str:
        return f"FlushTicket({self.segment.path!r}, size={self.size}, state={self._state})"


class RollTicket(Ticket):
    """A roll: fsync the old segment, then create the new one and fsync the directory.

    While a roll ticket is in flight the log refuses appends (``LogBusyError``),
    so the new segment's name, the old segment's end, stays right.
    """

    __slots__ = ("_fs", "dir_path", "old_segment", "old_size", "message_seq",
                 "new_start", "new_path", "new_file", "error")

    def __init__(self, fs: FileSystem, dir_path: str, old_segment: Segment, message_seq: int, new_path: str):
        self._fs = fs
        self.dir_path = dir_path
        self.old_segment = old_segment
        self.old_size = old_segment.size
        self.message_seq = message_seq
        self.new_start = old_segment.end
        self.new_path = new_path
        self.new_file: SegmentFile | None = None
        self.error: BaseException | None = None
        super().__init__()

    def run(self) -> None:
        """The blocking part of the roll, in this order (the order is the invariant
        that lets recovery scan only the newest segment):

        1. fsync the old segment in full;
        2. remove a stale file with the new name, if any (spec §7.2);
        3. create the new segment file;
        4. fsync the directory, so the new entry is durable.
        """
        if self._state != CAPTURED:
            raise RuntimeError("RollTicket.run() called twice")
        self._state = RUNNING
        try:
            self.old_segment.file.fsync()
            if self._fs.exists(self.new_path):
                self._fs.remove(self.new_path)
            self.new_file = self._fs.open_segment(self.new_path, create=True)
            self._fs.fsync_dir(self.dir_path)
        except OSError as exc:
            self.error = exc
        finally:
            self._state = FINISHED

    def __repr__(self) -> str:
        return f"RollTicket({self.old_segment.path!r} -> {self.new_path!r}, state={self._state})"


class Flushing:
    """A log's flushes and rolls of its active segment, and who hears about them.

    It captures and settles tickets over the log's ``SegmentList``; its
    ``Gate`` says whether one may start and turns a ticket's I/O error into
    the log's failure.  Listeners take no argument: the ``Log`` binds itself
    to the callbacks its callers register.
    """

    __slots__ = ("_fs", "_dir_path", "_segments", "_checkpointer", "_gate", "_name", "flush_ticket", "roll_ticket",
                 "_appended_messages", "_flushed_messages", "_dirty", "_visible_listeners", "_dirty_listeners")

    def __init__(self, fs: FileSystem, dir_path: str, segments: SegmentList,
                 checkpointer: RecoveryCheckpointer, gate: Gate, name: str):
        self._fs = fs
        self._dir_path = dir_path
        self._segments = segments
        self._checkpointer = checkpointer  # written by flush tickets
        self._gate = gate
        self._name = name  # the log's name, for error messages
        self.flush_ticket: FlushTicket | None = None  # the flush in flight
        self.roll_ticket: RollTicket | None = None  # the roll in flight
        self._appended_messages = 0  # inner messages appended by this process
        self._flushed_messages = 0  # of those, how many a completed flush or roll covered
        self._dirty = False  # bytes appended since the last flush or roll captured the log
        self._visible_listeners: list[Callable[[], None]] = []
        self._dirty_listeners: list[Callable[[], None]] = []

    # -- state ------------------------------------------------------------------------

    @property
    def tickets(self) -> tuple[Ticket | None, Ticket | None]:
        """The flush and the roll in flight (None where there is none)."""
        return self.flush_ticket, self.roll_ticket

    @property
    def unflushed_messages(self) -> int:
        """Messages appended but not yet covered by a completed flush or roll."""
        return self._appended_messages - self._flushed_messages

    def flush_due(self, config: LogConfig) -> bool:
        """Whether ``config.flush_interval_messages`` appended messages wait for a flush.

        Messages already captured by a flush in flight do not count again.
        """
        covered = self._flushed_messages
        if self.flush_ticket is not None:
            covered = max(covered, self.flush_ticket.message_seq)
        return self._appended_messages - covered >= config.flush_interval_messages

    def add_visible_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` each time the visible end advances."""
        self._visible_listeners.append(callback)

    def add_dirty_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when an append lands while nothing was unflushed beyond
        what a flush or roll in flight already captured."""
        self._dirty_listeners.append(callback)

    # -- appends ------------------------------------------------------------------------

    def appended(self, message_count: int) -> None:
        """Count an append of ``message_count`` messages; the first since a capture calls the dirty listeners."""
        assert message_count >= 0, message_count
        self._appended_messages += message_count
        if not self._dirty:
            self._dirty = True
            for callback in tuple(self._dirty_listeners):
                callback()

    # -- flush --------------------------------------------------------------------------

    def begin_flush(self) -> FlushTicket | None:
        """Capture the active segment's current size for a flush; None if nothing is unflushed.

        Clears the dirty flag.  Raises ``LogBusyError`` if a flush or roll
        ticket is already in flight (one per log; coalescing is the caller's
        job).  Run ``ticket.fsync()`` (in a worker thread), then
        ``complete_flush(ticket)`` on the loop.  None while a truncation is in
        flight: it fsyncs every byte it leaves.
        """
        self._gate.check(FLUSH)
        segment = self._segments.last
        self._dirty = False
        if segment.size == segment.visible_size or self._gate.in_flight(TRUNCATION):
            return None
        self.flush_ticket = FlushTicket(segment, segment.size, self._appended_messages, self._checkpointer)
        return self.flush_ticket

    def complete_flush(self, ticket: FlushTicket) -> None:
        """After ``ticket.fsync()`` returned: advance the visible size to the size
        captured before the fsync and notify the visible listeners.

        Raises ``LogFailedError`` if the fsync failed (the log is then failed
        for good), ``LogError`` before ``fsync()`` returned or for a ticket that
        is not the flush in flight.
        """
        self._check_returned(ticket, self.flush_ticket, "flush", "fsync")
        self.flush_ticket = None
        with self._gate.settling():
            if not ticket.synced:
                raise self._gate.fail(f"fsync of {ticket.segment.path} failed: {ticket.error}")
            self._covered(ticket.message_seq)
            if ticket.segment.mark_flushed(ticket.size):
                self._notify_visible()

    def flush(self) -> None:
        """Flush on this thread: ``begin_flush``, ``fsync()``, ``complete_flush``."""
        ticket = self.begin_flush()
        if ticket is not None:
            ticket.fsync()
            self.complete_flush(ticket)

    # -- roll -----------------------------------------------------------------------------

    def begin_roll(self) -> RollTicket | None:
        """Start a roll whose blocking part (``ticket.run()``) can go to a worker thread.

        None when the active segment is empty (there is nothing to roll).
        Appends raise ``LogBusyError`` until ``complete_roll(ticket)``; so does
        another ``begin_flush``/``begin_roll``.
        """
        self._gate.check(ROLL)
        return self._capture_roll()

    def complete_roll(self, ticket: RollTicket) -> None:
        """Install the new segment after ``ticket.run()``; the old one becomes fully visible.

        Raises ``LogFailedError`` if the roll's I/O failed, ``LogError`` before
        ``run()`` returned or for a ticket that is not the roll in flight.
        """
        self._check_returned(ticket, self.roll_ticket, "roll", "run")
        self.roll_ticket = None
        with self._gate.settling():
            if ticket.error is not None:
                raise self._gate.fail(f"roll to {ticket.new_path} failed: {ticket.error}")
            self._settle_roll(ticket)

    def roll(self) -> bool:
        """Roll on this thread; False when the active segment is empty.

        A flush ticket in flight does not matter here: the roll fsyncs the
        whole segment, and that ticket's completion later changes nothing.
        """
        self._gate.check(INLINE_ROLL)
        ticket = self._capture_roll()
        if ticket is None:
            return False
        ticket.run()
        self.complete_roll(ticket)
        return True

    def _capture_roll(self) -> RollTicket | None:
        # Clears the dirty flag; the caller checked that no roll is in flight.
        assert self.roll_ticket is None, self.roll_ticket
        old = self._segments.last
        if old.size == 0:
            return None
        path = os.path.join(self._dir_path, segment_file_name(old.end))
        self._dirty = False
        self.roll_ticket = RollTicket(self._fs, self._dir_path, old, self._appended_messages, path)
        return self.roll_ticket

    def _settle_roll(self, ticket: RollTicket) -> None:
        # Install the new segment of a ticket that ran without an I/O error; the old one becomes fully visible.
        assert ticket.error is None, ticket
        assert ticket.new_file is not None and ticket.new_file.size == 0, ticket
        old = ticket.old_segment
        assert old is self._segments.last and old.size == ticket.old_size, (old, ticket)
        advanced = old.mark_flushed(ticket.old_size)
        # The invariant behind newest-segment-only recovery: the old segment was
        # fsynced in full before the new segment's file was created.
        assert old.fully_flushed, old
        new = Segment(ticket.new_start, ticket.new_path, ticket.new_file, 0)
        new.batches = old.successor_batches()
        self._segments.append(new)
        self._covered(ticket.message_seq)
        if advanced:
            self._notify_visible()

    # -- truncation and close -------------------------------------------------------------

    def settle_truncate(self, advanced: bool) -> None:
        """After a truncation settled: every byte left is fsynced; ``advanced``: it moved the visible end up."""
        assert self._segments.last.fully_flushed, self._segments.last
        self._flushed_messages = self._appended_messages
        self._dirty = False
        if advanced:
            self._notify_visible()

    def abandon(self) -> None:
        """Discard the tickets in flight (the log closes; neither is running)."""
        assert not any(t is not None and t.running for t in self.tickets), self.tickets
        if self.roll_ticket is not None and self.roll_ticket.new_file is not None:
            self.roll_ticket.new_file.close()
        self.flush_ticket = self.roll_ticket = None

    def _check_returned(self, ticket: Ticket, in_flight: Ticket | None, kind: str, blocking_half: str) -> None:
        if ticket is not in_flight:
            raise LogError(f"{self._name}: {ticket!r} is not this log's {kind} in flight")
        if not ticket.finished:
            raise LogError(f"{self._name}: complete_{kind}() before {ticket!r}.{blocking_half}() returned")

    def _covered(self, message_seq: int) -> None:
        self._flushed_messages = max(self._flushed_messages, message_seq)
        assert self._flushed_messages <= self._appended_messages, (self._flushed_messages, self._appended_messages)

    def _notify_visible(self) -> None:
        for callback in tuple(self._visible_listeners):
            callback()
