"""Compaction as a Hypothesis state machine on the fake file system (docs/protocol.md §11).

Model: every entry appended (offset -> bytes, its keys, append time) and, per key, the
latest value (None for a tombstone).  Rules append keyed, unkeyed and compressed
entries, roll, let time pass, clean with random policies, crash the machine at a
random change of a cleaning pass and recover, and reopen.  Invariants, after every step:

* the whole log from ``S`` parses as valid 0.7 entries, as a plain 0.7 reader
  iterates it, and every non-padding entry is an original entry at its original
  offset with its original bytes (so order and offsets never change);
* a reader from the start sees the final state of every key: the latest value, or
  for a deleted key its tombstone or nothing at all (never an older value);
* tombstones younger than ``delete.retention.ms`` at the last pass are still there,
  and so is everything in the active segment (the head);
* a fetch at any original entry boundary returns the retained messages from there
  on, starting with the first retained entry at or after it;
* a crash at a random change of a pass recovers segments that are each the old bytes or
  a whole cleaned copy (padding where entries were, original bytes elsewhere), never a
  mix; ``tests/unit/test_log_cleaner.py`` checks every change point against the exact
  old and new bytes.
"""

from __future__ import annotations

from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.compaction import CrashingFileSystem, SimulatedCrash, check_valid_and_original
from trikafka.log import Log, LogConfig, ManualClock
from trikafka.testing import FakeFileSystem
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.wire import build_message_set, parse_entries
from trikafka.wire.compression import Codec
from trikafka.wire.errors import MessageSizeTooLargeError
from trikafka.wire.keyed import build_keyed_set, encode_keyed_entry, iter_keyed_messages

DIR = "/data/t-0"
KEYS = [b"k%d" % i for i in range(6)] + [b"a-much-longer-key-%d" % i for i in range(2)]
values = st.one_of(st.none(), st.binary(max_size=40))


class CleanerMachine(RuleBasedStateMachine):

    @initialize(segment_bytes=st.sampled_from([150, 400, 2000]), seed=st.integers(0, 2**32 - 1),
                max_message_size=st.sampled_from([120, 1_000_000]))
    def start(self, segment_bytes, seed, max_message_size):
        self.clock = ManualClock(1_000_000)
        self.fs = FakeFileSystem(seed, self.clock)
        self.fs.makedirs(DIR)
        self.fs.fsync_dir("/")
        self.fs.fsync_dir("/data")
        self.config = LogConfig(segment_bytes=segment_bytes, flush_interval_messages=1,
                                max_message_size=max_message_size)
        self.original: dict[int, bytes] = {}
        self.appended_ms: dict[int, int] = {}
        self.latest: dict[bytes, bytes | None] = {}
        self.tombstone_guard: dict[int, bytes] = {}  # tombstones that must still be there
        self.log = self._open()

    def _open(self) -> Log:
        return Log.open(self.fs, DIR, "t", 0, self.config, self.clock, True)

    def teardown(self):
        if getattr(self, "log", None) is not None:
            self.log.close()

    def _append(self, data: bytes, items) -> None:
        if not data:
            return
        try:
            result = self.log.append(data)
        except MessageSizeTooLargeError:
            return  # a wrapper over a small max.message.size: refused, nothing appended
        self.log.flush()  # the model holds flushed data only: a crash never loses it
        self.original[result.base_offset] = data
        self.appended_ms[result.base_offset] = self.clock()
        for key, value in items:
            self.latest[key] = value

    @rule(key=st.sampled_from(KEYS), value=values)
    def append_keyed(self, key, value):
        self._append(encode_keyed_entry(key, value), [(key, value)])

    @rule(items=st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=4))
    def append_wrapper(self, items):
        self._append(build_keyed_set(items, codec=Codec.GZIP), items)

    @rule(payload=st.binary(max_size=30))
    def append_unkeyed(self, payload):
        self._append(build_message_set([payload]), [])

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.integers(1, 5000))
    def tick(self, ms):
        self.clock.advance(ms)

    def _policy(self, lag_ms, retention_ms):
        return CompactionPolicy(compact=True, delete=False, min_compaction_lag_ms=lag_ms,
                                delete_retention_ms=retention_ms)

    def _guard_tombstones(self, retention_ms):
        # Tombstones still in the log and younger than the horizon must survive this pass.
        present = {m.offset for m in check_valid_and_original(self.log, self.original)}
        horizon = self.clock() - retention_ms
        last_for_key = {}
        for offset in sorted(self.original):
            for m in iter_keyed_messages(self.original[offset], offset):
                if m.key is not None:
                    last_for_key[m.key] = (offset, m.tombstone)
        for key, (offset, tombstone) in last_for_key.items():
            if tombstone and self.appended_ms[offset] >= horizon and offset in present:
                self.tombstone_guard[offset] = key

    @rule(lag_ms=st.sampled_from([0, 0, 3000]), retention_ms=st.sampled_from([0, 2000, 10**9]),
          budget_bytes=st.sampled_from([1 << 20, 256]))
    def clean(self, lag_ms, retention_ms, budget_bytes):
        self.tombstone_guard.clear()
        self._guard_tombstones(retention_ms)
        result = LogCleaner(self.fs, self.clock, dedupe_buffer_bytes=budget_bytes).clean(
            self.log, self._policy(lag_ms, retention_ms))
        for segment in result.segments:
            assert self.log.install_cleaned(segment)
        note(f"cleaned {len(result.segments)} segment(s), padded {result.padded_bytes}")

    @rule(budget=st.integers(1, 60), retention_ms=st.sampled_from([0, 10**9]), data=st.data())
    def crash_while_cleaning(self, budget, retention_ms, data):
        self.tombstone_guard.clear()
        self._guard_tombstones(retention_ms)
        before = {s.start: self.fs.read_file(s.path) for s in self.log.segments.segments}
        crashing = CrashingFileSystem(self.fs, budget)
        after = {}
        try:
            result = LogCleaner(crashing, self.clock).clean(self.log, self._policy(0, retention_ms))
            after = {s.start: s.file.pread(0, s.size) for s in result.segments}
        except SimulatedCrash:
            pass
        self.log = None
        self.fs.crash(data.draw(st.sampled_from(["random", "keep_all", "prefix"])))
        self.log = self._open()
        for segment in self.log.segments.segments:
            now = self.fs.read_file(segment.path)
            if segment.start in before:
                assert now == before[segment.start] or segment.start not in after or now == after[segment.start] \
                    or _is_cleaned_copy(now, before[segment.start], self.original, segment.start)

    @rule()
    def reopen(self):
        self.log.close()
        self.log = self._open()

    @invariant()
    def log_is_valid_and_final_state_is_right(self):
        if getattr(self, "log", None) is None:
            return
        messages = check_valid_and_original(self.log, self.original)
        seen: dict[bytes, bytes | None] = {}
        for m in messages:
            if m.key is not None:
                seen[m.key] = None if m.tombstone else m.value
        for key, value in self.latest.items():
            if value is None:
                assert seen.get(key) is None, key  # a tombstone, or nothing at all
            else:
                assert seen.get(key) == value, key
        retained = {m.offset for m in messages}
        for offset, key in self.tombstone_guard.items():
            assert offset in retained, (offset, key)
        active = self.log.segments.segments[-1]
        for offset in self.original:
            if offset >= active.start:
                assert offset in retained or not list(iter_keyed_messages(self.original[offset])), offset

    @invariant()
    def every_former_boundary_fetches_the_retained_messages_from_there(self):
        if getattr(self, "log", None) is None:
            return
        retained = sorted(m.offset for m in check_valid_and_original(self.log, self.original))
        start, end = self.log.start_offset, self.log.visible_end
        for y in sorted(self.original):
            if not start <= y < end:
                continue
            region = self.log.read(y, 1 << 20)
            data = region.read()
            got = [m.offset for m in iter_keyed_messages(data[:parse_entries(data, y).valid_bytes], y)]
            expected = [o for o in retained if o >= y]
            assert got == expected[:len(got)] and got, (y, got[:3], expected[:3])


def _is_cleaned_copy(now: bytes, before: bytes, original: dict[int, bytes], start: int) -> bool:
    # A pass that crashed after its swap but before returning: a whole cleaned copy.
    if len(now) != len(before):
        return False
    for entry in parse_entries(now, start).entries:
        raw = now[entry.offset - start:entry.next_offset - start]
        if entry.message.attributes != 0x11 and original.get(entry.offset) != raw:
            return False
    return True


CleanerMachine.TestCase.settings = settings(
    max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=40, deadline=None)
TestCleanerMachine = CleanerMachine.TestCase
