"""Compaction of Kafka-format logs (docs/protocol.md §16.6.1): padding batches, the v2 scan,
the cleaner on a v2 log, its indexes, its fetch spans, and crashes during its swap."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.compaction import crash_run
from trikafka.kafka.batch import HEADER_BYTES, is_padding, padding_batch_head, scan_valid_prefix, walk_headers
from trikafka.kafka.records import Record, build_batch, decode_batches
from trikafka.log import Log, LogConfig, ManualClock, OffsetAssignment
from trikafka.log.batch_index import build_batch_index
from trikafka.log.clean_format import CLEAN_FORMATS
from trikafka.log.clean_scan import scan_batches
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.log.record_format import FORMAT_V2, write_record_format
from trikafka.log.throttle import Throttler
from trikafka.testing import FakeFileSystem

DIR = "/logs/t-0"
T0 = 1_000_000
COMPACT = CompactionPolicy(compact=True, delete=False)
DAY_MS = 24 * 3600 * 1000


# -- padding batches ------------------------------------------------------------------------


@given(run_bytes=st.integers(HEADER_BYTES, 20_000), offsets=st.integers(1, 300), max_bytes=st.integers(122, 3000))
@settings(max_examples=100, deadline=None)
def test_the_padding_of_a_run_covers_its_bytes_and_offsets_exactly(run_bytes, offsets, max_bytes):
    # A segment: the run [0, run_bytes) then the retained batch at offset 50 + offsets.
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    file = fs.open_segment("/f", create=True)
    file.append(padding_batch_head(50, 1, 7, HEADER_BYTES))  # the run's first batch: its epoch and base offset
    file.truncate(run_bytes)
    file.append(build_batch([b"x"], base_offset=50 + offsets))
    pieces = CLEAN_FORMATS["v2"].padding(file, 0, run_bytes, max_bytes)
    data = b"".join(head + bytes(n - len(head)) for head, n in pieces)
    headers = list(walk_headers(data))
    assert len(data) == run_bytes and sum(h.size for h in headers) == run_bytes
    assert headers[0].base_offset == 50 and headers[-1].next_offset == 50 + offsets
    assert all(a.next_offset == b.base_offset for a, b in zip(headers, headers[1:]))
    assert all(h.leader_epoch == 7 and is_padding(h) and h.last_offset_delta >= 0 for h in headers)
    assert all(h.size <= max(max_bytes, -(-run_bytes // offsets)) for h in headers)
    assert scan_valid_prefix(data) == run_bytes


# -- a v2 log to clean ----------------------------------------------------------------------


def open_log(fs, clock, **config):
    if not fs.exists(DIR):
        fs.makedirs(DIR)
        fs.fsync_dir("/")
        fs.fsync_dir("/logs")
        write_record_format(fs, DIR, FORMAT_V2)
    return Log.open(fs, DIR, "t", 0, LogConfig(**{"segment_bytes": 900, "record_format": "v2", **config}),
                    clock, True)


def produce(log, records: list[tuple[bytes | None, bytes | None]], epoch: int = 2) -> bytes:
    """One batch of ``(key, value)`` records, appended by the leader; the batch as stored."""
    data = bytearray(build_batch([Record(k, T0, key, value) for k, (key, value) in enumerate(records)],
                                 timestamp_ms=T0))
    result = log.append(data, assign=OffsetAssignment(epoch))
    return bytes(data), result


def fill(log, rounds=6, keys=4, tombstones=(), original=None):
    """``rounds`` of one batch per key; the keys in ``tombstones`` get a tombstone in the last round.
    ``original``: logical base offset -> stored batch bytes."""
    original = {} if original is None else original
    for r in range(rounds):
        for k in range(keys):
            key = b"key-%d" % k
            value = None if r == rounds - 1 and k in tombstones else b"%d:%d" % (k, r) + b"v" * 20
            data, result = produce(log, [(key, value)])
            original[result.logical_offset] = data
    log.flush()
    log.roll()
    return original


def stored_batches(log):
    """``(header, bytes)`` of every stored batch, in order, with its log byte position."""
    out = []
    for s in log.segments.segments:
        data = s.file.pread(0, s.size)
        out += [(h, data[h.position:h.end]) for h in walk_headers(data)]
    return out


def consumed(log):
    """``{key: value}`` and the retained batches' base offsets, read as a client reads a fetch from 0."""
    state, offsets = {}, []
    for header, data in stored_batches(log):
        if is_padding(header):
            continue
        offsets.append(header.base_offset)
        for record in next(decode_batches(data))[1]:
            state[record.key] = record.value
    return state, offsets


def check_index(log):
    """The index agrees with a fresh walk of every segment: offsets, positions, padding runs, times."""
    for s in log.segments.segments:
        fresh = build_batch_index(s.file, s.size, s.batches.start_offset if s is not log.segments.segments[0]
                                  else None)
        assert list(s.batches.offsets) == list(fresh.offsets), s
        assert list(s.batches.positions) == list(fresh.positions)
        assert list(s.batches.max_timestamps_ms) == list(fresh.max_timestamps_ms)
        assert (list(s.batches.padding_starts), list(s.batches.padding_ends)) == (
            list(fresh.padding_starts), list(fresh.padding_ends))
        assert s.batches.largest_timestamp_offset == fresh.largest_timestamp_offset


def clean(log, fs, clock, policy=COMPACT, **kwargs):
    result = LogCleaner(fs, clock, **kwargs).clean(log, policy)
    for segment in result.segments:
        assert log.install_cleaned(segment)
    return result


def test_the_v2_scan_reads_keys_tombstones_and_padding():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    log = open_log(fs, clock, segment_bytes=1 << 20)
    produce(log, [(b"a", b"1"), (b"b", None)])
    produce(log, [(b"a", b"2"), (None, b"unkeyed")])
    log.flush()
    segment = log.segments.segments[0]
    entries = list(scan_batches(segment.file, segment.size, Throttler(0)))
    assert [e.padding for e in entries] == [False, False]
    assert [t for _, t in entries[0].keys] == [False, True]
    assert entries[1].keys is None  # a null key: never removable
    assert entries[1].position == entries[0].size
    data = padding_batch_head(0, 2, 0, 100) + bytes(40)
    fs2 = FakeFileSystem(0, clock)
    file = fs2.open_segment("/p", create=True)
    file.append(data)
    assert list(scan_batches(file, 100, Throttler(0)))[0][2:] == (True, ())


def test_cleaning_a_v2_log_keeps_offsets_latest_values_and_a_dense_index():
    clock = ManualClock(T0)
    fs = FakeFileSystem(1, clock)
    log = open_log(fs, clock)
    original = fill(log)
    before_state, before_offsets = consumed(log)
    next_offset = log.kafka_offsets.next_offset
    result = clean(log, fs, clock)
    assert result.segments and result.padded_bytes > 0
    state, offsets = consumed(log)
    assert state == before_state == {b"key-%d" % k: b"%d:5" % k + b"v" * 20 for k in range(4)}
    assert len(offsets) < len(before_offsets) and set(offsets) <= set(before_offsets)
    for header, data in stored_batches(log):  # every retained batch at its offset, byte for byte
        assert is_padding(header) or original[header.base_offset] == data
    headers = [h for h, _ in stored_batches(log)]
    assert all(a.next_offset == b.base_offset for a, b in zip(headers, headers[1:]))  # dense
    assert log.kafka_offsets.next_offset == next_offset
    assert not [n for n in fs.listdir(DIR) if n.endswith(".padding")]  # derived, not stored
    check_index(log)
    log.close()
    reopened = open_log(fs, clock)
    assert consumed(reopened) == (state, offsets)
    check_index(reopened)
    assert sum(s.batches.padded_bytes for s in reopened.segments.segments) > 0


def test_tombstones_go_after_the_horizon_and_stay_before_it():
    clock = ManualClock(T0)
    fs = FakeFileSystem(2, clock)
    log = open_log(fs, clock, segment_bytes=1 << 20)  # no older value of keys 1 and 2 ends a segment
    fill(log, tombstones=(1, 2))
    fill(log, rounds=1, keys=1)  # a newer segment, so the tombstones' segments are cleanable
    clean(log, fs, clock)
    state, _ = consumed(log)
    assert state[b"key-1"] is None and state[b"key-2"] is None  # within delete.retention.ms
    clock.advance(2 * DAY_MS)
    fill(log, rounds=1, keys=1)
    clean(log, fs, clock, policy=CompactionPolicy(compact=True, delete=False, min_cleanable_dirty_ratio=0.0))
    state, offsets = consumed(log)
    assert b"key-1" not in state and b"key-2" not in state
    assert state[b"key-0"] and state[b"key-3"] == b"3:5" + b"v" * 20
    assert offsets == sorted(offsets)
    check_index(log)


def test_a_batch_with_an_unkeyed_record_stays():
    clock = ManualClock(T0)
    fs = FakeFileSystem(3, clock)
    log = open_log(fs, clock)
    kept, kept_result = produce(log, [(b"a", b"old"), (None, b"no key")])
    fill(log)
    clean(log, fs, clock)
    assert any(data == kept for _, data in stored_batches(log))
    state, offsets = consumed(log)
    assert kept_result.logical_offset in offsets and state[b"a"] == b"old"  # the batch holding it stays


def test_time_lookups_never_answer_padding_and_the_largest_timestamp_is_retained():
    clock = ManualClock(T0)
    fs = FakeFileSystem(4, clock)
    log = open_log(fs, clock)
    fill(log)
    clean(log, fs, clock)
    kafka = log.kafka_offsets
    for t in (0, T0, T0 + 1):
        found = kafka.offset_for_time(t)
        if found is not None:
            header = next(h for h, _ in stored_batches(log) if h.base_offset == found[0])
            assert not is_padding(header) and found[1] == header.max_timestamp_ms
    offset, ts = kafka.max_timestamp()
    assert ts == T0


# -- fetch spans ----------------------------------------------------------------------------


def test_retained_spans_leave_padding_out_within_the_budget():
    clock = ManualClock(T0)
    fs = FakeFileSystem(5, clock)
    log = open_log(fs, clock, segment_bytes=1 << 20)
    fill(log, rounds=4, keys=2)  # one segment of 8 batches, then an empty active one
    clean(log, fs, clock)
    segment = log.segments.segments[0]
    batches = segment.batches
    runs = list(zip(batches.padding_starts, batches.padding_ends))
    assert runs
    retained = [(p, e) for p, e in zip(batches.positions, list(batches.positions[1:]) + [batches.size_bytes])
                if not any(a <= p < b for a, b in runs)]
    kafka = log.kafka_offsets
    spans = kafka.retained_spans(0, 1 << 20, segment.end)
    covered = [(a, b) for a, b in retained]
    assert sum(b - a for a, b in spans) == sum(b - a for a, b in covered)
    assert all(not any(a < rb and ra < b for ra, rb in runs) for a, b in spans)  # no padding byte sent
    assert spans == sorted(spans)
    # Inside a run: the first retained batch after it.
    a, b = runs[0]
    inside = kafka.position_of(batches.offsets[list(batches.positions).index(a)])
    assert kafka.retained_spans(inside, 1, segment.end) == [next((p, e) for p, e in retained if p >= b)]
    # A budget counts only sent bytes: exactly the first two retained batches.
    first_two = retained[0][1] - retained[0][0] + retained[1][1] - retained[1][0]
    assert sum(y - x for x, y in kafka.retained_spans(0, first_two, segment.end)) == first_two
    assert sum(y - x for x, y in kafka.retained_spans(0, first_two - 1, segment.end)) == (
        retained[0][1] - retained[0][0])


# -- crashes ---------------------------------------------------------------------------------


def _crash_run(budget: int, seed: int):
    return crash_run(open_log, fill, COMPACT, budget, seed, T0)


def test_a_crash_at_any_change_of_a_v2_pass_leaves_old_or_new_segments_indexed_from_their_bytes():
    fs, clock, original, old, crashed, total = _crash_run(10**9, 0)
    assert not crashed
    new = [fs.read_file(f"{DIR}/{name}") for name in sorted(fs.listdir(DIR)) if name.endswith(".kafka")]
    assert new != old
    for budget in range(1, total + 1):
        for seed in range(2):
            fs, clock, original, old_b, crashed, _ = _crash_run(budget, seed)
            assert crashed
            log = open_log(fs, clock)
            for segment, before, after in zip(log.segments.segments, old_b, new):
                assert fs.read_file(segment.path) in (before, after), (budget, seed, segment)
            assert not [n for n in fs.listdir(DIR) if n.endswith((".cleaned", ".swap", ".padding"))]
            for header, data in stored_batches(log):
                assert is_padding(header) or original[header.base_offset] == data
            check_index(log)
            log.close()


def test_a_follower_appends_the_leaders_cleaned_bytes_verbatim():
    clock = ManualClock(T0)
    fs = FakeFileSystem(6, clock)
    leader = open_log(fs, clock)
    fill(leader)
    clean(leader, fs, clock)
    data = b"".join(s.file.pread(0, s.size) for s in leader.segments.segments)
    fs2 = FakeFileSystem(7, clock)
    follower = open_log(fs2, clock, segment_bytes=1 << 20)
    follower.append(data)
    follower.flush()
    assert follower.segments.segments[0].file.pread(0, len(data)) == data
    assert consumed(follower) == consumed(leader)
    assert follower.kafka_offsets.next_offset == leader.kafka_offsets.next_offset
    check_index(follower)


def test_random_rounds_of_cleaning_keep_the_latest_value_of_every_key():
    rng = random.Random(11)
    clock = ManualClock(T0)
    fs = FakeFileSystem(8, clock)
    log = open_log(fs, clock, segment_bytes=600)
    latest: dict[bytes, bytes | None] = {}
    for _ in range(6):
        for _ in range(12):
            records = [(b"k%d" % rng.randrange(6), rng.choice([None, b"v%d" % rng.randrange(100)]))
                       for _ in range(rng.randrange(1, 4))]
            produce(log, records)
            latest.update(records)
        log.flush()
        log.roll()
        clean(log, fs, clock, policy=CompactionPolicy(compact=True, delete=False, delete_retention_ms=DAY_MS))
        state, offsets = consumed(log)
        assert {k: v for k, v in state.items()} == {k: v for k, v in latest.items()}
        assert offsets == sorted(offsets)
        check_index(log)
