"""The cleaner on the fake file system (docs/protocol.md §11.3-§11.4)."""

from __future__ import annotations

import itertools
import random

import pytest

from tests.helpers.compaction import CrashingFileSystem, SimulatedCrash, check_valid_and_original, crash_run, log_bytes
from trikafka.log import Log, LogConfig, ManualClock
from trikafka.testing import FakeFileSystem
from trikafka.log.cleaner import CompactionPolicy, LogCleaner, parse_cleanup_policy
from trikafka.log.throttle import Throttler
from trikafka.wire import build_message_set, parse_entries
from trikafka.wire.compression import Codec
from trikafka.wire.keyed import build_keyed_set, encode_keyed_entry, iter_keyed_messages

DIR = "/logs/t-0"
T0 = 1_000_000
COMPACT = CompactionPolicy(compact=True, delete=False)


def open_log(fs, clock, **config):
    fs.makedirs(DIR)
    fs.fsync_dir("/")
    fs.fsync_dir("/logs")
    return Log.open(fs, DIR, "t", 0, LogConfig(**{"segment_bytes": 700, **config}), clock, True)


def fill(log, rounds=10, keys=5, value_bytes=24, original=None):
    original = {} if original is None else original
    for r in range(rounds):
        for k in range(keys):
            data = encode_keyed_entry(b"key-%d" % k, b"%d:%d:" % (k, r) + b"v" * value_bytes)
            original[log.append(data).base_offset] = data
    log.flush()
    log.roll()
    return original


def latest(messages):
    state = {}
    for m in messages:
        state[m.key] = None if m.tombstone else m.value
    return state


def clean(log, fs, clock, policy=COMPACT, **kwargs):
    result = LogCleaner(fs, clock, **kwargs).clean(log, policy)
    for segment in result.segments:
        assert log.install_cleaned(segment)
    return result


def test_cleaning_keeps_latest_values_offsets_and_bytes():
    clock = ManualClock(T0)
    fs = FakeFileSystem(1, clock)
    log = open_log(fs, clock)
    original = fill(log)
    before_state = latest(check_valid_and_original(log, original))
    _, before = log_bytes(log)
    result = clean(log, fs, clock)
    assert result.segments and result.padded_bytes > 0
    _, after = log_bytes(log)
    assert len(after) == len(before)
    messages = check_valid_and_original(log, original)
    assert latest(messages) == before_state
    assert len(messages) < 50
    # A second pass has nothing new to do.
    assert LogCleaner(fs, clock).dirty_ratio(log, COMPACT) == 0


def test_every_former_boundary_can_be_fetched():
    clock = ManualClock(T0)
    fs = FakeFileSystem(2, clock)
    log = open_log(fs, clock)
    original = fill(log)
    clean(log, fs, clock)
    retained = [m.offset for m in check_valid_and_original(log, original)]
    for y in sorted(original):
        position, data, first = walk_to_retained(log, y, 200)
        assert first.offset == min(o for o in retained if o >= y)
        assert data[first.offset - position:first.next_offset - position] == original[first.offset]


def walk_to_retained(log, y, fetch_bytes):
    """A 0.7 consumer's walk from ``y`` (§11.3.2): fetches of ``fetch_bytes`` get padding entries no
    longer than that (unless the run ends in them) until one holds a retained entry; the last
    fetch's position, its bytes and that first retained entry."""
    position = y
    while True:
        data = log.read(position, fetch_bytes).read()
        entries = parse_entries(data, position).entries
        assert entries, position
        real = [e for e in entries if e.message.attributes & 0x10 == 0]
        if real:
            return position, data, real[0]
        assert len(entries) == 1 and entries[0].next_offset - position <= max(fetch_bytes, 60), (y, position)
        position = entries[0].next_offset


def test_reopened_log_keeps_padding_index():
    clock = ManualClock(T0)
    fs = FakeFileSystem(3, clock)
    log = open_log(fs, clock)
    fill(log)
    clean(log, fs, clock)
    paddings = [s.padding for s in log.segments.segments]
    log.close()
    reopened = open_log(fs, clock)
    assert [s.padding for s in reopened.segments.segments] == paddings


def fill_with_tombstones(log, rounds):
    """``fill``, then a tombstone for each key and a last entry of another key, in a segment of their own."""
    original = fill(log, rounds=rounds)
    for k in range(5):
        data = encode_keyed_entry(b"key-%d" % k, None)
        original[log.append(data).base_offset] = data
    data = encode_keyed_entry(b"other", b"x" * 30)
    original[log.append(data).base_offset] = data  # the segment's last entry stays anyway
    log.flush()
    log.roll()
    return original


def test_tombstones_stay_for_delete_retention_then_go():
    clock = ManualClock(T0)
    fs = FakeFileSystem(4, clock)
    log = open_log(fs, clock)
    original = fill_with_tombstones(log, rounds=4)
    policy = CompactionPolicy(compact=True, delete=False, delete_retention_ms=1000)
    clean(log, fs, clock, policy)
    state = latest(check_valid_and_original(log, original))
    assert all(state[b"key-%d" % k] is None for k in range(5))  # tombstones seen
    clock.advance(2000)
    fs.touch(log.segments.segments[-1].path, clock())  # the active segment only
    clean(log, fs, clock, policy)  # nothing dirty: the checkpoint says so
    LogCleaner(fs, clock).write_checkpoint(DIR, 0)
    clean(log, fs, clock, policy)
    state = latest(check_valid_and_original(log, original))
    assert b"other" in state and all(b"key-%d" % k not in state for k in range(4))


def test_min_compaction_lag_keeps_the_head():
    clock = ManualClock(T0)
    fs = FakeFileSystem(5, clock)
    log = open_log(fs, clock)
    original = fill(log)
    result = clean(log, fs, clock, CompactionPolicy(compact=True, delete=False, min_compaction_lag_ms=10_000))
    assert result.segments == []
    assert len(check_valid_and_original(log, original)) == 50


def test_unkeyed_messages_and_mixed_wrappers_stay():
    clock = ManualClock(T0)
    fs = FakeFileSystem(6, clock)
    log = open_log(fs, clock, segment_bytes=100_000)
    original = {}
    for data in [build_message_set([b"unkeyed message payload"]),
                 build_keyed_set([(b"a", b"1" * 30), (b"b", b"2" * 30)], codec=Codec.GZIP),
                 encode_keyed_entry(b"a", b"3" * 30), encode_keyed_entry(b"b", b"4" * 30),
                 encode_keyed_entry(b"c", b"5" * 30)]:
        original[log.append(data).base_offset] = data
    log.flush()
    log.roll()
    clean(log, fs, clock)
    offsets = [m.offset for m in check_valid_and_original(log, original)]
    assert offsets[0] == 0  # unkeyed
    assert sorted(original)[1] not in offsets  # the wrapper: both its keys were superseded
    assert len(offsets) == 4


def test_short_entries_go_in_runs_and_short_runs_stay():
    clock = ManualClock(T0)
    fs = FakeFileSystem(7, clock)
    log = open_log(fs, clock, segment_bytes=100_000)
    original = fill(log, rounds=5, keys=3, value_bytes=0)  # entries of 25 bytes
    clean(log, fs, clock)
    retained = [m.offset for m in check_valid_and_original(log, original)]
    assert len(retained) == 3
    for y in sorted(original):  # within 30 bytes of a run's end: a short padding message
        position, data, first = walk_to_retained(log, y, 100)
        following = min(o for o in retained if o >= y)
        assert first.offset == following, y
        assert next(iter_keyed_messages(data, position)).offset == following
    # One obsolete 25-byte entry between two retained ones is too short to pad: it stays.
    log2 = open_log(FakeFileSystem(8, clock), clock, segment_bytes=100_000)
    fs2 = log2._fs
    original2 = {}
    for key, value in [(b"a", b""), (b"b", b""), (b"a", b""), (b"c", b"")]:
        data = encode_keyed_entry(key, value)
        original2[log2.append(data).base_offset] = data
    log2.flush()
    log2.roll()
    assert clean(log2, fs2, clock).segments == []


def test_throttle_paces_the_cleaner():
    clock = ManualClock(T0)
    fs = FakeFileSystem(8, clock)
    log = open_log(fs, clock)
    fill(log)
    now = [0.0]
    slept = []
    throttler = Throttler(1000, monotonic_s=lambda: now[0], sleep_s=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    clean(log, fs, clock, throttler=throttler)
    assert throttler.charged_bytes > 0
    assert sum(slept) == pytest.approx(throttler.charged_bytes / 1000)


def test_cleanup_policy_parsing():
    assert parse_cleanup_policy("compact") == (True, False)
    assert parse_cleanup_policy("compact,delete") == (True, True) == parse_cleanup_policy("delete+compact")
    with pytest.raises(ValueError):
        parse_cleanup_policy("shred")


def _crash_run(budget: int, seed: int):
    return crash_run(open_log, fill, COMPACT, budget, seed, T0)


def test_a_crash_at_any_change_recovers_old_or_new_segments():
    # Reference: the same pass without a crash.
    fs, clock, original, old, crashed, total = _crash_run(10**9, 0)
    assert not crashed
    new = [fs.read_file(f"{DIR}/{name}") for name in sorted(fs.listdir(DIR)) if name.endswith(".kafka")]
    assert new != old
    for budget in range(1, total + 1):
        for seed in range(3):
            fs, clock, original, old_b, crashed, _ = _crash_run(budget, seed)
            assert crashed
            log = open_log(fs, clock)
            for segment, before, after in zip(log.segments.segments, old_b, new):
                now = fs.read_file(segment.path)
                assert now in (before, after), (budget, seed, segment)
                assert bool(segment.padding) == (now == after and now != before), (budget, seed, segment)
            assert not [n for n in fs.listdir(DIR) if n.endswith((".cleaned", ".swap"))]
            check_valid_and_original(log, original)
            log.close()


class _DirEntryOutcomes:
    """A ``FakeFileSystem.crash`` rng whose ``random()`` draws (one per directory change not yet
    fsynced) come from ``mask``: bit i set keeps the i-th change, clear undoes it.  Every other
    draw (file contents) comes from a seeded ``random.Random``."""

    def __init__(self, mask: int, seed: int):
        self._mask, self._rest, self.draws = mask, random.Random(seed), 0

    def random(self) -> float:
        keep = self._mask >> self.draws & 1
        self.draws += 1
        return 0.0 if keep else 0.99

    def __getattr__(self, name):
        return getattr(self._rest, name)


def _recleaning_run(budget: int, mask: int, cleaned_before: bool):
    """A log cleaned (or not) once, then given newer values of every key so that a second pass
    widens the first pass's runs; that pass crashes at change ``budget`` and the crash keeps the
    unsynced directory changes chosen by ``mask``.  Returns the file system, the clock, the
    originals, each segment's bytes and padding runs before the pass, the crashing file system
    and the crash's rng."""
    clock = ManualClock(T0)
    fs = FakeFileSystem(11, clock)
    log = open_log(fs, clock)
    original = fill(log, rounds=4)
    if cleaned_before:
        clean(log, fs, clock)
    fill(log, rounds=4, original=original)
    old = {s.start: (fs.read_file(s.path), s.padding) for s in log.segments.segments}
    crashing = CrashingFileSystem(fs, budget)
    try:
        LogCleaner(crashing, clock).clean(log, COMPACT)
    except SimulatedCrash:
        pass
    rng = _DirEntryOutcomes(mask, budget)
    fs.crash("random", rng=rng)
    return fs, clock, original, old, crashing, rng


@pytest.mark.parametrize("cleaned_before", [False, True])
def test_any_unsynced_directory_changes_a_crash_keeps_leave_each_segment_with_its_own_padding(cleaned_before):
    # docs/protocol.md §11.4.2: each segment is old or new, and its padding index is that one's.
    fs, clock, original, old, crashing, _ = _recleaning_run(10**9, 0, cleaned_before)
    log = open_log(fs, clock)
    new = {s.start: (fs.read_file(s.path), s.padding) for s in log.segments.segments}
    log.close()
    assert any(new[start][0] != old[start][0] for start in old)
    for budget in range(1, crashing.changes + 1):
        mask, masks = 0, 1
        while mask < masks:
            fs, clock, original, old, _, rng = _recleaning_run(budget, mask, cleaned_before)
            masks = 1 << rng.draws
            log = open_log(fs, clock)
            for segment in log.segments.segments:
                now = fs.read_file(segment.path)
                assert now in (old[segment.start][0], new[segment.start][0]), (budget, mask, segment)
                expected = old[segment.start][1] if now == old[segment.start][0] else new[segment.start][1]
                assert segment.padding == expected, (budget, mask, segment)
            assert not [n for n in fs.listdir(DIR) if n.endswith((".cleaned", ".swap"))]
            check_valid_and_original(log, original)
            log.close()
            mask += 1


def test_retention_waits_for_cleaning_and_removes_padding_indexes():
    clock = ManualClock(T0)
    fs = FakeFileSystem(9, clock)
    log = open_log(fs, clock, retention_ms=1000)
    fill(log)
    clean(log, fs, clock)
    assert any(n.endswith(".padding") for n in fs.listdir(DIR))
    clock.advance(5000)
    log.cleaning = True
    assert log.apply_retention() == 0  # a pass is under way: retention waits
    log.cleaning = False
    assert log.apply_retention() > 0
    assert not any(n.endswith(".padding") for n in fs.listdir(DIR))
    assert log.visible_end == log.start_offset  # E kept, as 0.7 keeps it


def test_orphan_and_stale_padding_indexes_are_dropped_at_load():
    clock = ManualClock(T0)
    fs = FakeFileSystem(10, clock)
    log = open_log(fs, clock)
    fill(log)
    clean(log, fs, clock)
    first = log.segments.segments[0]
    log.close()
    fs.write_file(f"{DIR}/00000000000000999999.padding", b"orphan")
    fs.write_file(first.path, b"\x00" * first.size)  # the segment no longer matches its index
    reopened = open_log(fs, clock)
    assert not reopened.segments.segments[0].padding
    assert "00000000000000999999.padding" not in fs.listdir(DIR)
    assert "00000000000000000000.padding" not in fs.listdir(DIR)


async def test_a_synthesized_answer_goes_out_in_pieces_with_the_right_bytes():
    import trio
    import trio.testing

    from trikafka.broker.sendfile import FALLBACK_PIECE_BYTES, send_chunks
    from trikafka.wire.responses import ChunkSequence, encode_fetch_response

    clock = ManualClock(T0)
    fs = FakeFileSystem(11, clock)
    log = open_log(fs, clock, segment_bytes=4 << 20)
    fill(log, rounds=30, keys=10, value_bytes=10_000)  # a run of about 3 MB
    clean(log, fs, clock)
    answer = log.read(0, 8 << 20)  # a fetch larger than the run: one synthesized entry over all of it
    assert isinstance(answer, ChunkSequence) and len(answer) > 2 * FALLBACK_PIECE_BYTES
    expected = answer.read()
    sender, receiver = trio.testing.memory_stream_pair()
    received = bytearray()

    async def receive_all():
        while len(received) < 6 + len(expected):
            received.extend(await receiver.receive_some(1 << 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive_all)
        await send_chunks(sender, encode_fetch_response(0, answer))
    assert bytes(received[6:]) == expected
    first, second = parse_entries(expected, 0).entries[:2]
    assert first.message.attributes == 0x11 and second.offset == log.segments.segments[0].padding.ends[0]


def test_a_replicated_log_is_cleaned_only_in_segments_wholly_below_its_high_watermark():
    clock = ManualClock(T0)
    fs = FakeFileSystem(1, clock)
    log = open_log(fs, clock)
    fill(log)
    segments = log.segments.segments
    assert len(segments) > 3
    high_watermark = segments[2].start + 1  # inside the third segment
    log.cleanable_end = lambda: high_watermark
    start, _first_dirty, limit = LogCleaner(fs, clock).cleanable_range(log, COMPACT)
    assert (start, limit) == (segments[0].start, segments[2].start)
    result = clean(log, fs, clock)
    assert all(s.end <= high_watermark for s in result.segments)
    log.cleanable_end = None  # unreplicated: up to the active segment
    assert LogCleaner(fs, clock).cleanable_range(log, COMPACT)[2] == log.segments.segments[-1].start


ONE_DAY_MS = 24 * 3600 * 1000  # the documented default of delete.retention.ms


@pytest.mark.parametrize("age_ms, tombstones_kept", [(ONE_DAY_MS, True), (ONE_DAY_MS + 1, False)])
def test_tombstones_stay_for_one_day_by_default(age_ms, tombstones_kept):
    clock = ManualClock(T0)
    fs = FakeFileSystem(6, clock)
    log = open_log(fs, clock)
    original = fill_with_tombstones(log, rounds=2)
    for segment in log.segments.segments:
        fs.touch(segment.path, T0)
    clock.advance(age_ms)
    clean(log, fs, clock, CompactionPolicy(compact=True, delete=False))
    state = latest(check_valid_and_original(log, original))
    tombstones = [k for k in range(4) if b"key-%d" % k in state]  # key-4: pinned (its value ends a segment)
    assert tombstones == ([0, 1, 2, 3] if tombstones_kept else [])


def test_the_default_policy_is_cleanup_policy_delete():
    policy = CompactionPolicy()
    assert (policy.compact, policy.delete) == parse_cleanup_policy("delete")


def test_the_scan_reads_keys_of_entries_that_cross_its_read_chunks():
    from trikafka.log.clean_scan import SCAN_CHUNK_BYTES, scan_segment
    from trikafka.log.keymap import key_digest

    entries = [encode_keyed_entry(b"key-%d" % i, b"v" * 100_000) for i in range(SCAN_CHUNK_BYTES // 100_000 + 3)]
    data = b"".join(entries)
    fs = FakeFileSystem(7)
    fs.makedirs(DIR)
    fs.write_file(DIR + "/00000000000000000000.kafka", data)
    file = fs.open_segment(DIR + "/00000000000000000000.kafka", create=False)
    scanned = list(scan_segment(file, len(data), Throttler(0)))
    starts = [0, *itertools.accumulate(len(e) for e in entries)][:-1]
    assert [(e.position, e.size) for e in scanned] == [(start, len(e)) for start, e in zip(starts, entries)]
    assert [e.keys for e in scanned] == [((key_digest(b"key-%d" % i), False),) for i in range(len(entries))]


def test_the_key_map_holds_16_byte_digests():
    from trikafka.log.keymap import key_digest

    assert len(key_digest(b"k")) == len(key_digest(b"k" * 1000)) == 16  # the size ENTRY_BYTES budgets for
    assert key_digest(b"a") != key_digest(b"b")


def test_a_long_run_is_crossed_in_entries_no_longer_than_the_fetch():
    """§11.3.2: a 0.7 consumer with a 1 MiB fetch.size never gets a padding entry longer than that
    (a run of about 3 MB here), and its walk ends at the first retained entry."""
    clock = ManualClock(T0)
    fs = FakeFileSystem(12, clock)
    log = open_log(fs, clock, segment_bytes=4 << 20)
    original = fill(log, rounds=30, keys=10, value_bytes=10_000)
    clean(log, fs, clock)
    retained = [m.offset for m in check_valid_and_original(log, original)]
    position, data, first = walk_to_retained(log, 0, 1 << 20)
    assert position >= 2 << 20  # it took three fetches or more
    assert first.offset == min(retained)


@pytest.mark.parametrize("rest, max_bytes, entry", [
    (500, 500, 500), (500, 1000, 500),  # the rest fits: all of it
    (1000, 500, 500),  # in steps of the fetch size
    (510, 500, 480),  # leaving 30, the least a padding entry covers
    (100, 10, 60), (61, 10, 31),  # fetches under 60 bytes step by 60
])
def test_the_synthesized_entry_length(rest, max_bytes, entry):
    from trikafka.log.padding import synthesized_entry_bytes

    assert synthesized_entry_bytes(rest, max_bytes) == entry
