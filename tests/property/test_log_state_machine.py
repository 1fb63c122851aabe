"""A Hypothesis state machine for the log against an independent model of spec §5 and §7.

The model is the byte stream appended so far, the flushed (visible) end, and
the segments' starts, mtimes and first-append times, which it derives from the
spec's rules (roll before an append, retention, OFFSETS), never from the log.
Runs over the FakeFileSystem with a manual clock, so it is fast and repeatable.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.message_sets import BIG_PAYLOAD_BYTES, MAX_MESSAGE_BYTES, corrupt, message_sets
from trikafka.log import LogBusyError, LogConfig, LogManager, ManualClock, OffsetOutOfRangeError
from trikafka.testing import FakeFileSystem
from trikafka.wire.errors import MessageError
from trikafka.wire.messageset import build_message_set, validate_message_set

ROOT = "/logs"


@dataclass
class ModelSegment:
    start: int
    mtime_ms: int
    first_append_ms: int | None = None


@dataclass
class Model:
    """What the spec says the log holds; offsets are absolute."""

    config: LogConfig
    data: bytearray = field(default_factory=bytearray)  # the whole stream from offset 0
    start: int = 0
    visible_end: int = 0
    segments: list[ModelSegment] = field(default_factory=list)
    appended_messages: int = 0
    flushed_messages: int = 0

    @property
    def end(self) -> int:
        return len(self.data)

    def segment_visible_end(self, index: int) -> int:
        return self.segments[index + 1].start if index + 1 < len(self.segments) else self.visible_end

    def roll(self, now_ms: int) -> None:
        if self.end > self.segments[-1].start:
            self.visible_end = self.end
            self.flushed_messages = self.appended_messages
            self.segments.append(ModelSegment(self.end, now_ms))

    def append(self, valid: bytes, messages: int, now_ms: int) -> int:
        last = self.segments[-1]
        age_due = last.first_append_ms is not None and now_ms - last.first_append_ms > self.config.roll_ms
        if self.end - last.start > self.config.segment_bytes or age_due:
            self.roll(now_ms)
        base = self.end
        self.data += valid
        last = self.segments[-1]
        last.mtime_ms = now_ms
        if last.first_append_ms is None:
            last.first_append_ms = now_ms
        self.appended_messages += messages
        return base

    def retention(self, now_ms: int) -> int:
        expired = 0
        for seg in self.segments:
            if now_ms - seg.mtime_ms <= self.config.retention_ms:
                break
            expired += 1
        deleted = self._delete_first(expired, now_ms)
        return deleted + self._delete_first(self._over_size(), now_ms)

    def _over_size(self) -> int:
        limit = self.config.retention_bytes
        sizes = [self.segment_visible_end(i) - s.start for i, s in enumerate(self.segments)]
        if limit < 0 or sum(sizes) < limit:
            return 0
        diff, count = sum(sizes) - limit, 0
        for size in sizes:
            if size > diff:
                break
            diff -= size
            count += 1
        return count

    def _delete_first(self, count: int, now_ms: int) -> int:
        if count == 0:
            return 0
        if count == len(self.segments):
            if self.end > self.segments[-1].start:
                self.roll(now_ms)
            else:
                self.segments[-1].mtime_ms = now_ms
                count -= 1
        del self.segments[:count]
        self.start = self.segments[0].start
        return count

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int) -> list[int]:
        pairs = [(s.start, s.mtime_ms) for s in self.segments]
        if self.visible_end > self.segments[-1].start:
            pairs.append((self.visible_end, now_ms))
        if time_ms == -1:
            index = len(pairs) - 1
        elif time_ms == -2:
            index = 0
        else:
            index = max((i for i, (_, t) in enumerate(pairs) if t <= time_ms), default=-1)
        n = min(max_offsets, index + 1)
        return [pairs[i][0] for i in range(index, index - n, -1)]


class LogMachine(RuleBasedStateMachine):
    """One partition's log driven through every public operation."""

    @initialize(
        segment_bytes=st.sampled_from([64, 300, 2000, 200_000]),
        flush_every=st.integers(1, 8),
        roll_ms=st.sampled_from([500, 10**9]),
        retention_ms=st.sampled_from([1000, 5000, 10**9]),
        seed=st.integers(0, 2**16),
    )
    def start(self, segment_bytes, flush_every, roll_ms, retention_ms, seed):
        self.clock = ManualClock(1_000_000)
        self.fs = FakeFileSystem(seed, self.clock)
        self.config = LogConfig(segment_bytes=segment_bytes, roll_ms=roll_ms, flush_interval_messages=flush_every,
                                retention_ms=retention_ms, max_message_size=MAX_MESSAGE_BYTES)
        self.manager = None
        self._open_manager()
        self.log = self.manager.get_or_create("t", 0)
        self.model = Model(self.config, segments=[ModelSegment(0, self.clock())])
        self.flush_ticket = None
        self.flush_captured = (0, 0)  # model (end, appended messages) when the flush ticket was taken

    def _open_manager(self) -> None:
        self.manager = LogManager(ROOT, self.config, self.fs, self.clock)
        self.manager.open()

    def teardown(self):
        if getattr(self, "manager", None) is not None:
            self.manager.close(clean=False)

    # -- writes --------------------------------------------------------------------------

    @rule(data=message_sets(), torn_tail=st.integers(0, 12))
    def append(self, data, torn_tail):
        validated = validate_message_set(data)
        if data and torn_tail:
            first_entry = 4 + int.from_bytes(data[:4], "big")
            data = data + data[:min(torn_tail, first_entry - 1)]  # a torn extra entry: dropped (spec §5.1)
        result = self.log.append(data)
        now = self.clock()
        valid = data[:validated.valid_bytes]
        assert result.message_count == validated.message_count
        if valid:
            segments_before = len(self.model.segments)
            assert result.base_offset == self.model.append(valid, validated.message_count, now)
            if len(self.model.segments) > segments_before:
                event("append rolled")
            if self.flush_ticket is not None:
                event("append during a flush in flight")
            if len(valid) > BIG_PAYLOAD_BYTES:
                event("100 KB payload appended")
        assert result.next_offset == self.model.end
        covered = max(self.model.flushed_messages, self.flush_captured[1] if self.flush_ticket else 0)
        assert result.flush_due == (self.model.appended_messages - covered >= self.config.flush_interval_messages)

    @rule(data=message_sets(), how=st.sampled_from(["crc", "magic", "torn_first", "negative_length", "too_large"]),
          cut=st.integers(0, 10**6))
    def append_invalid(self, data, how, cut):
        if not data:
            data = build_message_set([b"x"])
        bad = corrupt(data, how, cut)
        before = (self.log.end_offset, self.log.visible_end, self.log.unflushed_messages, self.log.segments.starts)
        try:
            self.log.append(bad)
        except MessageError:
            pass
        else:
            raise AssertionError(f"an invalid set ({how}) was accepted")
        assert (self.log.end_offset, self.log.visible_end, self.log.unflushed_messages,
                self.log.segments.starts) == before

    @rule()
    def flush(self):
        if self.flush_ticket is not None:
            try:
                self.log.flush()
            except LogBusyError:
                return
            raise AssertionError("flush() ran while a flush ticket was in flight")
        self.log.flush()
        self.model.visible_end = self.model.end
        self.model.flushed_messages = self.model.appended_messages

    @precondition(lambda self: self.flush_ticket is None)
    @rule()
    def begin_flush(self):
        self.flush_ticket = self.log.flushing.begin_flush()
        if self.flush_ticket is not None:
            self.flush_captured = (self.model.end, self.model.appended_messages)
            assert self.flush_ticket.size == self.model.end - self.model.segments[-1].start

    @precondition(lambda self: self.flush_ticket is not None)
    @rule()
    def complete_flush(self):
        ticket, self.flush_ticket = self.flush_ticket, None
        ticket.fsync()
        self.log.flushing.complete_flush(ticket)
        end, messages = self.flush_captured
        self.model.visible_end = max(self.model.visible_end, end)
        self.model.flushed_messages = max(self.model.flushed_messages, messages)

    @rule()
    def roll(self):
        self.log.roll()
        self.model.roll(self.clock())

    @precondition(lambda self: self.flush_ticket is None)
    @rule(data=message_sets())
    def split_roll(self, data):
        ticket = self.log.flushing.begin_roll()
        if ticket is None:
            assert self.model.end == self.model.segments[-1].start
            return
        if data:
            try:
                self.log.append(data)
            except LogBusyError:
                pass
            else:
                raise AssertionError("append during a roll in flight")
        ticket.run()
        self.log.flushing.complete_roll(ticket)
        self.model.roll(self.clock())

    @rule(delta_ms=st.sampled_from([0, 1, 300, 999, 1000, 1001, 4000]))
    def advance_time(self, delta_ms):
        self.clock.advance(delta_ms)

    @rule(delta_ms=st.sampled_from([0, 600, 2000, 6000]))
    def retention_by_time(self, delta_ms):
        self.clock.advance(delta_ms)
        self._retention()

    @rule(limit=st.sampled_from([-1, 0, 10, 100, 1000, 10_000]))
    def retention_by_size(self, limit):
        config = dataclasses.replace(self.config, retention_bytes=limit)
        self.log.config = self.model.config = config
        try:
            self._retention()
        finally:
            self.log.config = self.model.config = self.config

    def _retention(self):
        now = self.clock()
        expected = self.model.retention(now)
        assert self.log.apply_retention(now) == expected
        note(f"retention at {now} deleted {expected}; start={self.model.start}")
        if expected:
            event("retention deleted segments")
        if expected and self.model.start == self.model.end:
            event("retention emptied the log")

    @precondition(lambda self: self.flush_ticket is None)
    @rule()
    def clean_reopen(self):
        assert self.manager.close() is True
        self._open_manager()
        self.log = self.manager.get("t", 0)
        assert self.log is not None
        self.model.visible_end = self.model.end  # close flushed everything
        self.model.flushed_messages = self.model.appended_messages
        for seg in self.model.segments:
            seg.first_append_ms = None  # in memory only (spec §7.2)

    # -- reads ---------------------------------------------------------------------------------

    @rule(pick=st.integers(0, 10**9), jitter=st.integers(-3, 3),
          max_bytes=st.one_of(st.integers(0, 40), st.integers(0, 300_000)))
    def read(self, pick, jitter, max_bytes):
        model = self.model
        offset = model.start + pick % (model.visible_end - model.start + 1) + jitter
        if offset < model.start or offset > model.visible_end:
            try:
                self.log.read(offset, max_bytes)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"read at {offset} outside [{model.start}, {model.visible_end}] succeeded")
        region = self.log.read(offset, max_bytes)
        if offset == model.visible_end or max_bytes == 0:
            assert region is None
            return
        index = max(i for i, s in enumerate(model.segments) if s.start <= offset)
        stop = min(offset + max_bytes, model.segment_visible_end(index))
        assert region.read() == bytes(model.data[offset:stop])

    @rule(time=st.one_of(st.sampled_from([-1, -2, -3]), st.integers(999_000, 1_100_000)),
          max_offsets=st.integers(0, 5))
    def offsets_before(self, time, max_offsets):
        now = self.clock()
        assert self.log.offsets_before(time, max_offsets, now) == self.model.offsets_before(time, max_offsets, now)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def offsets_match_the_model(self):
        log, model = self.log, self.model
        assert (log.start_offset, log.visible_end, log.end_offset) == (model.start, model.visible_end, model.end)
        assert log.segments.starts == tuple(s.start for s in model.segments)
        assert log.unflushed_messages == model.appended_messages - model.flushed_messages

    @invariant()
    def segments_are_contiguous_and_durable_where_visible(self):
        segments = self.log.segments.segments
        for older, newer in zip(segments, segments[1:]):
            assert older.end == newer.start
            assert older.fully_flushed and self.fs.durable_size(older.path) == older.size
        last = segments[-1]
        assert self.fs.durable_size(last.path) >= last.visible_size
        assert all(self.fs.is_durable_entry(s.path) for s in segments)
        assert [self.fs.mtime_ms(s.path) for s in segments] == [s.mtime_ms for s in self.model.segments]


LogMachine.TestCase.settings = settings(
    max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=60, deadline=None
)
TestLogStateMachine = LogMachine.TestCase
