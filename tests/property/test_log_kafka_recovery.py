"""Kafka-format logs under appends, rolls, truncations, retention and crashes (docs/protocol.md §16.6).

A Hypothesis state machine over one v2 log on ``FakeFileSystem``: the leader
appends batches (keyed ones too, some with tombstones), the log flushes, rolls,
truncates at batch boundaries, applies size retention and is compacted
(§16.6.1: the cleaned segments' bytes replace the model's), and the machine crashes (``FakeFileSystem.crash``:
the unflushed tail of each file is cut, zero-filled or garbage; directory
entries not yet fsynced survive or vanish), then reopens with recovery.

The model is every byte ever appended (``stream``: byte offsets are never
reused, except after a truncation cut it) and how much of it is durable.
Invariants, after every step:

* the in-memory index agrees exactly with a fresh walk of the stored batches
  (base offset, position, running maximum of ``maxTimestamp``);
* logical offsets are dense: the batches number their records
  ``start_offset``, ``start_offset + 1``, ... up to ``next_offset``;
* the log's bytes are ``stream[start:end]``;
* after a crash the log keeps at least the flushed batches, ends at a batch
  boundary, and a second recovery changes nothing.

``flip`` (1-3 bytes of the unflushed tail flipped) is checked more weakly
beyond the flushed end: ``baseOffset`` and ``partitionLeaderEpoch`` lie
outside the batch's CRC (Kafka's format).  A batch whose base offset no
longer follows on is cut by the open (``index_segments``); a flipped leader
epoch, or the base offset of the log's very first batch, cannot be told
from the truth.  The kept tail must still be whole CRC-valid batches with
dense offsets.
"""

from __future__ import annotations

import random

from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.kafka_batches import make_batch
from trikafka.kafka.batch import is_padding, scan_valid_prefix, walk_headers
from trikafka.kafka.records import Record, build_batch
from trikafka.log import LogConfig, LogManager, ManualClock, OffsetAssignment
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.testing import FakeFileSystem
from trikafka.testing.fakefs import CRASH_MODES

ROOT = "/data"


class KafkaRecoveryMachine(RuleBasedStateMachine):
    """Append, flush, roll, truncate, retain, crash, recover; the model is the byte stream."""

    @initialize(segment_bytes=st.sampled_from([200, 700, 1 << 20]),
                retention_bytes=st.sampled_from([-1, 400, 1500]),
                chunk_bytes=st.sampled_from([13, 100, 8 << 20]),
                seed=st.integers(0, 2**32 - 1))
    def start(self, segment_bytes, retention_bytes, chunk_bytes, seed):
        self.clock = ManualClock(1_000_000)
        self.fs = FakeFileSystem(seed, self.clock)
        self.rng = random.Random(seed)
        self.config = LogConfig(segment_bytes=segment_bytes, retention_bytes=retention_bytes,
                                flush_interval_messages=1000, recovery_chunk_bytes=chunk_bytes,
                                record_format="v2")
        self.stream = bytearray()  # every byte appended, at its byte offset
        self.flushed_end = 0  # of those, what a flush, roll or truncation made durable
        self.manager = None
        self._open()

    def _open(self) -> None:
        self.manager = LogManager(ROOT, self.config, self.fs, self.clock)
        self.manager.open()
        self.log = self.manager.get_or_create("t", 0)

    def teardown(self):
        if getattr(self, "manager", None) is not None:
            self.manager.close(clean=False)

    # -- steps ------------------------------------------------------------------------------

    @rule(counts=st.lists(st.integers(1, 6), min_size=1, max_size=3),
          value_bytes=st.integers(0, 60), timestamp_ms=st.integers(0, 10_000),
          append_time=st.booleans(), keys=st.none() | st.lists(st.integers(0, 3), min_size=6, max_size=6))
    def append(self, counts, value_bytes, timestamp_ms, append_time, keys):
        self.clock.now_ms += 1
        data = bytearray()
        for k, count in enumerate(counts):
            if keys is None:
                data += make_batch([bytes([k]) * value_bytes] * count, base_timestamp_ms=timestamp_ms + 7 * k)
            else:  # keyed records; key 3 writes tombstones
                data += build_batch([Record(i, timestamp_ms + 7 * k, b"k%d" % keys[i],
                                            None if keys[i] == 3 else bytes([k]) * value_bytes)
                                     for i in range(count)], timestamp_ms=timestamp_ms)
        before = self.log.kafka_offsets.next_offset
        result = self.log.append(data, assign=OffsetAssignment(2, self.clock.now_ms if append_time else None))
        assert result.logical_offset == before and result.base_offset == len(self.stream)
        assert self.log.kafka_offsets.next_offset == before + sum(counts)
        self.stream += data  # as rewritten in place by the append

    @rule()
    def flush(self):
        self.log.flush()
        self.flushed_end = len(self.stream)

    @rule()
    def roll(self):
        if self.log.roll():
            self.flushed_end = len(self.stream)

    @rule(pick=st.integers(0, 1000))
    def truncate(self, pick):
        boundaries = [p for _, p, _ in self._walk()] + [self.log.end_offset]
        position = boundaries[pick % len(boundaries)]
        self.log.truncate_to(position)
        if position < len(self.stream):  # at the log end the truncation does nothing, fsyncs included
            del self.stream[position:]
            self.flushed_end = position  # a truncation fsyncs every byte it leaves
            event("truncation")

    @rule(drop_tombstones=st.booleans())
    def clean(self, drop_tombstones):
        policy = CompactionPolicy(compact=True, delete=False, delete_retention_ms=0 if drop_tombstones else 10**9)
        self.log.cleaning = True
        try:
            result = LogCleaner(self.fs, self.clock).clean(self.log, policy)
        finally:
            self.log.cleaning = False
        for segment in result.segments:
            assert self.log.install_cleaned(segment)
            cleaned = self.fs.read_file(segment.path)
            assert len(cleaned) == segment.size
            self.stream[segment.start:segment.end] = cleaned  # durable: the swap fsynced it
        if result.padded_bytes:
            event("cleaning padded bytes")

    @rule()
    def retention(self):
        if self.log.apply_retention():
            event("retention deleted segments")

    @precondition(lambda self: len(self.stream) > 0)
    @rule(mode=st.sampled_from(CRASH_MODES + ("random",)))
    def crash(self, mode):
        event(f"crash mode {mode}")
        start = self.log.start_offset
        self.manager = None  # the process is gone; its handles die with it
        self.fs.crash(mode, self.rng)
        self._open()
        end = self.log.end_offset
        note(f"crash {mode}: appended up to {len(self.stream)}, flushed {self.flushed_end}, kept {end}")
        assert self.log.start_offset == start, "retention's deletions are durable"
        assert self.flushed_end <= end <= len(self.stream), "recovery lost flushed bytes or invented some"
        stored = self._stored()
        if mode in ("flip", "random"):
            durable = max(self.flushed_end - start, 0)  # the flushed bytes retention kept (none: all deleted)
            assert stored[:durable] == bytes(self.stream[start:start + durable])
            assert scan_valid_prefix(stored) == len(stored), "recovery kept an invalid batch"
        else:
            assert stored == bytes(self.stream[start:end]), "recovery kept bytes that were not appended"
        walk = self._walk()
        index = self._indexed()
        self.manager.close(clean=False)
        self._open()
        assert self._walk() == walk and self._indexed() == index, "recovery is not idempotent"
        self.stream[start:] = stored
        self.flushed_end = end  # recovery fsyncs what it keeps

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def the_index_agrees_with_a_fresh_walk(self):
        assert self._indexed() == self._walk()
        for segment in self.log.segments.segments:  # padding runs: consecutive padding batches, merged
            runs: list[list[int]] = []
            for header in walk_headers(self.fs.read_file(segment.path)[:segment.size]):
                if is_padding(header):
                    if runs and runs[-1][1] == header.position:
                        runs[-1][1] = header.end
                    else:
                        runs.append([header.position, header.end])
            batches = segment.batches
            assert [list(r) for r in zip(batches.padding_starts, batches.padding_ends)] == runs

    @invariant()
    def offsets_are_dense(self):
        offsets = self.log.kafka_offsets
        expected = offsets.start_offset
        for segment in self.log.segments.segments:
            for header in walk_headers(segment.file.pread(0, segment.size)):
                assert header.base_offset == expected, (header, expected)
                expected = header.next_offset
        assert expected == offsets.next_offset

    @invariant()
    def the_log_holds_the_streams_bytes(self):
        assert self.log.end_offset == len(self.stream)
        assert self._stored() == bytes(self.stream[self.log.start_offset:])

    # -- helpers ----------------------------------------------------------------------------

    def _stored(self) -> bytes:
        return b"".join(self.fs.read_file(s.path)[:s.size] for s in self.log.segments.segments)

    def _walk(self) -> list[tuple[int, int, int]]:
        """``(base offset, byte position, running maximum of maxTimestamp)`` per stored batch."""
        walked = []
        for segment in self.log.segments.segments:
            running = None
            for header in walk_headers(self.fs.read_file(segment.path)[:segment.size]):
                running = header.max_timestamp_ms if running is None else max(running, header.max_timestamp_ms)
                walked.append((header.base_offset, segment.start + header.position, running))
        return walked

    def _indexed(self) -> list[tuple[int, int, int]]:
        return [(o, s.start + p, t) for s in self.log.segments.segments
                for o, p, t in zip(s.batches.offsets, s.batches.positions, s.batches.max_timestamps_ms)]


KafkaRecoveryMachine.TestCase.settings = settings(
    max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=30, deadline=None
)
TestKafkaRecoveryStateMachine = KafkaRecoveryMachine.TestCase
