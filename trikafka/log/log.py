"""One topic-partition's log: append, read, flush, roll, retention (docs/protocol.md §7).

The log is synchronous and single-threaded: every method runs on the caller's
thread (the broker's event loop), except the blocking halves of tickets
(``FlushTicket.fsync``, ``RollTicket.run``, ``RetentionTicket.stat`` and
``.remove``, ``TruncateTicket.run``), which may run in a worker thread.  The broker opens its logs
with ``roll_on_append=False``, so an append never rolls (never fsyncs) on the
loop: the broker rolls with a ticket before appending.  Each kind of ticket
is taken from and handed back to the collaborator that owns the one in
flight: ``log.flushing`` (flushes, rolls and the visible end's listeners),
``log.retention`` and ``log.truncation``; the log offers the same steps on
one thread (``flush``, ``roll``, ``apply_retention``, ``truncate_to``).
Its ``Gate`` says what may start while what is in flight, and holds the
fail-stop failure.  ``log.passes`` holds the broker's background passes on
the log (``passes.py``): a log is closed and deleted only once none holds it.

Invariants (asserted where they are established):

* segments are contiguous: ``segment[k].end == segment[k + 1].start``;
* every segment but the last is fully flushed and fully visible;
* a segment's visible size never exceeds what a completed fsync covered;
* the visible end ``E`` never decreases, and retention keeps it; only a
  truncation (``truncation.py``) moves it, and the log end, back;
* the visible end is an entry boundary.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Sequence

from trikafka.wire.responses import ChunkSequence, FileRegion

from .checkpoint import RecoveryCheckpointer
from .config import LogConfig
from .errors import LogBusyError, LogClosedError, WrongFormatError
from .flushing import Flushing
from .fs import FileSystem
from .gate import APPEND, FLUSH, INLINE_RETENTION, RETENTION, ROLL, TRUNCATION, Gate
from .kafka_offsets import KafkaOffsets
from .log_start import LogStart
from .passes import Passes
from .record_format import FORMAT_07, OffsetAssignment, RecordFormat, read_record_format
from .recovery import load_segments
from .retention import Retention
from .producer_state import ProducerStates
from .segment import Segment
from .segment_list import TIME_EARLIEST, TIME_LATEST, SegmentList, SegmentView
from .truncation import Truncation

__all__ = ["AppendResult", "Log", "TIME_EARLIEST", "TIME_LATEST"]


class AppendResult(NamedTuple):
    """Where an append landed.  ``flush_due``: the caller should flush now (docs/protocol.md §7.2).

    ``base_offset`` and ``next_offset`` are byte offsets; ``logical_offset``, in a
    Kafka-format log, is the first appended batch's base offset (the log's next
    logical offset when nothing was appended), -1 in a 0.7 log (§16.6).
    ``message_count`` counts 0.7 messages or v2 records.  A NamedTuple, not a frozen
    dataclass: every append makes one, and a frozen dataclass costs four times as much to build.
    """

    base_offset: int
    next_offset: int
    message_count: int
    flush_due: bool
    logical_offset: int = -1


class Log:
    """The segments of one topic-partition in ``dir_path``; see the module docstring."""

    def __init__(self, topic: str, partition: int, dir_path: str, segments: list[Segment],
                 config: LogConfig, fs: FileSystem, clock_ms: Callable[[], int], *, roll_on_append: bool = True,
                 record_format: RecordFormat = FORMAT_07, log_start: LogStart | None = None):
        self.topic = topic
        self.partition = partition
        self.dir_path = dir_path
        self.config = config
        self._fs = fs
        self._clock_ms = clock_ms
        self._segments = SegmentList(segments)
        assert all(s.fully_flushed for s in segments[:-1]), segments
        self._format = record_format
        assert all((s.batches is not None) == record_format.logical_offsets for s in segments), segments
        self._kafka_offsets = (KafkaOffsets(self._segments, log_start or LogStart(fs, dir_path))
                               if record_format.logical_offsets else None)
        self._producers = self._fold_producers(segments)
        self._roll_on_append = roll_on_append
        self._checkpointer = RecoveryCheckpointer(fs, dir_path, clock_ms)  # written by flush tickets
        self._gate = Gate(f"{topic}-{partition}", {
            FLUSH: lambda: self._flushing.flush_ticket is not None, ROLL: lambda: self._flushing.roll_ticket is not None,
            RETENTION: lambda: self._retention.busy, TRUNCATION: lambda: self._truncation.busy})
        self._flushing = Flushing(fs, dir_path, self._segments, self._checkpointer, self._gate, repr(self))
        self._retention = Retention(fs, dir_path, self._segments, self._gate, self._flushing, lambda: self.config,
                                    repr(self), self._deleted_below)
        self._truncation = Truncation(fs, dir_path, self._segments, self._checkpointer, self._gate, self._flushing,
                                      lambda: self.config, self._refold_producers, repr(self))
        self._passes = Passes(f"{topic}-{partition}")
        self.crc_checked_from: int | None = None  # open(): recovery kept unfsynced bytes from here on CRCs alone
        # A replicated partition's HW: the cleaner leaves segments reaching past it (epoch truncation may cut them).
        self.cleanable_end: Callable[[], int] | None = None

    @classmethod
    def open(cls, fs: FileSystem, dir_path: str, topic: str, partition: int, config: LogConfig,
             clock_ms: Callable[[], int], needs_recovery: bool, *, roll_on_append: bool = True) -> "Log":
        """Load an existing partition directory (recovering its newest segment if asked).

        Its record format is the one its ``FORMAT_FILE`` names (0.7 without one); a
        Kafka-format log's batch indexes are built by ``load_segments``, after
        recovery (docs/protocol.md §16.6).  Blocking.
        """
        fmt = read_record_format(fs, dir_path)
        segments, checked_from = load_segments(fs, dir_path, needs_recovery, config.recovery_chunk_bytes, fmt)
        log_start = LogStart.load(fs, dir_path) if fmt.logical_offsets else None
        log = cls(topic, partition, dir_path, segments, config, fs, clock_ms, roll_on_append=roll_on_append,
                  record_format=fmt, log_start=log_start)
        log.crc_checked_from = checked_from
        return log

    # -- state ------------------------------------------------------------------------

    @property
    def producers(self) -> ProducerStates:
        """A Kafka-format log's producer state (§19.2; empty for a 0.7 log)."""
        return self._producers

    @property
    def record_format(self) -> str:
        """``"0.7"`` or ``"v2"``: what the log's directory stores (docs/protocol.md §16.6)."""
        return self._format.name

    @property
    def kafka_offsets(self) -> KafkaOffsets:
        """A Kafka-format log's logical offsets and times (in memory; any thread that owns the log).

        Raises ``WrongFormatError`` for a 0.7 log.
        """
        if self._kafka_offsets is None:
            raise WrongFormatError(f"{self} is a 0.7 log: it has no logical offsets")
        return self._kafka_offsets

    @property
    def start_offset(self) -> int:
        """``S``: the start of the oldest remaining segment."""
        return self._segments.first.start

    @property
    def visible_end(self) -> int:
        """``E``: start of the last segment plus its flushed size (docs/protocol.md §7.2)."""
        return self._segments.last.visible_end

    @property
    def end_offset(self) -> int:
        """The next append offset, counting unflushed bytes."""
        return self._segments.last.end

    @property
    def unflushed_messages(self) -> int:
        """Messages appended but not yet covered by a completed flush."""
        return self._flushing.unflushed_messages

    @property
    def segments(self) -> SegmentView:
        """A snapshot of the segments (it never changes after it is taken)."""
        return self._segments.view

    @property
    def failure(self) -> str | None:
        """Why the log stopped accepting writes, or None while it is healthy."""
        return self._gate.failure

    @property
    def closed(self) -> bool:
        return self._gate.closed

    @property
    def passes(self) -> Passes:
        """The passes on this log (the services', and requests' work off the loop): each holds a lease
        while it touches the log; a deletion retires the log and waits for them (docs/protocol.md §16.4)."""
        return self._passes

    @property
    def flush_in_flight(self) -> bool:
        return self._flushing.flush_ticket is not None

    @property
    def cleaning(self) -> bool:
        """Set by the cleaner while it rewrites segments: retention and truncation wait."""
        return self._gate.cleaning

    @cleaning.setter
    def cleaning(self, value: bool) -> None:
        self._gate.cleaning = value

    def add_visible_listener(self, callback: Callable[["Log"], None]) -> None:
        """Call ``callback(log)`` on the loop each time the visible end advances."""
        self._flushing.add_visible_listener(partial(callback, self))

    def add_dirty_listener(self, callback: Callable[["Log"], None]) -> None:
        """Call ``callback(log)`` on the loop when an append lands in a log that had
        nothing unflushed beyond what a flush or roll in flight already captured
        (the start of the wait that the flush interval bounds)."""
        self._flushing.add_dirty_listener(partial(callback, self))

    # -- writes -----------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, *,
               assign: OffsetAssignment | None = None) -> AppendResult:
        """Validate ``data`` in the log's record format, then append its valid prefix
        (docs/protocol.md §5.1, §16.6).

        Nothing is written unless every entry passes (raises the format's error,
        ``MessageError`` or ``BatchError``, and changes nothing).  0.7: a
        truncated trailing entry is dropped.  Kafka format: with ``assign`` (the
        leader; ``data`` a bytearray, rewritten in place) the batches get the
        log's next logical offsets; without it (a follower copying its leader's
        bytes) each batch must start at the log's next logical offset, and a
        batch that the data ends inside is dropped, as 0.7 drops a truncated
        entry.  ``assign`` on a 0.7 log raises ``WrongFormatError``.  An empty
        valid prefix appends nothing.  Rolls first when ``should_roll``, on
        this thread, unless the log was opened with ``roll_on_append=False``
        (the broker's logs: it rolls with a ticket before appending, and an
        append that finds a roll due meanwhile lands in the current segment).
        Raises ``LogBusyError`` while a roll ticket is in flight and
        ``LogFailedError`` once an I/O error stopped the log.
        """
        self._gate.check(APPEND)
        kafka = self._kafka_offsets
        next_logical = kafka.next_offset if kafka is not None else -1
        valid_bytes, message_count, batches = self._format.prepare(data, self.config.max_message_size, next_logical,
                                                                   assign)
        duplicate = self._producers.check(batches, assign.guard, data) if assign is not None else None
        if valid_bytes == 0 or duplicate is not None:  # a duplicate answers its first append's offset (§19.3)
            end = self.end_offset
            return AppendResult(end, end, 0, self._flushing.flush_due(self.config),
                                next_logical if duplicate is None else duplicate)
        now_ms = self._clock_ms()
        if self._roll_on_append and self.should_roll(now_ms):
            self._flushing.roll()
        segment = self._segments.last
        base_offset = segment.end
        payload = data if isinstance(data, bytes) else memoryview(data)  # the file writes bytes or a view
        try:
            segment.file.append(payload if valid_bytes == len(payload) else memoryview(payload)[:valid_bytes])
        except OSError as exc:
            raise self._gate.fail(f"append to {segment.path} failed: {exc}") from exc
        assert segment.end == base_offset + valid_bytes, (segment, base_offset, valid_bytes)
        if segment.batches is not None:
            segment.batches.add_headers(batches, base_offset - segment.start, payload)
            self._producers.record(batches, payload)
        if segment.first_append_ms is None:
            segment.first_append_ms = now_ms
        self._flushing.appended(message_count)
        return AppendResult(base_offset, base_offset + valid_bytes, message_count,
                            self._flushing.flush_due(self.config), next_logical)

    def roll_due(self) -> bool:
        """Whether an append now would roll first (``should_roll`` at this log's clock)."""
        return self.should_roll(self._clock_ms())

    def should_roll(self, now_ms: int) -> bool:
        """Whether the next append must roll first (docs/protocol.md §7.2)."""
        segment = self._segments.last
        if segment.size > self.config.segment_bytes:
            return True
        return segment.first_append_ms is not None and now_ms - segment.first_append_ms > self.config.roll_ms

    # -- flush and roll (flushing.py's ``Flushing`` owns the flush or roll in flight) --------

    @property
    def flushing(self) -> Flushing:
        """The log's flush and roll tickets: ``begin_flush``, ``complete_flush``, ``begin_roll``,
        ``complete_roll`` (docs/protocol.md §7.2)."""
        return self._flushing

    def flush(self) -> None:
        """Flush synchronously on this thread (tests, shutdown, tools)."""
        self._flushing.flush()

    def roll(self) -> bool:
        """Roll synchronously on this thread; False when the active segment is empty."""
        return self._flushing.roll()

    # -- reads (the snapshot in segment_list.py answers them) ---------------------------

    def read(self, offset: int, max_bytes: int, *, end: int | None = None) -> FileRegion | ChunkSequence | None:
        """Bytes from ``offset`` up to ``end``, at most ``max_bytes``, within one segment (docs/protocol.md §5.2).

        ``end`` defaults to the visible end ``E``; any value up to ``end_offset``
        is allowed (a follower's REPLICA_FETCH reads unflushed bytes: they are in
        the file, so the region reads them like any other), past it ``ValueError``.
        ``SegmentView.read``: ``OffsetOutOfRangeError`` outside ``[S, end]``, None at ``end``.
        """
        if self._gate.closed:
            raise LogClosedError(f"{self} is closed")
        return self._segments.view.read(offset, max_bytes, end)

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int | None = None) -> list[int]:
        """The OFFSETS answer of docs/protocol.md §5.5, newest first (``SegmentView.offsets_before``)."""
        return self._segments.view.offsets_before(time_ms, max_offsets, self._fs.mtime_ms,
                                                  self._clock_ms() if now_ms is None else now_ms)

    def install_cleaned(self, segment: Segment) -> bool:
        """Swap in a cleaned copy of a segment (same start, same size); False if it is gone.

        Readers holding the old segment keep reading its file, which stays open.
        """
        if self._gate.closed:
            return False
        replaced = self._segments.replace(segment)
        assert replaced is None or (replaced.batches is None) == (segment.batches is None), (replaced, segment)
        return replaced is not None

    # -- retention (retention.py's ``Retention`` owns the pass in flight) ---------------

    @property
    def retention(self) -> Retention:
        """The log's retention passes: ``begin``, ``needs_roll``, ``drop``, ``complete`` (docs/protocol.md §7.4)."""
        return self._retention

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by the time rule, then the size rule (docs/protocol.md §7.4), on this
        thread; returns how many.  0 while a roll or a cleaning is in flight.  ``E`` is
        kept: when the rules would delete every segment, a non-empty last segment is
        rolled first, an empty one is kept with a fresh mtime."""
        self._gate.check_writable()
        if self._gate.blockers(INLINE_RETENTION):
            return 0
        ticket = self._retention.begin(self._clock_ms() if now_ms is None else now_ms)
        ticket.stat()
        if self._retention.needs_roll(ticket):
            self.roll()  # so an empty segment named E survives
        deleted = self._retention.drop(ticket)
        ticket.remove()
        self._retention.complete(ticket)
        return deleted

    # -- truncation (truncation.py's ``Truncation`` owns the cut in flight) -------------

    @property
    def truncation(self) -> Truncation:
        """The log's truncations: ``begin``, ``complete``, ``busy`` (docs/protocol.md §12.11)."""
        return self._truncation

    def add_idle_listener(self, callback: Callable[["Log"], None]) -> None:
        """Call ``callback(log)`` on the loop when a flush, roll, retention pass, cleaning or
        truncation ends and none is left in flight: when ``truncation.begin`` may succeed again."""
        self._gate.add_idle_listener(partial(callback, self))

    def truncate_to(self, offset: int) -> None:
        """Truncate synchronously on this thread (the log core's tests and tools).

        Raises ``LogBusyError`` where ``truncation.begin`` would return None.
        """
        ticket = self._truncation.begin(offset)
        if ticket is None:
            raise LogBusyError(f"{self}: a flush, roll, retention pass, cleaning or truncation is in flight")
        ticket.run()
        self._truncation.complete(ticket)

    def expire_producers(self) -> list[int]:
        """Drop the producers expired by now from the producer state (§19.2.1); their ids."""
        return self._producers.remove_expired(self._clock_ms(), self.config.producer_id_expiration_ms)

    def _deleted_below(self) -> int:
        # The logical offset below which DeleteRecords deleted the records (§16.6); 0 in a 0.7 log.
        return self._kafka_offsets.log_start.offset if self._kafka_offsets is not None else 0

    def _fold_producers(self, segments: Sequence[Segment]) -> ProducerStates:
        """The producer state the segments' batches give, less the producers expired by now (§19.2.1)."""
        states = ProducerStates.fold(s.batches.producers for s in segments if s.batches is not None)
        states.remove_expired(self._clock_ms(), self.config.producer_id_expiration_ms)
        return states

    def _refold_producers(self) -> None:
        if self._kafka_offsets is not None:  # the cut batches leave the producer state (§19.2)
            self._producers = self._fold_producers(self._segments.view.segments)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every segment file.  Does not flush (``flush()`` first for that).

        A fetch answer still being sent keeps reading the files it holds (their
        ``reader``s: docs/protocol.md §16.4), even once the directory is removed.

        Raises ``LogBusyError`` if a ticket's blocking half is running in a
        thread right now; a ticket that was taken but abandoned is discarded.
        The log is retired: it grants no pass lease from here on.
        """
        if self._gate.closed:
            return
        for ticket in (*self._flushing.tickets, self._retention.ticket, self._truncation.ticket):
            if ticket is not None and ticket.running:
                raise LogBusyError(f"{self}: close() while {ticket!r} runs")
        self._flushing.abandon()
        self._retention.abandon()
        dropped = self._truncation.abandon()
        self._gate.close()
        self._passes.retire()
        for segment in self._segments.view.segments + dropped:
            segment.file.close()

    def __repr__(self) -> str:
        return f"Log({self.topic!r}, {self.partition})"
