"""Truncations mixed with appends, flushes, rolls, retention, reads up to an end and crashes
(docs/protocol.md §12.11), against a model that is just the appended message sets.

The model: the bytes appended from offset 0 with the entry boundaries between
message sets, the start offset, and the bytes that a completed flush, roll or
truncation made durable (a lower bound: rolls on append are the log's own
business).  Runs over the FakeFileSystem; a crash keeps any prefix, zeros or
garbage of each file's unflushed bytes (``flip`` is left to the recovery
machine: 0.7's CRC does not cover the attributes byte, so bytes could differ).

Checked after every step: the log ends where the model does, its visible end
is a boundary within the durable bytes and the end, reads up to any end in
``[offset, end_offset]`` return the model's bytes, the segments are contiguous
and every one but the last is fsynced, and the directory holds exactly the
log's segments.  After a crash the recovered log is the model cut at a
boundary, at least as long as what was visible before the crash: a completed
truncation never comes back, and appends after it land where a log that
never had the cut tail puts them.
"""

from __future__ import annotations

import bisect
import dataclasses

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from trikafka.log import Log, LogBusyError, LogConfig, ManualClock, OffsetOutOfRangeError
from trikafka.log.names import segment_file_name
from trikafka.testing import FakeFileSystem
from trikafka.wire.compression import Codec
from trikafka.wire.messageset import build_message_set, validate_message_set
from trikafka.wire.reading import parse_entries

DIR = "/logs/t-0"
CRASH_MODES = ("prefix", "zeros", "garbage", "keep_all")


@st.composite
def message_sets(draw) -> bytes:
    """A small valid message set: plain entries of either magic, or one gzip wrapper."""
    payloads = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=4))
    kind = draw(st.sampled_from(["magic0", "magic1", "magic1", "gzip"]))
    if kind == "gzip":
        return build_message_set(payloads, codec=Codec.GZIP)
    return build_message_set(payloads, magic=0 if kind == "magic0" else 1)


class TruncationMachine(RuleBasedStateMachine):
    @initialize(segment_bytes=st.sampled_from([64, 200, 2000]), chunk_bytes=st.sampled_from([7, 64, 1 << 20]),
                seed=st.integers(0, 2**16))
    def start(self, segment_bytes, chunk_bytes, seed):
        self.clock = ManualClock(1_000_000)
        self.fs = FakeFileSystem(seed, self.clock)
        self.fs.makedirs(DIR)
        self.fs.fsync_dir("/")
        self.fs.fsync_dir("/logs")
        self.config = LogConfig(segment_bytes=segment_bytes, recovery_chunk_bytes=chunk_bytes)
        self.log = self._open(needs_recovery=False)
        self.data = bytearray()  # every byte from offset 0; only [start, end) is in the log
        self.bounds = [0]  # entry boundaries, sorted
        self.start_offset = 0
        self.durable = 0
        self.flush_ticket = None

    def _open(self, needs_recovery: bool) -> Log:
        return Log.open(self.fs, DIR, "t", 0, self.config, self.clock, needs_recovery)

    @property
    def end(self) -> int:
        return len(self.data)

    def _cut_model(self, offset: int) -> None:
        assert offset in self.bounds, offset
        del self.data[offset:]
        del self.bounds[bisect.bisect_right(self.bounds, offset):]

    # -- writes -----------------------------------------------------------------------------

    @rule(data=message_sets())
    def append(self, data):
        valid = validate_message_set(data, self.config.max_message_size).valid_bytes
        result = self.log.append(data)
        assert result.base_offset == self.end
        for entry in parse_entries(data[:valid], self.end).entries:  # recovery may cut between entries
            self.bounds.append(entry.next_offset)
        self.data += data[:valid]
        assert result.next_offset == self.end == self.bounds[-1]

    @rule()
    def flush(self):
        self._settle_flush()
        self.log.flush()
        self.durable = self.end

    @rule()
    def begin_flush(self):
        self._settle_flush()
        self.flush_ticket = self.log.flushing.begin_flush()
        if self.flush_ticket is not None:
            self.flush_captured = self.end

    def _settle_flush(self) -> None:
        """Complete the flush in flight, if any (the rules below need none in flight)."""
        ticket, self.flush_ticket = self.flush_ticket, None
        if ticket is not None:
            ticket.fsync()
            self.log.flushing.complete_flush(ticket)
            self.durable = max(self.durable, self.flush_captured)

    @rule()
    def roll(self):
        self._settle_flush()
        self.log.roll()
        self.durable = self.end

    @rule(limit=st.sampled_from([0, 100, 1000]))
    def retention_by_size(self, limit):
        self._settle_flush()
        self.log.config = dataclasses.replace(self.config, retention_bytes=limit)
        try:
            if self.log.apply_retention():
                event("retention deleted segments")
        finally:
            self.log.config = self.config
        assert self.log.start_offset in self.bounds and self.log.start_offset >= self.start_offset
        self.start_offset = self.log.start_offset
        self.durable = max(self.durable, self.log.visible_end)  # a roll first, when it emptied the log

    # -- truncation -------------------------------------------------------------------------

    def _boundary(self, pick: int) -> int:
        first = bisect.bisect_left(self.bounds, self.start_offset)
        return self.bounds[first + pick % (len(self.bounds) - first)]

    @rule(pick=st.integers(0, 10**6))
    def truncate(self, pick):
        self._settle_flush()
        offset = self._boundary(pick)
        segments = len(self.log.segments.starts)
        self.log.truncate_to(offset)
        if len(self.log.segments.starts) < segments:
            event("truncation dropped segments")
        if offset == self.start_offset:
            event("truncated to the start")
        if offset < self.end:
            self.durable = offset  # the truncation fsynced all it left
        self._cut_model(offset)

    @rule(pick=st.integers(0, 10**6), read_pick=st.integers(0, 10**6), flush_first=st.booleans())
    def split_truncate(self, pick, read_pick, flush_first):
        offset = self._boundary(pick)
        if flush_first and self.flush_ticket is None:
            self.begin_flush()
        ticket = self.log.truncation.begin(offset)
        if ticket is None:
            assert self.flush_ticket is not None and offset < self.end
            event("truncation waits for a flush")
            return
        assert self.log.end_offset == offset and self.log.visible_end <= offset
        if offset < self.end:
            try:
                self.log.append(b"\x00\x00\x00\x00")
            except LogBusyError:
                pass
            else:
                raise AssertionError("an append during a truncation in flight")
        old_end = self.end
        self._cut_model(offset)
        self._check_read(read_pick, read_pick // 7, 1 << 20)  # reads see the cut at once
        ticket.run()
        self.log.truncation.complete(ticket)
        if offset < old_end:
            self.durable = offset

    @rule(pick=st.integers(0, 10**6), delta=st.integers(1, 10**6))
    def truncate_inside_an_entry(self, pick, delta):
        self._settle_flush()
        offset = self._boundary(pick)
        index = bisect.bisect_right(self.bounds, offset)
        if index == len(self.bounds):
            return
        inside = offset + 1 + delta % (self.bounds[index] - offset - 1)
        before = (self.log.segments.starts, self.log.end_offset, self.log.visible_end, self.fs.listdir(DIR))
        try:
            self.log.truncate_to(inside)
        except ValueError:
            pass
        else:
            raise AssertionError(f"truncated inside an entry at {inside}")
        assert (self.log.segments.starts, self.log.end_offset, self.log.visible_end,
                self.fs.listdir(DIR)) == before

    # -- reads --------------------------------------------------------------------------------

    @rule(pick=st.integers(0, 10**6), end_pick=st.integers(0, 10**6),
          max_bytes=st.one_of(st.integers(0, 50), st.just(1 << 20)))
    def read(self, pick, end_pick, max_bytes):
        self._check_read(pick, end_pick, max_bytes)

    def _check_read(self, pick: int, end_pick: int, max_bytes: int) -> None:
        log, start = self.log, self.start_offset
        end = [log.visible_end, log.end_offset, start + end_pick % (log.end_offset - start + 1)][end_pick % 3]
        offset = start + pick % (end - start + 1)
        region = log.read(offset, max_bytes, end=end)
        if offset == end or max_bytes == 0:
            assert region is None
            return
        got = region.read()
        assert 0 < len(got) <= end - offset and got == bytes(self.data[offset:offset + len(got)])
        stop = offset + len(got)
        assert stop == end or len(got) >= max_bytes or stop in log.segments.starts
        if end > log.visible_end and stop > log.visible_end:
            event("read unflushed bytes")
        try:
            log.read(end + 1, 10, end=end)
        except OffsetOutOfRangeError:
            pass
        else:
            raise AssertionError("a read past its end")

    # -- restarts -----------------------------------------------------------------------------

    @rule(mode=st.sampled_from(CRASH_MODES))
    def crash(self, mode):
        self._settle_flush()
        visible = self.log.visible_end
        self.fs.crash(mode)
        self.log = self._open(needs_recovery=True)
        recovered = self.log.end_offset
        assert self.log.start_offset == self.start_offset
        assert visible <= recovered <= self.end and recovered in self.bounds, (visible, recovered, self.end)
        if recovered < self.end:
            event("a crash lost unflushed sets")
        self._cut_model(recovered)
        self.durable = recovered

    @rule()
    def clean_reopen(self):
        self._settle_flush()
        self.log.flush()
        self.log.close()
        self.log = self._open(needs_recovery=False)
        self.durable = self.end

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def the_log_is_the_model(self):
        log = self.log
        assert (log.start_offset, log.end_offset) == (self.start_offset, self.end)
        assert self.durable <= log.visible_end <= self.end and log.visible_end in self.bounds

    @invariant()
    def segments_are_contiguous_durable_and_alone_on_disk(self):
        segments = self.log.segments.segments
        for older, newer in zip(segments, segments[1:]):
            assert older.end == newer.start
            assert older.fully_flushed and self.fs.durable_size(older.path) == older.size
        assert self.fs.durable_size(segments[-1].path) >= segments[-1].visible_size
        assert all(self.fs.is_durable_entry(s.path) for s in segments)
        on_disk = sorted(n for n in self.fs.listdir(DIR) if n.endswith(".kafka"))
        assert on_disk == [segment_file_name(s.start) for s in segments]

    def teardown(self):
        log = getattr(self, "log", None)
        if log is not None and not log.closed:
            self.flush_ticket = None
            log.close()


TruncationMachine.TestCase.settings = settings(
    max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=20, deadline=None
)
TestLogTruncationStateMachine = TruncationMachine.TestCase
