"""Truncation at a message boundary (docs/protocol.md §12.11), packaged like flushes and rolls.

A follower whose log went past where it agrees with its leader cuts it::

    ticket = log.truncation.begin(offset)  # loop: the log ends at offset from now on
    ticket.run()                           # blocking: check, unlink, truncate, fsync
    log.truncation.complete(ticket)        # loop: an I/O error fails the log here

``begin`` returns None while a flush, roll, retention pass, cleaning or
another truncation is in flight; ``Log.add_idle_listener`` says when to try
again.  ``Log.truncate_to`` runs the three steps on one thread.
``Truncation`` is the log's collaborator that owns the truncation in flight.

``run`` checks that ``offset`` is an entry boundary when the loop could not
tell from what it knows (a segment start, the log end, the visible end):
that takes reading the segment's entry headers, which must not happen on the
loop.  A refused offset changes nothing on disk, and ``complete``
puts the log back as it was and raises ``ValueError``.  A Kafka-format log's
batch indexes know every boundary (docs/protocol.md §16.6): ``begin`` refuses
any other offset at once, and cuts the index with the segment.  When the cut
index's producers forgot batches before the cut (``BatchIndex.truncate``
says so), ``run`` reads the segment's batch headers up to the cut again and
``complete`` gives the index the producer state they make (§19.2), before
the log folds its own again.

Crash safety: the blocking steps go in this order, each durable before the next:

1. remove the recovery checkpoint (a crash from here on scans the newest segment in full);
2. unlink the segments after the cut one, newest first, one directory fsync each
   (a crash leaves a contiguous prefix of them, whose newest is whole);
3. rewrite the cut segment's padding index for its new size (or remove it);
4. truncate the cut segment's file and fsync it;
5. write a checkpoint at the cut.

A crash before step 4 finishes leaves the bytes past the cut or some of them:
recovery keeps their valid prefix, as for any crash before an operation
completed.  After ``run`` returned, the cut is durable: no crash brings the
bytes back, and recovery trusts the checkpoint at the cut.
"""

from __future__ import annotations

import os
import struct
from typing import Callable

from .batch_index import build_batch_index
from .checkpoint import RecoveryCheckpointer
from .config import LogConfig
from .errors import LogError
from .flushing import Flushing
from .fs import FileSystem, SegmentFile
from .gate import Gate
from .names import padding_file_name
from .padding import NO_PADDING, PaddingRuns, encode_padding_index
from .producer_state import SegmentProducers
from .segment import Segment
from .segment_list import SegmentList, SegmentView
from .swap import write_small_file
from .tickets import CAPTURED, FINISHED, RUNNING, Ticket

_INT32 = struct.Struct(">i")
_MIN_ENTRY_BYTES = 4 + 5  # length, then at least magic and CRC


def walks_to(file: SegmentFile, position: int, target: int, chunk_bytes: int) -> bool:
    """Whether the entries from ``position`` (an entry boundary) end exactly at ``target``.

    Reads only length prefixes, ``chunk_bytes`` at a time.  Blocking.
    """
    assert 0 <= position <= target and chunk_bytes >= 4, (position, target, chunk_bytes)
    pos, buf, buf_at = position, b"", position
    while pos < target:
        rel = pos - buf_at
        if rel + 4 > len(buf):
            buf, buf_at, rel = file.pread(pos, min(chunk_bytes, target - pos)), pos, 0
            if len(buf) < 4:
                return False  # target falls inside a length prefix
        (n,) = _INT32.unpack_from(buf, rel)
        if 4 + n < _MIN_ENTRY_BYTES:
            return False
        pos += 4 + n
    return pos == target


def clip_padding(runs: PaddingRuns, size: int) -> PaddingRuns:
    """The runs of a segment cut to ``size`` bytes (a run the cut crosses ends at the cut)."""
    kept = [(a, min(b, size)) for a, b in zip(runs.starts, runs.ends) if a < size]
    return PaddingRuns.of(kept) if kept else NO_PADDING


def close_dropped(segments: tuple[Segment, ...], keep_open: Segment | None = None) -> None:
    """Close the files of segments that left the log (all but ``keep_open``).

    A ``FileRegion`` still being sent keeps reading its file: it holds the
    file's ``reader``, whose descriptor closes with its last reference.
    Blocking (the last close of an unlinked file frees its blocks).
    """
    for segment in segments:
        if segment is not keep_open:
            segment.file.close()


class TruncateTicket(Ticket):
    """One truncation of a log at ``offset``, captured on the loop; ``run()`` may go to a worker thread.

    ``segment``: the segment holding ``offset`` (cut to ``offset - segment.start``
    bytes, possibly 0); ``dropped``: the later segments, unlinked by ``run()``.
    A ticket with nothing to cut (``offset`` is the log end) does no I/O.
    """

    __slots__ = ("_fs", "dir_path", "offset", "segment", "dropped", "cut", "scan_from", "chunk_bytes",
                 "checkpointer", "old_view", "old_visible_size", "old_padding", "padding", "noop", "rejected",
                 "error", "read_producers", "producers")

    def __init__(self, fs: FileSystem, dir_path: str, offset: int, segment: Segment, dropped: tuple[Segment, ...],
                 scan_from: int | None, chunk_bytes: int, checkpointer: RecoveryCheckpointer,
                 old_view: SegmentView):
        self._fs = fs
        self.dir_path = dir_path
        self.offset = offset
        self.segment = segment
        self.dropped = dropped
        self.cut = offset - segment.start
        self.scan_from = scan_from  # where run() starts checking the boundary; None: already known
        self.chunk_bytes = chunk_bytes
        self.checkpointer = checkpointer
        self.old_view = old_view  # what Truncation.complete restores when run() refused the offset
        self.old_visible_size = segment.visible_size
        self.old_padding = segment.padding
        self.padding = clip_padding(segment.padding, self.cut)
        self.noop = not dropped and self.cut == segment.size  # offset is the log end: nothing to cut
        self.rejected: str | None = None
        self.error: BaseException | None = None
        self.read_producers = False  # the cut index's producers must be read again (set by ``begin``)
        self.producers: SegmentProducers | None = None  # what run() read: the cut segment's producers
        super().__init__()

    def run(self) -> None:
        """Check the boundary, then the five steps of the module docstring.  Blocking.

        A refused offset is recorded in ``rejected``, an ``OSError`` in ``error``;
        neither is raised here (``Truncation.complete`` does).  Call it exactly once.
        """
        if self._state != CAPTURED:
            raise RuntimeError("TruncateTicket.run() called twice")
        self._state = RUNNING
        try:
            if self.noop:
                return
            if self.scan_from is not None and not walks_to(self.segment.file, self.scan_from, self.cut,
                                                           self.chunk_bytes):
                self.rejected = f"offset {self.offset} is not a message boundary of {self.segment.path}"
                return
            self.checkpointer.remove()
            for segment in reversed(self.dropped):
                self._fs.remove(segment.path)
                self._fs.fsync_dir(self.dir_path)
                if segment.padding:  # an orphan left by a crash is swept at load
                    self._fs.remove(os.path.join(self.dir_path, padding_file_name(segment.start)))
            if self.old_padding:
                self._rewrite_padding_index()
            if self.read_producers:
                self.producers = build_batch_index(self.segment.file, self.cut, None, chunk_bytes=self.chunk_bytes,
                                                   label=self.segment.path).producers
            self.segment.file.truncate(self.cut)
            self.segment.file.fsync()
            self.checkpointer.after_truncate(self.segment, self.cut)
            close_dropped(self.dropped)
        except OSError as exc:
            self.error = exc
        finally:
            self._state = FINISHED

    def _rewrite_padding_index(self) -> None:
        path = os.path.join(self.dir_path, padding_file_name(self.segment.start))
        if self.padding:
            write_small_file(self._fs, path, encode_padding_index(self.cut, self.padding))
        elif self._fs.exists(path):
            self._fs.remove(path)
        self._fs.fsync_dir(self.dir_path)

    def __repr__(self) -> str:
        return (f"TruncateTicket({self.segment.path!r} to {self.cut} bytes, dropping {len(self.dropped)}, "
                f"state={self._state})")


class Truncation:
    """A log's truncations (docs/protocol.md §12.11): the one in flight, and how a cut changes the segments.

    It cuts the log's ``SegmentList`` on the loop and settles or undoes the cut
    after the ticket ran; its ``Gate`` says whether a cut may start and turns a
    ticket's I/O error into the log's failure.  After a cut settled, ``Flushing``
    learns that every byte left is fsynced, then ``on_cut()`` lets the log
    re-derive what the cut batches fed.
    """

    __slots__ = ("_fs", "_dir_path", "_segments", "_checkpointer", "_gate", "_flushing", "_config", "_on_cut",
                 "_name", "ticket")

    def __init__(self, fs: FileSystem, dir_path: str, segments: SegmentList, checkpointer: RecoveryCheckpointer,
                 gate: Gate, flushing: Flushing, config: Callable[[], LogConfig], on_cut: Callable[[], None],
                 name: str):
        self._fs = fs
        self._dir_path = dir_path
        self._segments = segments
        self._checkpointer = checkpointer
        self._gate = gate
        self._flushing = flushing
        self._config = config  # the log's settings at each look (the broker replaces them on a config change)
        self._on_cut = on_cut
        self._name = name  # the log's name, for error messages
        self.ticket: TruncateTicket | None = None  # the truncation in flight (never a no-op one)

    @property
    def busy(self) -> bool:
        """A truncation is in flight (from ``begin`` to ``complete``): appends, rolls and retention wait."""
        return self.ticket is not None

    def begin(self, offset: int) -> TruncateTicket | None:
        """Cut the log at ``offset`` now; the returned ticket's ``run()`` does the I/O (a worker thread).

        From here on the log ends at ``offset``, its visible end is at most
        ``offset``, and appends, rolls and retention raise ``LogBusyError``
        until ``complete(ticket)``.  Returns None (and changes nothing) while
        a flush, roll, retention pass, cleaning or truncation is in flight:
        wait for ``Log.add_idle_listener``'s call and try again.  ``offset``
        at the log end gives a ticket that does nothing, even then.  Raises
        ``ValueError`` when ``offset`` is outside the log.  Whether ``offset``
        is an entry boundary is checked here when the loop knows (a segment
        start, the visible end, any batch boundary of a Kafka-format log:
        ``ValueError`` here), else by ``run()`` (it reads entry headers), and
        then ``complete`` raises ``ValueError``.
        """
        self._gate.check_writable()
        view = self._segments.view
        start, end = view.segments[0].start, view.segments[-1].end
        if not start <= offset <= end:
            raise ValueError(f"{self._name}: cannot truncate to {offset}, outside [{start}, {end}]")
        segment = view.find(offset)
        if offset == end:
            return TruncateTicket(self._fs, self._dir_path, offset, segment, (), None, 1, self._checkpointer, view)
        if not self._gate.idle:
            return None
        assert self.ticket is None, self.ticket
        cut = offset - segment.start
        batches = segment.batches
        if batches is not None and not batches.is_boundary(cut):
            raise ValueError(f"{self._name}: offset {offset} is not a batch boundary of {segment.path}")
        known = cut in (0, segment.visible_size) or batches is not None  # a batch index knows every boundary
        scan_from = None if known else (segment.visible_size if segment.visible_size < cut else 0)
        dropped = self._segments.drop_after(segment)
        ticket = TruncateTicket(self._fs, self._dir_path, offset, segment, dropped, scan_from,
                                self._config().recovery_chunk_bytes, self._checkpointer, view)
        segment.cut = cut
        segment.visible_size = min(segment.visible_size, cut)
        segment.padding = ticket.padding
        if batches is not None:
            ticket.read_producers = not batches.truncate(cut)
        self.ticket = ticket
        assert self._segments.last.end == offset and self._segments.last.visible_end <= offset, (segment, offset)
        return ticket

    def complete(self, ticket: TruncateTicket) -> None:
        """After ``ticket.run()``: the cut is durable; every byte left is fsynced and visible.

        Raises ``ValueError`` (the log back as it was) when ``run()`` found that
        the offset is not an entry boundary, ``LogFailedError`` after an I/O
        error, ``LogError`` before ``run()`` returned or for another log's ticket.
        """
        if not ticket.finished:
            raise LogError(f"{self._name}: complete() before {ticket!r}.run() returned")
        if ticket.noop:
            return
        if ticket is not self.ticket:
            raise LogError(f"{self._name}: {ticket!r} is not this log's truncation in flight")
        self.ticket = None
        with self._gate.settling():
            if ticket.error is not None:
                raise self._gate.fail(f"truncation of {ticket.segment.path} to {ticket.cut} bytes failed: "
                                      f"{ticket.error}")
            self._flushing.settle_truncate(self._settle(ticket))
            self._on_cut()

    def abandon(self) -> tuple[Segment, ...]:
        """Discard the truncation in flight, if any (the log closes; its ``run()`` is not running).

        Returns the segments it took out of the list: they left the view but
        not the disk, and their files are still open.
        """
        assert self.ticket is None or not self.ticket.running, self.ticket
        dropped = self.ticket.dropped if self.ticket is not None else ()
        self.ticket = None
        return dropped

    def _settle(self, ticket: TruncateTicket) -> bool:
        # Make the cut of a ticket that ran without an I/O error final (every byte
        # left is fsynced and visible); True when that advanced the visible end.
        # A refused offset: the list and the segment as before ``begin``, and ValueError.
        segment = ticket.segment
        segment.cut = None
        if ticket.rejected is not None:
            segment.visible_size = ticket.old_visible_size
            segment.padding = ticket.old_padding
            self._segments.restore(ticket.old_view)
            raise ValueError(f"{self._name}: {ticket.rejected}")
        assert segment.file.size == ticket.cut and self._segments.last is segment, (ticket, segment)
        if ticket.producers is not None and segment.batches is not None:
            segment.batches.producers = ticket.producers  # before on_cut folds the log's state
        if ticket.cut == 0:
            segment.first_append_ms = None  # empty again: the age rule starts at its next append
        assert all(s.fully_flushed for s in self._segments.view.segments[:-1]), self._segments.view
        return segment.mark_flushed(ticket.cut)
