"""Crash-truncation recovery as a Hypothesis state machine (spec §7.3).

Fault model, named after ``FakeFileSystem.crash`` modes: a machine crash keeps
any prefix of each file's unflushed bytes (``prefix``), or a prefix followed by
zeros (``zeros``) or stale garbage (``garbage``), or flips 1-3 bytes of the
unflushed tail (``flip``), or keeps everything (``keep_all``, a process crash);
directory entries made since the last directory fsync survive or vanish at
random.  Crashes also land between a roll and its completion (the roll's
directory fsync fails, then the machine dies).

The recovery checkpoint (``trikafka.log.checkpoint``) is in the model too:
flushes write it (the clock rule makes one due), and its faults are injected:
a torn, garbage, missing or stale checkpoint (naming another segment, a
position past the end of the file, or bytes that changed), and crashes
between a segment's fsync and its checkpoint write (the write fails at any of
its steps, then the machine dies).  The scan reads in small chunks
(``recovery_chunk_bytes``) so entries straddle chunk boundaries.

After each crash the log directory is reopened without the clean-shutdown
marker, so the newest segment is scanned (from a trusted checkpoint or from
byte 0) and truncated.  Invariants:

* the recovered log holds every entry that was flushed before the crash;
* it is an entry-aligned prefix of what was appended (for ``flip``: see below);
* every entry it holds passes the 0.7 checks (length, magic, CRC);
* recovering a second time changes nothing (recovery is idempotent);
* a checkpoint on disk never vouches for more than the fsynced bytes of the
  newest segment.

``flip`` is checked more weakly beyond the flushed end: Kafka 0.7's CRC covers
the payload only, so a flipped magic-1 attributes byte (the codec bits) is
undetectable in the 0.7 format.  There the recovered tail must still consist of
whole CRC-valid entries, but its bytes may differ from what was appended.
"""

from __future__ import annotations

import random
import zlib

from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.message_sets import MAX_MESSAGE_BYTES, corrupt, message_sets
from trikafka.log import LogConfig, LogFailedError, LogManager, ManualClock
from trikafka.log.checkpoint import (
    CHECKPOINT_BYTES,
    CHECKPOINT_FILE_NAME,
    CHECKPOINT_INTERVAL_MS,
    Checkpoint,
    CheckpointRejected,
    decode_checkpoint,
    encode_checkpoint,
)
from trikafka.testing import FakeFileSystem
from trikafka.testing.fakefs import CRASH_MODES
from trikafka.wire.errors import MessageError
from trikafka.wire.messageset import scan_valid_prefix, validate_message_set

ROOT = "/data"
CHECKPOINT = ROOT + "/t-0/" + CHECKPOINT_FILE_NAME


def entry_ends(data: bytes) -> list[int]:
    """Offsets just past each whole entry of a well-formed stream."""
    ends, pos = [], 0
    while pos + 4 <= len(data):
        pos += 4 + int.from_bytes(data[pos:pos + 4], "big", signed=True)
        ends.append(pos)
    assert pos == len(data), "the model only ever holds whole entries"
    return ends


class RecoveryMachine(RuleBasedStateMachine):
    """Append, flush, roll, crash, recover; the model is the appended stream and its flushed end."""

    @initialize(segment_bytes=st.sampled_from([100, 600, 5000, 1 << 20]),
                flush_every=st.sampled_from([1, 3, 1000]),
                chunk_bytes=st.sampled_from([9, 64, 333, 8 << 20]),
                seed=st.integers(0, 2**32 - 1))
    def start(self, segment_bytes, flush_every, chunk_bytes, seed):
        self.clock = ManualClock(1_000_000)
        self.fs = FakeFileSystem(seed, self.clock)
        self.rng = random.Random(seed)
        self.config = LogConfig(segment_bytes=segment_bytes, flush_interval_messages=flush_every,
                                max_message_size=MAX_MESSAGE_BYTES, recovery_chunk_bytes=chunk_bytes)
        self.stream = bytearray()  # every byte appended and not since lost to a crash
        self.flushed_end = 0  # of those, what a completed flush or roll made durable
        self.crashes = 0
        self.undetectable_flips_possible = False  # see the module docstring
        self.manager = None
        self._open()

    def _open(self) -> None:
        self.manager = LogManager(ROOT, self.config, self.fs, self.clock)
        self.manager.open()
        self.log = self.manager.get_or_create("t", 0)

    def teardown(self):
        if getattr(self, "manager", None) is not None:
            self.manager.close(clean=False)

    # -- writes -----------------------------------------------------------------------------

    @rule(data=message_sets())
    def append(self, data):
        self.clock.now_ms += 1
        result = self.log.append(data)
        assert result.base_offset == len(self.stream)
        self.stream += data
        if result.flush_due:
            self.flush()

    @rule(data=message_sets().filter(bool),
          how=st.sampled_from(["crc", "magic", "torn_first", "negative_length", "too_large"]),
          cut=st.integers(0, 10_000))
    def append_invalid(self, data, how, cut):
        bad = corrupt(data, how, cut)
        before = bytes(self.fs.read_file(self._newest_path()))
        try:
            self.log.append(bad)
        except MessageError:
            pass
        else:
            raise AssertionError(f"an invalid set ({how}) was accepted")
        assert self.fs.read_file(self._newest_path()) == before, "a refused set changed the log"

    @rule()
    def flush(self):
        self.log.flush()
        self.flushed_end = len(self.stream)
        assert self.log.visible_end == self.flushed_end

    @rule()
    def roll(self):
        if self.log.roll():
            self.flushed_end = len(self.stream)  # a roll fsyncs the old segment first

    @rule()
    def time_passes(self):
        self.clock.now_ms += CHECKPOINT_INTERVAL_MS  # the next flush writes a checkpoint

    # -- checkpoint faults ------------------------------------------------------------------

    @rule(how=st.sampled_from(["missing", "torn", "garbage", "other_segment", "past_the_end", "tail_changed"]),
          cut=st.integers(0, CHECKPOINT_BYTES - 1))
    def damage_checkpoint(self, how, cut):
        """Leave a checkpoint recovery must not trust (durably, as if written so)."""
        event(f"checkpoint {how}")
        newest = self.log.segments.segments[-1]
        if how == "missing":
            if self.fs.exists(CHECKPOINT):
                self.fs.remove(CHECKPOINT)
                self.fs.fsync_dir(ROOT + "/t-0")
            return
        if how == "torn":
            data = encode_checkpoint(Checkpoint(newest.start, 0, 0))[:cut]
        elif how == "garbage":
            data = self.rng.randbytes(CHECKPOINT_BYTES)
        elif how == "other_segment":
            data = encode_checkpoint(Checkpoint(newest.start + 1 + cut, 0, 0))
        elif how == "past_the_end":
            data = encode_checkpoint(Checkpoint(newest.start, newest.size + 1 + cut, 0))
        else:  # a CRC-valid checkpoint whose tail does not match the segment's bytes
            position = min(cut, newest.size)
            tail = newest.file.pread(position - min(position, 4096), min(position, 4096))
            data = encode_checkpoint(Checkpoint(newest.start, position, (zlib.crc32(tail) + 1) & 0xFFFFFFFF))
        self.fs.write_file(CHECKPOINT, data)

    @rule(op=st.sampled_from(["open", "write", "fsync", "rename", "fsync_dir"]),
          mode=st.sampled_from(CRASH_MODES + ("random",)))
    def crash_between_fsync_and_checkpoint(self, op, mode):
        """The segment's fsync succeeds, the checkpoint write fails at ``op``, the machine dies."""
        self.clock.now_ms += CHECKPOINT_INTERVAL_MS
        self.fs.inject_error(op, CHECKPOINT_FILE_NAME if op != "fsync_dir" else "t-0")
        self.log.flush()
        self.fs.clear_errors()
        self.flushed_end = len(self.stream)
        assert self.log.failure is None, "a failed checkpoint write must not fail the log"
        self._crash_and_recover(mode)

    @precondition(lambda self: len(self.stream) > self.log.visible_end)
    @rule(mode=st.sampled_from(CRASH_MODES + ("random",)))
    def crash_after_a_failed_data_fsync(self, mode):
        """The segment's fsync fails (the log stops), then the machine dies: no checkpoint may claim those bytes."""
        self.clock.now_ms += CHECKPOINT_INTERVAL_MS  # a checkpoint would be due
        self.fs.inject_error("fsync", ".kafka")
        try:
            self.log.flush()
        except LogFailedError:
            pass
        else:
            raise AssertionError("the injected fsync error was swallowed")
        self.a_checkpoint_vouches_only_for_fsynced_bytes()
        self._crash_and_recover(mode)

    # -- crashes ----------------------------------------------------------------------------

    @rule(mode=st.sampled_from(CRASH_MODES + ("random",)))
    def crash(self, mode):
        self._crash_and_recover(mode)

    @precondition(lambda self: len(self.stream) > self.log.segments.segments[-1].start)
    @rule(mode=st.sampled_from(CRASH_MODES + ("random",)))
    def crash_inside_a_roll(self, mode):
        # The roll fsyncs the old segment and creates the new one; its directory
        # fsync fails and the machine dies before anything else is made durable.
        self.fs.inject_error("fsync_dir", "t-0")
        try:
            self.log.roll()
        except Exception as exc:  # the roll fails: fail-stop, the log refuses writes
            note(f"roll failed as injected: {exc!r}")
            assert self.log.failure is not None
        else:
            raise AssertionError("the injected directory fsync error was swallowed")
        # Everything the old segment held was fsynced before the failed step.
        self.flushed_end = len(self.stream)
        self._crash_and_recover(mode)

    def _crash_and_recover(self, mode):
        event(f"crash mode {mode}")
        self.crashes += 1
        self.manager = None  # the process is gone; its handles die with it
        self.fs.crash(mode, self.rng)
        self._open()
        # Rejected checkpoints are removed at recovery: one left means the scan started from it.
        event("recovery from a checkpoint" if self.fs.exists(CHECKPOINT) else "recovery by a full scan")
        recovered = self._read_all()
        note(f"crash {mode}: appended {len(self.stream)}, flushed {self.flushed_end}, kept {len(recovered)}")
        assert len(recovered) >= self.flushed_end, "recovery lost flushed data"
        assert recovered[:self.flushed_end] == self.stream[:self.flushed_end], "flushed bytes changed"
        assert scan_valid_prefix(recovered) == len(recovered), "recovery kept an invalid entry"
        assert len(recovered) <= len(self.stream), "recovery invented data"
        if mode in ("flip", "random"):
            self.undetectable_flips_possible = True
        else:
            assert recovered == self.stream[:len(recovered)], "recovered log is not a prefix of the appended one"
            assert len(recovered) in [0, *entry_ends(bytes(self.stream))], "recovery cut inside an entry"
        # Idempotence: a second recovery over the recovered state changes nothing.
        starts = self.log.segments.starts
        self.manager.close(clean=False)
        self._open()
        assert self._read_all() == recovered and self.log.segments.starts == starts, "recovery is not idempotent"
        self.stream = bytearray(recovered)
        self.flushed_end = len(recovered)  # recovery fsyncs what it keeps
        assert self.log.visible_end == len(recovered) == self.log.end_offset

    # -- helpers and invariants -------------------------------------------------------------------

    def _newest_path(self) -> str:
        return self.log.segments.segments[-1].path

    def _read_all(self) -> bytes:
        """Every segment's bytes, oldest first (raw files: recovery, not reads, is under test)."""
        return b"".join(self.fs.read_file(s.path)[:s.size] for s in self.log.segments.segments)

    @invariant()
    def a_checkpoint_vouches_only_for_fsynced_bytes(self):
        if not self.fs.exists(CHECKPOINT):
            return
        try:
            checkpoint = decode_checkpoint(self.fs.read_file(CHECKPOINT))
        except CheckpointRejected:
            return  # damaged on purpose; recovery must not use it
        newest = self.log.segments.segments[-1]
        if checkpoint.segment_start == newest.start and self.fs.exists(newest.path):
            trusted = checkpoint.position <= self.fs.durable_size(newest.path)
            damaged = checkpoint.position > newest.size or checkpoint.tail_crc != zlib.crc32(
                newest.file.pread(checkpoint.position - checkpoint.tail_bytes, checkpoint.tail_bytes))
            assert trusted or damaged, (checkpoint, self.fs.durable_size(newest.path))

    @invariant()
    def segments_are_contiguous(self):
        segments = list(self.log.segments.segments)
        for older, newer in zip(segments, segments[1:]):
            assert older.start + older.size == newer.start, segments

    @invariant()
    def log_ends_where_the_model_does(self):
        if self.log.failure is None:
            assert self.log.end_offset == len(self.stream)
            assert self.log.visible_end <= self.log.end_offset

    @invariant()
    def every_stored_entry_is_valid(self):
        data = self._read_all()
        if self.undetectable_flips_possible:
            assert scan_valid_prefix(data) == len(data)
        elif data:
            validate_message_set(data, MAX_MESSAGE_BYTES)


RecoveryMachine.TestCase.settings = settings(
    max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=30, deadline=None
)
TestRecoveryStateMachine = RecoveryMachine.TestCase
