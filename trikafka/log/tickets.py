"""Flush and roll tickets: the parts of a flush or a roll that block, packaged to run off the loop.

The decided design: an fsync never runs on the event loop.  The broker takes a
ticket on the loop (``log.flushing.begin_flush`` / ``begin_roll``), runs its
blocking part in a worker thread (``FlushTicket.fsync`` / ``RollTicket.run``),
then hands it back on the loop (``complete_flush`` / ``complete_roll``).
The blocking parts never raise for an I/O error: they record it, and the
``complete_*`` call turns it into the log's fail-stop ``LogFailedError``.
"""

from __future__ import annotations

from .checkpoint import RecoveryCheckpointer
from .fs import FileSystem, SegmentFile
from .segment import Segment

CAPTURED, RUNNING, FINISHED = "captured", "running", "finished"


class Ticket:
    """What every ticket shares: its blocking half is ``CAPTURED`` (not started), ``RUNNING`` or ``FINISHED``."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state = CAPTURED

    @property
    def running(self) -> bool:
        return self._state == RUNNING

    @property
    def finished(self) -> bool:
        return self._state == FINISHED


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
