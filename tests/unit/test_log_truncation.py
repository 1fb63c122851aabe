"""Truncation at a message boundary and reads up to a given end (docs/protocol.md §12.11)."""

from __future__ import annotations

import logging

import pytest

from tests.helpers.compaction import CrashingFileSystem, SimulatedCrash
from trikafka.log import (
    CLEAN_SHUTDOWN_MARKER,
    Log,
    LogBusyError,
    LogConfig,
    LogFailedError,
    LogManager,
    ManualClock,
    OffsetOutOfRangeError,
    OsFileSystem,
)
from trikafka.log.checkpoint import CHECKPOINT_FILE_NAME, decode_checkpoint
from trikafka.log.truncation import clip_padding, walks_to
from trikafka.log.padding import NO_PADDING, PaddingRuns
from trikafka.testing import FakeFileSystem
from trikafka.testing.fakefs import CRASH_MODES
from trikafka.wire.messageset import build_message_set

DIR = "/logs/t-0"
T0 = 1_000_000


def open_log(fs, needs_recovery=False, **config):
    fs.makedirs(DIR)
    fs.fsync_dir("/")
    fs.fsync_dir("/logs")
    return Log.open(fs, DIR, "t", 0, LogConfig(**config), ManualClock(T0), needs_recovery)


def sets(count: int, tag: bytes = b"m", size: int = 20) -> list[bytes]:
    return [build_message_set([tag + b"%d-" % i + b"x" * size]) for i in range(count)]


def fill(log: Log, data: list[bytes], *, flush: bool = True, roll_every: int = 0) -> list[int]:
    """Append ``data``; returns the boundaries (each append's end)."""
    ends = []
    for i, s in enumerate(data):
        ends.append(log.append(s).next_offset)
        if roll_every and (i + 1) % roll_every == 0:
            log.roll()
    if flush:
        log.flush()
    return ends


def read_to(log: Log, end: int, offset: int | None = None) -> bytes:
    offset = log.start_offset if offset is None else offset
    out = b""
    while offset < end:
        chunk = log.read(offset, 1 << 20, end=end).read()
        out += chunk
        offset += len(chunk)
    return out


def segment_files(fs) -> list[str]:
    return [n for n in fs.listdir(DIR) if n.endswith(".kafka")]


# -- reads with end= ----------------------------------------------------------------------


def test_read_end_serves_unflushed_bytes_and_defaults_to_the_visible_end():
    fs = FakeFileSystem(0)
    log = open_log(fs)
    flushed = b"".join(sets(3))
    fill(log, sets(3))
    tail = b"".join(sets(2, b"t"))
    log.append(tail)
    assert (log.visible_end, log.end_offset) == (len(flushed), len(flushed) + len(tail))
    assert read_to(log, log.end_offset) == flushed + tail
    assert log.read(len(flushed), 1 << 20) is None  # the default is unchanged: the visible end
    assert log.read(len(flushed), 1 << 20, end=log.end_offset).read() == tail
    assert log.read(log.end_offset, 10, end=log.end_offset) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(len(flushed) + 1, 10)
    with pytest.raises(ValueError):
        log.read(0, 10, end=log.end_offset + 1)


def test_read_end_caps_a_region_inside_an_older_segment():
    fs = FakeFileSystem(0)
    log = open_log(fs)
    ends = fill(log, sets(6), roll_every=3)
    assert log.segments.starts == (0, ends[2], ends[5])
    cap = ends[1]  # a high watermark inside the first segment
    region = log.read(0, 1 << 20, end=cap)
    assert region.position == 0 and region.length == cap
    assert log.read(cap, 10, end=cap) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(ends[3], 10, end=cap)


def test_unflushed_bytes_are_readable_from_real_files(tmp_path):
    fs = OsFileSystem()
    path = str(tmp_path / "t-0")
    fs.makedirs(path)
    log = Log.open(fs, path, "t", 0, LogConfig(), ManualClock(T0), False)
    data = b"".join(sets(4))
    log.append(data)  # no flush: only in the page cache
    assert log.visible_end == 0
    assert log.read(0, 1 << 20, end=log.end_offset).read() == data
    log.truncate_to(len(sets(4)[0]))
    assert log.read(0, 1 << 20, end=log.end_offset).read() == sets(4)[0]
    assert (tmp_path / "t-0" / "00000000000000000000.kafka").stat().st_size == len(sets(4)[0])
    log.append(sets(4)[1])  # O_APPEND: the next write lands at the new end
    log.flush()
    assert (tmp_path / "t-0" / "00000000000000000000.kafka").read_bytes() == b"".join(sets(4)[:2])
    log.close()


# -- truncation ----------------------------------------------------------------------------


def test_truncating_the_unflushed_tail_then_appending_matches_a_log_without_it():
    fs = FakeFileSystem(1)
    log = open_log(fs)
    kept = sets(4)
    ends = fill(log, kept)
    log.append(b"".join(sets(3, b"cut")))
    log.truncate_to(ends[-1])
    assert (log.end_offset, log.visible_end) == (ends[-1], ends[-1])
    more = sets(2, b"new")
    fill(log, more)
    reference_fs = FakeFileSystem(2)
    reference = open_log(reference_fs)  # the same appends, without the cut tail
    ref_ends = fill(reference, kept + more)
    assert log.end_offset == ref_ends[-1]
    assert read_to(log, log.end_offset) == read_to(reference, reference.end_offset)
    assert fs.read_file(log.segments.segments[0].path) == reference_fs.read_file(
        reference.segments.segments[0].path)


def test_truncating_into_an_older_segment_drops_later_ones_and_reopens_it_for_appends():
    fs = FakeFileSystem(3)
    log = open_log(fs)
    data = sets(9)
    ends = fill(log, data, roll_every=3)
    assert len(log.segments.starts) == 4  # the last one empty
    offset = ends[1]  # inside the first segment
    log.truncate_to(offset)
    assert log.segments.starts == (0,)
    assert segment_files(fs) == ["00000000000000000000.kafka"]
    assert all(fs.is_durable_entry(f"{DIR}/{n}") for n in fs.listdir(DIR))
    assert not fs.exists(f"{DIR}/{ends[2]:020d}.kafka")
    assert (log.end_offset, log.visible_end) == (offset, offset)
    assert fs.durable_size(log.segments.segments[0].path) == offset
    result = log.append(data[2])
    assert result.base_offset == offset and result.next_offset == ends[2]
    log.flush()
    assert read_to(log, log.visible_end) == b"".join(data[:3])


def test_truncating_to_the_start_leaves_an_empty_active_segment():
    fs = FakeFileSystem(4)
    log = open_log(fs)
    fill(log, sets(3))
    log.truncate_to(0)
    assert (log.start_offset, log.visible_end, log.end_offset, log.segments.starts) == (0, 0, 0, (0,))
    assert log.read(0, 100) is None and log.read(0, 100, end=0) is None
    assert fs.read_file(log.segments.segments[0].path) == b""


def test_truncating_to_a_segment_start_empties_that_segment():
    fs = FakeFileSystem(5)
    log = open_log(fs)
    ends = fill(log, sets(6), roll_every=3)
    log.truncate_to(ends[2])  # the second segment's start
    assert log.segments.starts == (0, ends[2])
    assert log.segments.segments[-1].size == 0 and log.end_offset == ends[2]
    assert segment_files(fs) == ["00000000000000000000.kafka", f"{ends[2]:020d}.kafka"]


def test_truncating_after_retention_keeps_the_start():
    fs = FakeFileSystem(6)
    log = open_log(fs, retention_bytes=1)
    ends = fill(log, sets(6), roll_every=2)
    log.apply_retention()
    start = log.start_offset
    assert start > 0
    with pytest.raises(ValueError):
        log.truncate_to(start - 1)
    log.truncate_to(start)
    assert (log.start_offset, log.end_offset) == (start, start)
    assert ends  # the log kept its numbering: the next append goes at the start
    assert log.append(sets(1)[0]).base_offset == start


def test_offsets_outside_the_log_or_inside_an_entry_are_refused_and_change_nothing():
    fs = FakeFileSystem(7)
    log = open_log(fs)
    ends = fill(log, sets(5), roll_every=2)
    log.append(b"".join(sets(2, b"tail")))
    before = (log.segments.starts, log.end_offset, log.visible_end, fs.listdir(DIR))
    for bad in (-1, log.end_offset + 1):
        with pytest.raises(ValueError):
            log.truncation.begin(bad)
    for bad in (ends[0] + 1, ends[2] + 4, ends[3] - 3, log.end_offset - 1, log.visible_end + 2):
        with pytest.raises(ValueError, match="not a message boundary"):
            log.truncate_to(bad)
        assert (log.segments.starts, log.end_offset, log.visible_end, fs.listdir(DIR)) == before
    assert read_to(log, log.end_offset)[:ends[-1]] == b"".join(sets(5))
    log.append(sets(1)[0])  # still writable


def test_walks_to_reads_length_prefixes_in_chunks():
    fs = FakeFileSystem(8)
    log = open_log(fs)
    data = sets(5, size=50)
    ends = fill(log, data)
    file = log.segments.segments[0].file
    for chunk in (4, 7, 64, 1 << 20):
        assert all(walks_to(file, 0, end, chunk) for end in [0] + ends)
        assert not any(walks_to(file, 0, end + d, chunk) for end in ends[:-1] for d in (1, 3, 4, 5))
        assert walks_to(file, ends[1], ends[3], chunk)


def test_during_a_truncation_the_log_ends_at_the_cut_and_writes_wait():
    fs = FakeFileSystem(9)
    log = open_log(fs)
    ends = fill(log, sets(6), roll_every=3)
    log.append(b"".join(sets(2, b"tail")))
    ticket = log.truncation.begin(ends[1])
    assert (log.end_offset, log.visible_end, log.segments.starts) == (ends[1], ends[1], (0,))
    assert fs.exists(f"{DIR}/{ends[2]:020d}.kafka")  # nothing on disk yet
    with pytest.raises(LogBusyError):
        log.append(sets(1)[0])
    with pytest.raises(LogBusyError):
        log.flushing.begin_roll()
    with pytest.raises(LogBusyError):
        log.retention.begin(T0)
    assert log.flushing.begin_flush() is None  # the truncation fsyncs what it leaves
    assert log.apply_retention() == 0
    assert log.truncation.begin(ends[0]) is None
    assert log.read(0, 1 << 20, end=log.end_offset).read() == b"".join(sets(6)[:2])
    with pytest.raises(ValueError):
        log.read(0, 10, end=ends[2])
    ticket.run()
    log.truncation.complete(ticket)
    assert log.append(sets(1)[0]).base_offset == ends[1]


def test_busy_logs_return_none_and_the_idle_listener_says_when_to_retry():
    fs = FakeFileSystem(10)
    log = open_log(fs)
    ends = fill(log, sets(4))
    log.append(sets(1, b"u")[0])
    calls = []
    log.add_idle_listener(lambda lg: calls.append(lg.end_offset))
    flush = log.flushing.begin_flush()
    assert log.truncation.begin(ends[1]) is None
    noop = log.truncation.begin(log.end_offset)  # nothing to cut: allowed even now
    noop.run()
    log.truncation.complete(noop)
    flush.fsync()
    log.flushing.complete_flush(flush)
    assert len(calls) == 1
    roll = log.flushing.begin_roll()
    assert log.truncation.begin(ends[1]) is None
    roll.run()
    log.flushing.complete_roll(roll)
    assert len(calls) == 2
    retention = log.retention.begin(T0)
    assert log.truncation.begin(ends[1]) is None
    retention.stat()
    log.retention.drop(retention)
    retention.remove()
    log.retention.complete(retention)
    assert len(calls) == 3
    log.cleaning = True
    assert log.truncation.begin(ends[1]) is None
    log.cleaning = False
    assert len(calls) == 4
    ticket = log.truncation.begin(ends[1])
    ticket.run()
    log.truncation.complete(ticket)
    assert calls[-1] == ends[1] and len(calls) == 5
    log.append(sets(1, b"v")[0])
    log.flushing.begin_flush()
    with pytest.raises(LogBusyError):
        log.truncate_to(ends[0])  # the synchronous form raises where truncation.begin returns None


def test_visible_listeners_hear_the_cut_become_visible():
    fs = FakeFileSystem(11)
    log = open_log(fs)
    ends = fill(log, sets(3))
    log.append(b"".join(sets(3, b"n")))
    seen = []
    log.add_visible_listener(lambda lg: seen.append(lg.visible_end))
    cut = ends[-1] + len(sets(1, b"n")[0])
    log.truncate_to(cut)  # the truncation fsynced the byte before the cut
    assert seen == [cut] and log.unflushed_messages == 0


# -- durability: crashes, checkpoint, clean shutdown ----------------------------------------


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_after_a_truncation_never_brings_the_cut_bytes_back(mode, caplog):
    for seed in range(8):
        fs = FakeFileSystem(seed)
        log = open_log(fs, segment_bytes=60)
        ends = fill(log, sets(8))  # several segments (rolled on append)
        assert len(log.segments.starts) > 2
        log.append(b"".join(sets(2, b"unflushed")))
        cut = ends[2]
        log.truncate_to(cut)
        new = sets(2, b"after")
        log.append(new[0])  # unflushed: may be lost, never replaced by old bytes
        fs.crash(mode)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="trikafka.log"):
            log = open_log(fs, needs_recovery=True)
        # The checkpoint written at the cut is trusted: recovery scans only what came after it.
        assert "checkpoint not used" not in caplog.text
        assert log.end_offset in (cut, cut + len(new[0])), (mode, seed)
        recovered = read_to(log, log.end_offset)
        assert recovered[:cut] == b"".join(sets(8)[:3])
        if mode != "flip":  # a flipped attributes byte passes 0.7's payload CRC (see the recovery machine)
            assert recovered[cut:] == new[0][:log.end_offset - cut]


def test_recovery_trusts_the_checkpoint_written_at_the_cut():
    fs = FakeFileSystem(12)
    log = open_log(fs, segment_bytes=60)
    ends = fill(log, sets(8))
    cut = ends[3]
    log.truncate_to(cut)
    segment = log.segments.segments[-1]
    checkpoint = decode_checkpoint(fs.read_file(f"{DIR}/{CHECKPOINT_FILE_NAME}"))
    assert (checkpoint.segment_start, checkpoint.position) == (segment.start, cut - segment.start)
    fs.crash("keep_all")
    log = open_log(fs, needs_recovery=True)
    assert log.end_offset == cut


def test_a_crash_at_any_step_of_a_truncation_loads_a_consistent_log():
    # The process dies at the k-th change the truncation makes (k = 1, 2, ... until it
    # completes), then the machine: the log loads, contiguous, and holds the kept
    # bytes plus perhaps some of the cut ones, never a gap or foreign bytes.
    data = sets(8)
    unflushed = sets(1, b"u")[0]
    full = b"".join(data) + unflushed
    for seed in range(6):
        for cut_index in (0, 1, 4):
            for k in range(1, 100):
                fs = FakeFileSystem(seed)
                crashing = CrashingFileSystem(fs, budget=0)
                log = open_log(crashing, segment_bytes=60)
                ends = fill(log, data) + [log.append(unflushed).next_offset]
                cut = ends[cut_index]
                crashing.budget = crashing.changes + k
                try:
                    log.truncate_to(cut)
                    finished = True
                except SimulatedCrash:
                    finished = False
                fs.crash("random")
                log = open_log(fs, needs_recovery=True)
                end = log.end_offset
                assert end == cut if finished else end in [cut] + [e for e in ends if e > cut], (seed, k, end)
                assert read_to(log, end) == full[:end]
                if finished:
                    break
            assert finished and k > 4  # the truncation made several changes, each crashed at


def test_an_io_error_in_a_truncation_fails_the_log_and_recovery_loads_it():
    for op, where in [("remove", ".trikafka"), ("fsync_dir", DIR), ("remove", ".kafka"),
                      ("truncate", ".kafka"), ("fsync", ".kafka"), ("rename", ".trikafka")]:
        fs = FakeFileSystem(3)
        log = open_log(fs, segment_bytes=60)
        ends = fill(log, sets(8))
        fs.inject_error(op, where)
        ticket = log.truncation.begin(ends[2])
        ticket.run()
        assert ticket.error is not None, op
        with pytest.raises(LogFailedError):
            log.truncation.complete(ticket)
        with pytest.raises(LogFailedError):
            log.append(sets(1)[0])
        fs.crash("random")
        log = open_log(fs, needs_recovery=True)
        assert read_to(log, log.end_offset) == b"".join(sets(8))[:log.end_offset]
        assert log.end_offset >= ends[2]


def test_a_clean_shutdown_after_a_truncation_keeps_the_cut():
    clock = ManualClock(T0)
    fs = FakeFileSystem(13, clock)
    manager = LogManager("/logs", LogConfig(segment_bytes=60), fs, clock)
    manager.open()
    log = manager.get_or_create("t", 0)
    ends = fill(log, sets(8))
    log.truncate_to(ends[4])
    log.append(sets(1, b"z")[0])
    assert manager.close() is True
    assert fs.exists(f"/logs/{CLEAN_SHUTDOWN_MARKER}")
    fs.crash("random")
    manager = LogManager("/logs", LogConfig(segment_bytes=60), fs, clock)
    manager.open()
    log = manager.get("t", 0)
    assert not manager.recovered
    assert read_to(log, log.end_offset) == b"".join(sets(8)[:5]) + sets(1, b"z")[0]
    manager.close()


def test_closing_with_an_abandoned_truncation_leaves_the_files_whole():
    fs = FakeFileSystem(14)
    log = open_log(fs, segment_bytes=60)
    ends = fill(log, sets(8))
    log.truncation.begin(ends[1])
    log.close()
    log = open_log(fs, needs_recovery=True)
    assert log.end_offset == ends[-1]


# -- padding of a cleaned segment --------------------------------------------------------------


def test_clip_padding_keeps_the_runs_before_the_cut():
    runs = PaddingRuns.of([(0, 30), (50, 90), (120, 200)])
    assert clip_padding(runs, 100) == PaddingRuns.of([(0, 30), (50, 90)])
    assert clip_padding(runs, 70) == PaddingRuns.of([(0, 30), (50, 70)])
    assert clip_padding(runs, 0) == NO_PADDING


def test_truncating_a_cleaned_segment_clips_its_padding_runs_and_their_index():
    from trikafka.log.cleaner import CompactionPolicy, LogCleaner
    from trikafka.wire.keyed import encode_keyed_entry

    clock = ManualClock(T0)
    fs = FakeFileSystem(15, clock)
    fs.makedirs(DIR)
    log = Log.open(fs, DIR, "t", 0, LogConfig(segment_bytes=700), clock, False)
    for r in range(10):
        for k in range(5):
            log.append(encode_keyed_entry(b"key-%d" % k, b"%d:%d:" % (k, r) + b"v" * 24))
    log.flush()
    log.roll()
    for segment in LogCleaner(fs, clock).clean(log, CompactionPolicy(compact=True, delete=False)).segments:
        assert log.install_cleaned(segment)
    first = log.segments.segments[0]
    runs = first.padding
    cut = runs.ends[-1]  # where a retained entry starts: a boundary
    assert runs and cut < first.size
    before = {y: log.read(first.start + y, 200).read() for y in range(runs.starts[0], cut)}
    log.truncate_to(first.start + cut)
    assert log.segments.segments == (first,) and first.padding == clip_padding(runs, cut)
    for y, old in before.items():  # the same synthesized padding entry, now without the cut tail after it
        assert log.read(first.start + y, 200).read() == old[:cut - y]
    log.close()
    reopened = Log.open(fs, DIR, "t", 0, LogConfig(segment_bytes=700), clock, True)
    assert reopened.segments.segments[0].padding == clip_padding(runs, cut)


def open_clocked_log(**config) -> tuple[Log, ManualClock]:
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    return Log.open(fs, DIR, "t", 0, LogConfig(**config), clock, False), clock


def test_a_cut_to_an_empty_segment_restarts_the_roll_age_at_the_next_append():
    log, clock = open_clocked_log(roll_ms=1000)
    data = sets(3)
    log.append(data[0])
    log.roll()
    start = log.end_offset
    log.append(data[1])
    log.flush()
    clock.advance(5000)
    assert log.roll_due()
    log.truncate_to(start)
    assert not log.roll_due()
    log.append(data[2])
    clock.advance(1000)
    assert not log.roll_due()  # the age counts from this append, and is not past roll_ms yet
    clock.advance(1)
    assert log.roll_due()


def test_a_cut_that_keeps_bytes_keeps_the_roll_age():
    log, clock = open_clocked_log(roll_ms=1000)
    data = sets(2)
    cut = log.append(data[0]).next_offset
    log.append(data[1])
    log.flush()
    clock.advance(5000)
    log.truncate_to(cut)
    assert log.roll_due()
