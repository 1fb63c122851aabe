"""The recovery checkpoint: its bytes, when it is written, and when recovery trusts it."""

import itertools
import logging

import pytest

from trikafka.log import Log, LogConfig, ManualClock
from trikafka.testing import FakeFileSystem
from trikafka.log.checkpoint import (
    CHECKPOINT_BYTES,
    CHECKPOINT_FILE_NAME,
    CHECKPOINT_TEMP_NAME,
    Checkpoint,
    CheckpointRejected,
    RecoveryCheckpointer,
    decode_checkpoint,
    encode_checkpoint,
)
from trikafka.wire.crc import crc32
from trikafka.wire.messageset import build_message_set

DIR = "/logs/t-0"
SEG0 = DIR + "/00000000000000000000.kafka"
CHECKPOINT = DIR + "/" + CHECKPOINT_FILE_NAME


def entries(n: int, size: int = 100) -> bytes:
    return build_message_set([bytes([65 + i % 26]) * size for i in range(n)])


ENTRY = len(entries(1))


def open_log(fs, clock=None, needs_recovery=True):
    return Log.open(fs, DIR, "t", 0, LogConfig(), clock or ManualClock(0), needs_recovery)


def flushed_log(fs, n=100):
    """A log of ``n`` flushed entries whose flush wrote a checkpoint at its end."""
    fs.write_file(SEG0, b"")
    log = open_log(fs, needs_recovery=False)
    log.append(entries(n))
    log.flush()
    assert decode_checkpoint(fs.read_file(CHECKPOINT)).position == n * ENTRY
    return log


# -- the bytes ---------------------------------------------------------------------------------

def test_encoding_is_the_documented_34_bytes():
    data = encode_checkpoint(Checkpoint(segment_start=0x0102, position=5000, tail_crc=0xAABBCCDD))
    assert len(data) == CHECKPOINT_BYTES == 34
    assert data[:4] == b"TKRC" and data[4:6] == b"\x00\x01"
    assert data[6:14] == (0x0102).to_bytes(8, "big") and data[14:22] == (5000).to_bytes(8, "big")
    assert data[22:26] == (4096).to_bytes(4, "big") and data[26:30] == bytes.fromhex("AABBCCDD")
    assert data[30:] == crc32(data[:30]).to_bytes(4, "big")
    assert decode_checkpoint(data) == Checkpoint(0x0102, 5000, 0xAABBCCDD)
    assert encode_checkpoint(Checkpoint(7, 10, 0))[22:26] == (10).to_bytes(4, "big")  # tail = min(position, 4096)


def test_torn_and_garbage_checkpoints_are_rejected():
    data = encode_checkpoint(Checkpoint(0, 5000, 1))
    for cut in range(len(data)):
        with pytest.raises(CheckpointRejected):
            decode_checkpoint(data[:cut])
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x10
        with pytest.raises(CheckpointRejected):
            decode_checkpoint(bytes(flipped))
    with pytest.raises(CheckpointRejected):
        decode_checkpoint(data + b"\x00")


@pytest.mark.parametrize("header", [b"TKRX\x00\x01", b"TKRC\x00\x02"])
def test_a_checksummed_checkpoint_of_another_magic_or_version_is_rejected(header):
    body = header + encode_checkpoint(Checkpoint(0, 5000, 1))[6:30]
    with pytest.raises(CheckpointRejected, match="magic"):
        decode_checkpoint(body + crc32(body).to_bytes(4, "big"))


# -- recovery with and without it ---------------------------------------------------------------

def rot_early_byte(fs):
    """Flip a byte of the 1st entry: only a full scan, which CRCs it, would cut the log there."""
    fs.flip_byte(SEG0, 20)


def test_recovery_scans_only_after_a_trusted_checkpoint():
    fs = FakeFileSystem()
    flushed_log(fs).close()
    fs.write_file(SEG0, fs.read_file(SEG0) + entries(2) + b"\x00\x00\x01\x00torn")
    rot_early_byte(fs)  # before the checkpoint: the scan never reads it
    log = open_log(fs)
    assert log.end_offset == log.visible_end == 102 * ENTRY  # the 2 entries after the checkpoint were scanned
    assert fs.exists(CHECKPOINT)


def test_a_clean_start_ignores_the_checkpoint():
    fs = FakeFileSystem()
    flushed_log(fs).close()
    fs.write_file(CHECKPOINT, b"garbage")
    log = open_log(fs, needs_recovery=False)
    assert log.end_offset == 100 * ENTRY and fs.read_file(CHECKPOINT) == b"garbage"


@pytest.mark.parametrize("damage", ["missing", "torn", "garbage", "past_the_end", "tail_changed"])
def test_an_untrusted_checkpoint_falls_back_to_the_full_scan(damage, caplog):
    fs = FakeFileSystem(seed=3)
    flushed_log(fs).close()
    good = fs.read_file(CHECKPOINT)
    segment = bytearray(fs.read_file(SEG0))
    if damage == "missing":
        fs.remove(CHECKPOINT)
    elif damage == "torn":
        fs.write_file(CHECKPOINT, good[:17])
    elif damage == "garbage":
        fs.write_file(CHECKPOINT, fs.rng.randbytes(CHECKPOINT_BYTES))
    elif damage == "past_the_end":
        fs.write_file(SEG0, bytes(segment[:50 * ENTRY]))
    elif damage == "tail_changed":  # same size, different bytes before the position
        segment[-3] ^= 1
        fs.write_file(SEG0, bytes(segment))
    rot_early_byte(fs)  # so the full scan shows: it cuts the log at its first entry
    with caplog.at_level(logging.DEBUG, "trikafka.log"):
        log = open_log(fs)
    (line,) = [r for r in caplog.records if "checkpoint not used" in r.getMessage()]
    # A missing checkpoint is ordinary (every log not flushed since the crash): detail at DEBUG.
    assert line.levelno == (logging.DEBUG if damage == "missing" else logging.WARNING)
    assert log.end_offset == 0
    assert not fs.exists(CHECKPOINT), "a rejected checkpoint is removed"


@pytest.mark.parametrize("older_gone", [False, True])
def test_a_checkpoint_naming_another_segment_is_stale(older_gone):
    fs = FakeFileSystem()
    log = flushed_log(fs)
    log.roll()  # the checkpoint names segment 0; the newest segment is the next one
    log.append(entries(3))
    log.close()
    newest = DIR + "/%020d.kafka" % (100 * ENTRY)
    fs.write_file(newest, fs.read_file(newest) + bytes(7))
    if older_gone:
        fs.remove(SEG0)  # retention deleted the segment the checkpoint names
    log = open_log(fs)
    assert log.end_offset == 103 * ENTRY  # the newest segment was scanned from 0 and its tail cut
    assert fs.read_file(newest) == entries(3)
    assert not fs.exists(CHECKPOINT)


def test_leftover_temporary_checkpoint_is_swept():
    fs = FakeFileSystem()
    flushed_log(fs).close()
    fs.write_file(DIR + "/" + CHECKPOINT_TEMP_NAME, b"half")
    open_log(fs)
    assert fs.listdir(DIR) == [CHECKPOINT_FILE_NAME, "00000000000000000000.kafka"]


# -- writing --------------------------------------------------------------------------------------

def test_checkpoint_is_written_crash_safely_after_the_data_fsync():
    fs = FakeFileSystem()
    log = flushed_log(fs, n=3)
    # The data fsync came first, then the checkpoint file's fsync, its rename, the directory fsync.
    assert fs.durable_size(SEG0) == 3 * ENTRY
    assert fs.is_durable_entry(CHECKPOINT) and not fs.exists(DIR + "/" + CHECKPOINT_TEMP_NAME)
    log.append(entries(1))
    fs.crash("prefix")
    log = open_log(fs)
    assert log.end_offset >= 3 * ENTRY


@pytest.mark.parametrize("op", ["open", "write", "fsync", "rename", "fsync_dir"])
def test_a_failed_checkpoint_write_keeps_the_old_one_and_the_log_healthy(op, caplog):
    clock = ManualClock(0)
    fs = FakeFileSystem(seed=1)
    fs.write_file(SEG0, b"")
    log = open_log(fs, clock, needs_recovery=False)
    log.append(entries(3))
    log.flush()
    old = fs.read_file(CHECKPOINT)
    log.append(entries(2))
    clock.advance(10_000)
    fs.inject_error(op, CHECKPOINT_FILE_NAME if op != "fsync_dir" else DIR)
    with caplog.at_level(logging.WARNING, "trikafka.log"):
        log.flush()
    assert log.failure is None and log.visible_end == 5 * ENTRY
    assert "recovery checkpoint of" in caplog.text
    if op != "fsync_dir":  # the rename happened before the failed directory fsync
        assert fs.read_file(CHECKPOINT) == old
    fs.crash("keep_all")
    assert open_log(fs).end_offset == 5 * ENTRY


def test_checkpoints_are_rate_limited_by_bytes_and_time():
    clock = ManualClock(0)
    fs = FakeFileSystem()
    fs.write_file(SEG0, b"")
    log = open_log(fs, clock, needs_recovery=False)
    segment = log.segments.segments[-1]
    checkpointer = RecoveryCheckpointer(fs, DIR, clock, min_bytes=3 * ENTRY, interval_ms=5000)
    log.append(entries(10))
    log.flush()
    position = lambda: decode_checkpoint(fs.read_file(CHECKPOINT)).position  # noqa: E731
    assert checkpointer.after_flush(segment, ENTRY)  # the first flush after opening always writes
    assert not checkpointer.after_flush(segment, ENTRY)  # nothing new
    assert not checkpointer.after_flush(segment, 3 * ENTRY)  # 2 entries, 0 ms later: not yet
    assert position() == ENTRY
    assert checkpointer.after_flush(segment, 4 * ENTRY)  # 3 entries past the last one
    clock.advance(4999)
    assert not checkpointer.after_flush(segment, 5 * ENTRY)
    clock.advance(1)
    assert checkpointer.after_flush(segment, 5 * ENTRY)  # 5 s since the last one
    assert position() == 5 * ENTRY and checkpointer.written == 3
    clock.advance(10_000)
    assert not checkpointer.after_flush(segment, 5 * ENTRY)  # nothing new, however late
    checkpointer.after_truncate(segment, 2 * ENTRY)  # a cut writes at once, whatever the rate
    assert position() == 2 * ENTRY and checkpointer.written == 4


# -- progress ---------------------------------------------------------------------------------------

def scan_40_entries_in_4_chunks(caplog, tick_s: float) -> list[str]:
    """Scan 40 entries 10 at a time with a fake clock that moves ``tick_s`` a call; the lines logged."""
    from trikafka.log.recovery import scan_file_valid_prefix

    fs = FakeFileSystem()
    data = entries(40)
    fs.write_file(SEG0, data)
    ticks = itertools.count(100)  # not 0: elapsed time must be a difference, not a sum
    file = fs.open_segment(SEG0, create=False)
    with caplog.at_level(logging.INFO, "trikafka.log"):
        valid = scan_file_valid_prefix(file, len(data), chunk_bytes=10 * ENTRY, label=SEG0,
                                       clock_s=lambda: next(ticks) * tick_s)
    assert valid == len(data)
    return [r.getMessage() for r in caplog.records]


def test_a_long_scan_logs_its_progress(caplog):
    lines = scan_40_entries_in_4_chunks(caplog, 1.0)  # one fake second per clock call: every chunk reports
    assert len(lines) == 5, lines  # 4 chunks, then the summary
    assert "at %d of %d bytes (25%%)" % (10 * ENTRY, 40 * ENTRY) in lines[0] and "MB/s" in lines[0]
    assert "done: %d of %d bytes (100%%)" % (40 * ENTRY, 40 * ENTRY) in lines[-1]
    assert " in 1.0 s," in lines[0] and " in 5.0 s," in lines[-1]  # seconds since the scan started


def test_progress_is_logged_once_an_interval(caplog):
    lines = scan_40_entries_in_4_chunks(caplog, 0.5)  # half a fake second per call: every other chunk reports
    assert len(lines) == 3, lines  # at 1 s, at 2 s, then the summary


def test_a_short_scan_is_quiet(caplog):
    fs = FakeFileSystem()
    fs.write_file(SEG0, entries(40))
    with caplog.at_level(logging.DEBUG, "trikafka.log"):
        open_log(fs)
    assert "checkpoint not used (no checkpoint)" in caplog.text  # a full scan, but a quick one, at DEBUG
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    assert "recovery scan of" not in caplog.text


def test_the_progress_line_gives_the_scan_rate(caplog):
    from trikafka.log.recovery import _log_progress

    with caplog.at_level(logging.INFO, "trikafka.log"):
        _log_progress("seg", 1_000_000, 4_000_000, 7_000_000, 2.0)
    assert "at 3000000 of 6000000 bytes (50%) in 2.0 s, 1.5 MB/s" in caplog.text
