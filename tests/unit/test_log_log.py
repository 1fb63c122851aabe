"""Log: append, read, flush and roll tickets, offsets, retention, fail-stop (spec §5, §7).

The first tests port 0.7's ``LogTest`` scenarios.
"""

import pytest

from trikafka.log import (
    Log,
    LogBusyError,
    LogClosedError,
    LogConfig,
    LogError,
    LogFailedError,
    ManualClock,
    OffsetOutOfRangeError,
)
from trikafka.log.checkpoint import CHECKPOINT_FILE_NAME as CHECKPOINT
from trikafka.log.segment_list import SegmentList
from trikafka.testing import FakeFileSystem
from trikafka.wire.compression import Codec
from trikafka.wire.errors import InvalidMessageError, MessageSizeTooLargeError
from trikafka.wire.messageset import build_message_set
from trikafka.wire.reading import iter_messages

DIR = "/logs/t-0"
T0 = 1_000_000


def open_log(fs=None, clock=None, needs_recovery=False, **config):
    clock = clock or ManualClock(T0)
    fs = fs or FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    return Log.open(fs, DIR, "t", 0, LogConfig(**config), clock, needs_recovery), fs, clock


def entry(payload: bytes, magic: int = 1) -> bytes:
    return build_message_set([payload], magic=magic)


def read_all(log: Log, offset: int = 0) -> bytes:
    out = b""
    while offset < log.visible_end:
        region = log.read(offset, 1 << 20)
        chunk = region.read()
        out += chunk
        offset += len(chunk)
    return out


# -- 0.7 LogTest ------------------------------------------------------------------------


def test_load_empty_log():
    log, fs, _ = open_log()
    assert fs.listdir(DIR) == ["00000000000000000000.kafka"]
    assert (log.start_offset, log.visible_end, log.end_offset) == (0, 0, 0)
    assert log.read(0, 1024) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1024)


def test_append_and_read():
    log, _, _ = open_log()
    sets = [build_message_set([b"message %d" % i, b"second %d" % i]) for i in range(10)]
    offsets = []
    for s in sets:
        result = log.append(s)
        offsets.append(result.base_offset)
        assert result.next_offset == result.base_offset + len(s)
        assert result.message_count == 2
    log.flush()
    for offset, s in zip(offsets, sets):
        assert log.read(offset, len(s)).read() == s
    assert read_all(log) == b"".join(sets)
    assert [m.payload for m in iter_messages(read_all(log))][:3] == [b"message 0", b"second 0", b"message 1"]


def test_read_out_of_range():
    log, _, _ = open_log()
    data = entry(b"hello", magic=0)
    log.append(data)
    log.flush()
    assert log.visible_end == 14
    assert log.read(14, 1024) is None  # exactly at the end: empty, no error
    for bad in (15, -1, 1 << 40):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(bad, 1024)
        assert info.value.error_code == 1
    assert log.read(7, 1024).read() == data[7:]  # misaligned reads are served as is (spec §4)
    assert log.read(0, 0) is None
    with pytest.raises(ValueError):
        log.read(0, -1)


def test_log_rolls():
    log, fs, _ = open_log(segment_bytes=100)
    sets = [entry(b"m%02d" % i + b"x" * 40) for i in range(20)]  # 53-byte entries
    for s in sets:
        log.append(s)
    log.flush()
    segments = log.segments.segments
    # A segment rolls once it *exceeds* segment_bytes, so each holds 2 entries (106 bytes).
    assert [s.size for s in segments] == [106] * 10
    assert fs.listdir(DIR) == [CHECKPOINT] + ["%020d.kafka" % (106 * k) for k in range(10)]
    assert read_all(log) == b"".join(sets)
    for s in segments[:-1]:  # a read near a segment's end stops there
        assert log.read(s.end - 10, 1000).length == 10


def test_find_segment_edges():
    log, _, _ = open_log(segment_bytes=10)
    for i in range(4):
        log.append(entry(b"abcdef"))  # 16 bytes each, one per segment
    log.flush()
    view = log.segments
    assert view.starts == (0, 16, 32, 48)
    assert [view.find(o).start for o in (0, 15, 16, 31, 32, 47, 48, 63, 64, 1000)] == \
           [0, 0, 16, 16, 32, 32, 48, 48, 48, 48]
    assert log.read(16, 1).read() == entry(b"abcdef")[:1]
    assert log.read(64, 10) is None


def test_edge_log_rolls_keep_the_end_offset():
    log, fs, clock = open_log(retention_ms=1000)
    log.append(entry(b"hello"))
    log.flush()
    end = log.visible_end
    clock.advance(5000)
    assert log.apply_retention() == 1  # the only segment was non-empty: rolled, then deleted
    assert fs.listdir(DIR) == [CHECKPOINT, "%020d.kafka" % end]
    assert (log.start_offset, log.visible_end, log.end_offset) == (end, end, end)
    assert log.append(entry(b"again")).base_offset == end
    log.flush()
    assert log.read(end, 100).read() == entry(b"again")


def test_fully_expired_empty_last_segment_is_kept_and_touched():
    log, fs, clock = open_log(retention_ms=1000, segment_bytes=10)
    log.append(entry(b"abcdef"))
    log.roll()
    clock.advance(5000)
    assert log.apply_retention() == 1
    assert len(log.segments.segments) == 1 and log.start_offset == log.visible_end == 16
    assert fs.mtime_ms(log.segments.segments[0].path) == clock()
    assert log.apply_retention() == 0  # the touched segment is young again


def test_load_non_contiguous_segments_fails():
    from trikafka.log.errors import LogLoadError
    fs = FakeFileSystem()
    fs.write_file(DIR + "/00000000000000000000.kafka", entry(b"abc"))
    fs.write_file(DIR + "/00000000000000000100.kafka", entry(b"def"))
    with pytest.raises(LogLoadError, match="gap"):
        open_log(fs)
    fs = FakeFileSystem()
    fs.write_file(DIR + "/00000000000000000000.kafka", entry(b"abc"))
    fs.write_file(DIR + "/00000000000000000005.kafka", entry(b"def"))
    with pytest.raises(LogLoadError, match="overlap"):
        open_log(fs)


# -- append validation ---------------------------------------------------------------------


def test_invalid_set_changes_nothing():
    log, fs, _ = open_log(max_message_size=100)
    log.append(entry(b"good"))
    bad = bytearray(entry(b"payload"))
    bad[-1] ^= 1
    segment_path = DIR + "/00000000000000000000.kafka"
    for data, error in [(entry(b"ok") + bytes(bad), InvalidMessageError),   # a bad CRC after a good entry
                        (entry(b"x" * 101), MessageSizeTooLargeError),
                        (b"\x00\x00\x00\x05\x07abcd", InvalidMessageError),  # unknown magic
                        (b"\x00\x00", InvalidMessageError)]:               # a torn first entry
        before = (log.end_offset, fs.read_file(segment_path), log.unflushed_messages)
        with pytest.raises(error):
            log.append(data)
        assert (log.end_offset, fs.read_file(segment_path), log.unflushed_messages) == before


def test_truncated_tail_is_dropped_and_empty_sets_append_nothing():
    log, _, _ = open_log()
    full = entry(b"first") + entry(b"second")
    result = log.append(full[:-3])
    assert (result.base_offset, result.next_offset, result.message_count) == (0, len(entry(b"first")), 1)
    result = log.append(b"")
    assert (result.base_offset, result.next_offset, result.message_count) == (14 + 1, 14 + 1, 0)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
def test_wrappers_count_their_inner_messages(codec):
    log, _, _ = open_log(flush_interval_messages=5)
    data = build_message_set([b"a", b"b", b"c"], codec=codec)
    first = log.append(data)
    assert first.message_count == 3 and not first.flush_due
    assert log.append(data).flush_due  # 6 >= 5
    assert log.unflushed_messages == 6
    log.flush()
    assert log.unflushed_messages == 0
    assert read_all(log) == data + data


# -- flush policy and tickets --------------------------------------------------------------


def test_unflushed_data_is_invisible_until_a_flush():
    log, fs, _ = open_log()
    log.append(entry(b"a"))
    assert log.visible_end == 0 and log.end_offset == 11
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    log.flush()
    assert log.visible_end == 11
    assert fs.durable_size(DIR + "/00000000000000000000.kafka") == 11


def test_flush_due_by_count():
    log, _, _ = open_log(flush_interval_messages=3)
    assert [log.append(entry(b"x")).flush_due for _ in range(4)] == [False, False, True, True]
    ticket = log.flushing.begin_flush()
    # Messages captured by the flush in flight no longer count toward the next one.
    assert [log.append(entry(b"y")).flush_due for _ in range(3)] == [False, False, True]
    ticket.fsync()
    log.flushing.complete_flush(ticket)
    assert log.unflushed_messages == 3


def test_the_dirty_listener_hears_the_first_append_no_flush_or_roll_captured():
    log, _, _ = open_log()
    dirty = []
    log.add_dirty_listener(lambda lg: dirty.append(lg.end_offset))
    log.append(entry(b"x"))
    log.append(entry(b"y"))
    assert dirty == [11]  # the first append starts the wait; the second joins it
    ticket = log.flushing.begin_flush()
    log.append(entry(b"during the fsync"))  # not covered by the flush in flight: a new wait
    assert dirty == [11, 48]
    ticket.fsync()
    log.flushing.complete_flush(ticket)
    log.append(entry(b"z"))
    assert dirty == [11, 48]  # still the same wait: those bytes were never captured
    log.flush()
    assert log.flushing.begin_flush() is None
    log.append(entry(b"after the flush"))
    assert dirty == [11, 48, 84]
    log.roll()  # a roll captures everything too
    log.append(entry(b"after the roll"))
    assert dirty == [11, 48, 84, 108]


def test_an_append_rolls_only_if_the_log_rolls_on_append():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    log = Log.open(fs, DIR, "t", 0, LogConfig(segment_bytes=10), clock, False, roll_on_append=False)
    log.append(entry(b"abcdef"))
    assert log.roll_due()
    log.append(entry(b"ghijkl"))  # the broker's logs: the roll is the caller's, before the append
    assert log.segments.starts == (0,)
    log.roll()
    assert log.segments.starts == (0, 32)


def test_split_flush_advances_to_the_size_captured_before_the_fsync():
    log, fs, _ = open_log()
    seen = []
    log.add_visible_listener(lambda lg: seen.append(lg.visible_end))
    log.append(entry(b"one"))
    ticket = log.flushing.begin_flush()
    assert ticket.size == 13
    log.append(entry(b"two"))  # appends continue while the fsync runs
    with pytest.raises(LogBusyError):
        log.flushing.begin_flush()  # one flush in flight per log
    with pytest.raises(LogError):
        log.flushing.complete_flush(ticket)  # the fsync has not run yet
    ticket.fsync()
    assert log.visible_end == 0  # visible only on completion
    log.flushing.complete_flush(ticket)
    assert log.visible_end == 13 and seen == [13]
    assert log.end_offset == 26
    log.flush()
    assert log.visible_end == 26 and seen == [13, 26]
    assert log.flushing.begin_flush() is None  # clean: nothing to flush
    with pytest.raises(LogError):
        log.flushing.complete_flush(ticket)  # a stale ticket


def test_flush_ticket_outlived_by_an_inline_roll():
    log, _, _ = open_log(segment_bytes=10)
    log.append(entry(b"abcdef"))
    ticket = log.flushing.begin_flush()
    log.append(entry(b"ghijkl"))  # rolls inline: the old segment is fsynced and fully visible
    assert len(log.segments.segments) == 2 and log.visible_end == 16
    ticket.fsync()
    log.flushing.complete_flush(ticket)
    assert log.visible_end == 16
    log.flush()
    assert log.visible_end == 32


# -- rolling ------------------------------------------------------------------------------


def test_roll_fsyncs_the_old_segment_before_creating_the_new_one():
    log, fs, _ = open_log(segment_bytes=10)
    observed = []
    real_open = fs.open_segment

    def spying_open(path, create):
        if create:
            old = log.segments.segments[-1]
            observed.append((fs.durable_size(old.path), old.size))
        return real_open(path, create)

    fs.open_segment = spying_open
    for i in range(5):
        log.append(entry(b"%06d" % i))
    assert observed == [(16, 16)] * 4
    assert all(fs.is_durable_entry(s.path) for s in log.segments.segments)


def test_split_roll_refuses_appends_until_complete():
    log, fs, _ = open_log()
    assert log.flushing.begin_roll() is None  # empty active segment: nothing to roll
    log.append(entry(b"abc"))
    ticket = log.flushing.begin_roll()
    with pytest.raises(LogBusyError):
        log.append(entry(b"def"))
    with pytest.raises(LogBusyError):
        log.flushing.begin_flush()
    assert log.apply_retention() == 0
    ticket.run()
    assert fs.exists(DIR + "/%020d.kafka" % 13)
    assert len(log.segments.segments) == 1
    log.flushing.complete_roll(ticket)
    assert log.visible_end == 13 and log.segments.starts == (0, 13)
    assert log.append(entry(b"def")).base_offset == 13


def test_roll_by_age_uses_the_first_append_time():
    log, _, clock = open_log(roll_ms=1000)
    assert not log.should_roll(clock() + 10**9)  # never appended: no age
    log.append(entry(b"a"))
    clock.advance(600)
    log.append(entry(b"b"))
    assert not log.should_roll(clock() + 400)
    assert log.should_roll(clock() + 401)
    clock.advance(401)
    assert log.append(entry(b"c")).base_offset == 22
    assert log.segments.starts == (0, 22)


def test_roll_removes_a_stale_file_with_the_new_name():
    log, fs, _ = open_log()
    log.append(entry(b"abc"))
    stale = DIR + "/%020d.kafka" % 13
    fs.write_file(stale, b"stale bytes")  # e.g. left behind by some earlier incarnation
    log.roll()
    assert fs.read_file(stale) == b""
    assert log.segments.starts == (0, 13)


# -- offsets_before (spec §5.5, §15) ----------------------------------------------------------


def test_offsets_worked_example():
    log, _, clock = open_log()
    log.append(entry(b"hello", magic=0))
    log.flush()
    assert log.offsets_before(-1, 1) == [14]
    assert log.offsets_before(-1, 10) == [14, 0]
    assert log.offsets_before(-2, 10) == [0]
    assert log.offsets_before(-1, 0) == []
    assert log.offsets_before(-3, 10) == []
    with pytest.raises(ValueError):
        log.offsets_before(-1, -1)


def test_offsets_with_an_empty_last_segment_and_timestamps():
    log, fs, clock = open_log()
    assert log.offsets_before(-1, 10) == [0]  # empty log: [E] with E == 0
    log.append(entry(b"abc"))                 # 13 bytes, segment 0 mtime = T0
    clock.advance(1000)
    log.roll()                                # segment 13 created at T0 + 1000, empty
    assert log.offsets_before(-1, 10) == [13, 0]
    clock.advance(1000)
    log.append(entry(b"defg"))                # segment 13 mtime = T0 + 2000
    log.flush()
    now = T0 + 5000
    assert log.offsets_before(-1, 10, now) == [27, 13, 0]
    assert log.offsets_before(-2, 10, now) == [0]
    assert log.offsets_before(T0 - 1, 10, now) == []
    assert log.offsets_before(T0, 10, now) == [0]
    assert log.offsets_before(T0 + 1999, 10, now) == [0]
    assert log.offsets_before(T0 + 2000, 10, now) == [13, 0]
    assert log.offsets_before(T0 + 2000, 1, now) == [13]
    assert log.offsets_before(now, 10, now) == [27, 13, 0]


# -- retention (spec §7.4) -----------------------------------------------------------------


def make_segments(log, clock, sizes_payloads):
    for payload in sizes_payloads:
        log.append(entry(payload))
        log.roll()
        clock.advance(1000)


def test_time_rule_stops_at_the_first_young_segment():
    log, fs, clock = open_log(retention_ms=2500)
    make_segments(log, clock, [b"a", b"b", b"c", b"d"])  # mtimes T0, T0+1000, T0+2000, T0+3000
    fs.touch(log.segments.segments[1].path, clock() + 10)  # a young segment in the middle
    before = read_all(log, 22)
    assert log.apply_retention(T0 + 3000) == 1
    assert log.start_offset == 11
    assert not fs.exists(DIR + "/00000000000000000000.kafka")
    assert read_all(log, 22) == before
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10)


def test_size_rule_deletes_while_the_excess_covers_a_whole_segment():
    log, _, clock = open_log(retention_bytes=30, retention_ms=10**9)
    make_segments(log, clock, [b"a", b"bb", b"ccc"])  # sizes 11, 12, 13, then an empty segment
    # total 36, diff 6: the oldest segment (11 bytes) is larger than the excess
    assert log.apply_retention() == 0
    log.append(entry(b"dddd"))
    log.flush()  # total 50, diff 20: delete 11, then 12 > 9 stops
    assert log.apply_retention() == 1
    assert log.start_offset == 11


def test_size_limit_zero_deletes_everything_but_keeps_the_end():
    log, fs, clock = open_log(retention_bytes=0, retention_ms=10**9)
    make_segments(log, clock, [b"a", b"bb"])
    log.append(entry(b"ccc"))
    log.flush()
    end = log.visible_end
    assert log.apply_retention() == 3
    assert log.start_offset == log.visible_end == end
    assert fs.listdir(DIR) == [CHECKPOINT, "%020d.kafka" % end]


def test_deleted_segment_stays_readable_through_a_held_region():
    log, _, clock = open_log(retention_ms=500)
    log.append(entry(b"old data"))
    log.roll()
    region = log.read(0, 100)
    view = log.segments
    clock.advance(1000)
    log.append(entry(b"new"))
    log.flush()
    assert log.apply_retention() == 1
    assert region.read() == entry(b"old data")  # the reader's region still works
    assert view.segments[0].start == 0  # and its snapshot did not shift


def test_segment_list_is_copy_on_write():
    log, _, _ = open_log(segment_bytes=10)
    for i in range(3):
        log.append(entry(b"abcdef"))
    snapshot = log.segments
    segments = SegmentList(list(snapshot.segments))
    segments.drop_first(2)
    assert len(snapshot.segments) == 3 and len(segments) == 1


# -- fail-stop -----------------------------------------------------------------------------


def test_write_error_is_fail_stop():
    log, fs, _ = open_log()
    log.append(entry(b"kept"))
    log.flush()
    fs.inject_error("write")
    with pytest.raises(LogFailedError, match="append"):
        log.append(entry(b"lost"))
    for write in (lambda: log.append(entry(b"more")), log.flushing.begin_flush, log.flush, log.roll, log.apply_retention):
        with pytest.raises(LogFailedError):
            write()
    assert log.failure and "injected" in log.failure
    assert log.read(0, 100).read() == entry(b"kept")  # visible data stays readable


def test_fsync_error_is_fail_stop_and_visibility_does_not_advance():
    log, fs, _ = open_log()
    log.append(entry(b"data"))
    fs.inject_error("fsync")
    ticket = log.flushing.begin_flush()
    ticket.fsync()  # records the error instead of raising in the worker thread
    assert ticket.error is not None and not ticket.synced
    with pytest.raises(LogFailedError, match="fsync"):
        log.flushing.complete_flush(ticket)
    assert log.visible_end == 0
    with pytest.raises(LogFailedError):
        log.append(entry(b"x"))


def test_roll_error_is_fail_stop():
    log, fs, _ = open_log(segment_bytes=10)
    log.append(entry(b"abcdef"))
    fs.inject_error("fsync_dir")
    with pytest.raises(LogFailedError, match="roll"):
        log.append(entry(b"ghijkl"))
    assert len(log.segments.segments) == 1 and log.visible_end == 0


def test_retention_error_is_fail_stop():
    log, fs, clock = open_log(retention_ms=10)
    make_segments(log, clock, [b"a", b"b"])
    fs.inject_error("remove")
    with pytest.raises(LogFailedError, match="retention"):
        log.apply_retention()


# -- close --------------------------------------------------------------------------------


def test_close_refuses_while_an_fsync_runs_and_discards_abandoned_tickets():
    log, _, _ = open_log()
    log.append(entry(b"x"))
    ticket = log.flushing.begin_flush()
    segment_file = ticket.segment.file
    real_fsync = segment_file.fsync
    errors = []

    def fsync_that_races_close():
        try:
            log.close()
        except LogBusyError as exc:
            errors.append(exc)
        real_fsync()

    object.__setattr__(ticket.segment, "file", _Wrapped(segment_file, fsync_that_races_close))
    ticket.fsync()
    assert len(errors) == 1 and not log.closed
    log.close()  # the ticket finished but was never completed: close discards it
    assert log.closed
    with pytest.raises(LogError):
        log.flushing.complete_flush(ticket)
    with pytest.raises(LogClosedError):
        log.append(entry(b"y"))
    with pytest.raises(LogClosedError):
        log.read(0, 10)


class _Wrapped:
    def __init__(self, inner, fsync):
        self._inner, self.fsync = inner, fsync

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_retention_asks_for_a_roll_only_while_the_last_segment_holds_data():
    log, fs, clock = open_log(retention_ms=1000)
    log.append(entry(b"abcdef"))
    log.roll()  # the last segment is empty, and expires with the first
    clock.advance(5000)
    ticket = log.retention.begin(clock())
    ticket.stat()
    assert not log.retention.needs_roll(ticket)
    assert log.retention.drop(ticket) == 1
    ticket.remove()
    log.retention.complete(ticket)
    assert fs.mtime_ms(log.segments.segments[0].path) == clock()


def test_retention_rolls_a_last_segment_of_a_single_byte():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    fs.open_segment(DIR + "/00000000000000000000.kafka", create=True).append(b"\x00")
    log, _, _ = open_log(fs, clock, retention_ms=1000)  # a clean shutdown: no recovery cuts the byte
    assert log.end_offset == 1
    clock.advance(5000)
    ticket = log.retention.begin(clock())
    ticket.stat()
    assert log.retention.needs_roll(ticket)
    with pytest.raises(LogError, match="roll first"):
        log.retention.drop(ticket)  # a step out of order takes nothing
    log.roll()
    assert log.retention.drop(ticket) == 1
    ticket.remove()
    log.retention.complete(ticket)
    assert (log.start_offset, log.end_offset) == (1, 1)


def test_an_append_result_is_a_value():
    import dataclasses

    log, _, _ = open_log()
    result = log.append(entry(b"abc"))
    with pytest.raises(AttributeError):  # a NamedTuple: cheap to build on every append, and immutable
        result.base_offset = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        log.config.segment_bytes = 5  # a config is replaced whole (LogManager does on a topic change)


def test_a_roll_of_a_flushed_segment_does_not_call_the_visible_listeners():
    log, _, _ = open_log()
    calls = []
    log.add_visible_listener(calls.append)
    log.append(entry(b"abc"))
    log.flush()
    log.roll()
    assert calls == [log]


def test_the_default_config_takes_payloads_up_to_a_million_bytes():
    log, _, _ = open_log()
    log.append(entry(b"x" * 1_000_000))
    with pytest.raises(MessageSizeTooLargeError):
        log.append(entry(b"x" * 1_000_001))


def test_the_wall_clock_counts_milliseconds_since_the_epoch():
    import time

    from trikafka.log import wall_clock_ms

    before_ms = time.time_ns() // 1_000_000
    now_ms = wall_clock_ms()
    assert before_ms <= now_ms <= time.time_ns() // 1_000_000


def test_closing_a_log_retires_it_no_pass_lease_is_granted_after():
    log, _fs, _clock = open_log()
    assert not log.passes.retired
    log.close()
    assert log.passes.retired and log.passes.take() is None
