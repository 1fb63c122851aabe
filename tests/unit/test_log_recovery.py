"""Loading and crash recovery of a partition directory (spec §7.1, §7.3)."""

import pytest

from trikafka.log import Log, LogConfig, ManualClock
from trikafka.testing import FakeFileSystem
from trikafka.log import recovery
from trikafka.log.errors import LogLoadError
from trikafka.wire.messageset import build_message_set

DIR = "/logs/t-0"
SEG0 = DIR + "/00000000000000000000.kafka"


def entries(n: int, size: int = 20) -> bytes:
    return build_message_set([bytes([65 + i % 26]) * size for i in range(n)])


def open_log(fs, needs_recovery=True, **config):
    return Log.open(fs, DIR, "t", 0, LogConfig(**config), ManualClock(0), needs_recovery)


@pytest.mark.parametrize("torn_bytes", [0, 2, 4, 5, 6])
def test_torn_tail_of_zeros_is_truncated_exactly(torn_bytes):
    # 0.7 FileMessageSetTest.testIterationOverPartialAndTruncation
    valid = entries(5)
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid + bytes(torn_bytes))
    log = open_log(fs)
    assert fs.read_file(SEG0) == valid
    assert log.visible_end == log.end_offset == len(valid)
    assert log.read(0, 1 << 20).read() == valid
    assert fs.durable_size(SEG0) == len(valid)  # what recovery keeps is fsynced before it is visible


@pytest.mark.parametrize("tail", [
    b"\x00\x00\x00\x04abcd",                          # N below the smallest header
    b"\x00\x00\x10\x00\x01\x00\x00\x00\x00\x00",      # N pointing past the end of the file
    b"\xff\xff\xff\xff",                               # negative N
    b"\x00\x00\x00\x06\x07\x00\x00\x00\x00\x00",      # unknown magic: truncated here [T]
])
def test_garbage_tails_are_truncated(tail):
    valid = entries(3)
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid + tail)
    open_log(fs)
    assert fs.read_file(SEG0) == valid


def test_bad_crc_truncates_from_that_entry_on():
    data = bytearray(entries(6))
    entry_size = len(entries(1))
    data[3 * entry_size + 12] ^= 0x40  # a payload byte of the 4th entry
    fs = FakeFileSystem()
    fs.write_file(SEG0, bytes(data))
    log = open_log(fs)
    assert log.end_offset == 3 * entry_size


def test_entry_may_end_exactly_at_the_end_of_the_file():
    valid = entries(4)
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid)
    assert open_log(fs).end_offset == len(valid)


def test_recovery_is_idempotent():
    fs = FakeFileSystem()
    fs.write_file(SEG0, entries(4) + b"\x00\x00\x00\x09\x01\x00garbage")
    open_log(fs).close()
    once = fs.read_file(SEG0)
    open_log(fs).close()
    assert fs.read_file(SEG0) == once == entries(4)


def test_without_recovery_the_tail_is_not_scanned():
    fs = FakeFileSystem()
    fs.write_file(SEG0, entries(2) + bytes(3))
    log = open_log(fs, needs_recovery=False)
    assert log.end_offset == len(entries(2)) + 3


def test_only_the_newest_segment_is_scanned():
    fs = FakeFileSystem()
    older = entries(2) + bytes(5)  # corrupt, but older segments are trusted in full (spec §7.3)
    fs.write_file(SEG0, older)
    fs.write_file(DIR + "/%020d.kafka" % len(older), entries(1) + bytes(2))
    log = open_log(fs)
    assert log.segments.starts == (0, len(older))
    assert log.visible_end == len(older) + len(entries(1))


def test_scan_crosses_chunk_boundaries_and_big_entries():
    data = build_message_set([b"s" * 10, b"B" * 300, b"m" * 50, b"t" * 3, b"L" * 1000])
    for tail in (b"", bytes(7), b"\x00\x00\x03\xff\x01\x00\x00\x00\x00\x00" + b"z" * 500):
        fs = FakeFileSystem()
        fs.write_file(SEG0, data + tail)
        assert open_log(fs, recovery_chunk_bytes=64).end_offset == len(data)
    torn = data[:-10]
    fs = FakeFileSystem()
    fs.write_file(SEG0, torn)
    assert open_log(fs, recovery_chunk_bytes=64).end_offset == len(data) - len(build_message_set([b"L" * 1000]))


ENTRY = len(entries(1))  # every entry of entries() has this size
BAD_TAILS = {
    "zeros": bytes(ENTRY),
    "torn_header": entries(1)[:3],
    "torn_entry": entries(1)[:-1],
    "bad_crc": entries(1)[:-1] + b"\xff",
    "garbage_length": b"\x7f\xff\xff\xff" + bytes(ENTRY),
}


@pytest.mark.parametrize("tail", sorted(BAD_TAILS))
@pytest.mark.parametrize("where", ["at_a_boundary", "inside_a_chunk", "across_a_boundary"])
def test_bad_tails_are_cut_exactly_wherever_they_sit_in_the_chunks(tail, where):
    chunk = 4 * ENTRY
    count = {"at_a_boundary": 12, "inside_a_chunk": 9, "across_a_boundary": 11}[where]
    valid = entries(count)
    # across_a_boundary: 11 entries end 1 entry before a chunk's end, so a 2-entry tail straddles it.
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid + BAD_TAILS[tail] + entries(2))
    log = open_log(fs, recovery_chunk_bytes=chunk)
    assert log.end_offset == log.visible_end == len(valid)
    assert fs.read_file(SEG0) == valid


@pytest.mark.parametrize("chunk", [ENTRY - 1, ENTRY, ENTRY + 1, 3 * ENTRY, 3 * ENTRY + 7, 1 << 20])
def test_valid_segments_survive_any_chunk_size(chunk):
    valid = entries(25) + build_message_set([b"x" * 700]) + entries(5)
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid + b"\x00\x00")
    assert open_log(fs, recovery_chunk_bytes=chunk).end_offset == len(valid)


class ReadSpy:
    """A segment file that records every pread."""

    def __init__(self, data: bytes):
        self.data, self.reads = data, []

    def pread(self, position: int, n: int) -> bytes:
        self.reads.append((position, n))
        return self.data[position:position + n]


def test_the_scan_reads_each_chunk_once_when_entries_end_at_its_end():
    chunk = 4 * ENTRY
    spy = ReadSpy(entries(12))
    assert recovery.scan_file_valid_prefix(spy, len(spy.data), chunk_bytes=chunk) == 12 * ENTRY
    assert spy.reads == [(0, chunk), (chunk, chunk), (2 * chunk, chunk)]


def test_the_scan_stops_at_a_bad_entry_inside_a_chunk_without_rereading_it():
    chunk = 4 * ENTRY
    spy = ReadSpy(entries(5) + BAD_TAILS["bad_crc"] + entries(4))
    assert recovery.scan_file_valid_prefix(spy, len(spy.data), chunk_bytes=chunk) == 5 * ENTRY
    # the 2nd chunk stops at the bad entry; only its length is read again, to see whether it is whole
    assert spy.reads == [(0, chunk), (chunk, chunk), (5 * ENTRY, 4)]


def test_an_entry_across_a_chunk_end_is_read_once_more_whole():
    chunk = 4 * ENTRY + 10
    spy = ReadSpy(entries(6))
    assert recovery.scan_file_valid_prefix(spy, len(spy.data), chunk_bytes=chunk) == 6 * ENTRY
    assert spy.reads == [(0, chunk), (4 * ENTRY, 4), (4 * ENTRY, ENTRY), (5 * ENTRY, ENTRY)]


def test_the_scan_starts_where_it_is_told():
    spy = ReadSpy(bytes(5) + entries(3) + bytes(4))
    assert recovery.scan_file_valid_prefix(spy, len(spy.data), start=5, chunk_bytes=1 << 20) == 5 + 3 * ENTRY
    assert spy.reads[0] == (5, len(spy.data) - 5)


def test_a_segment_longer_than_the_real_chunk_recovers():
    # The production chunk size, on the in-memory file system: a torn entry straddles the first boundary.
    one = build_message_set([b"p" * 40_000])
    count = recovery.RECOVERY_CHUNK_BYTES // len(one) + 3
    valid = one * count
    assert len(valid) > recovery.RECOVERY_CHUNK_BYTES
    fs = FakeFileSystem()
    fs.write_file(SEG0, valid + one[:-5])
    log = open_log(fs)
    assert log.end_offset == len(valid)
    assert fs.read_file(SEG0) == valid


def test_a_directory_without_segments_gets_an_empty_segment_zero():
    fs = FakeFileSystem()
    fs.write_file(DIR + "/notes.txt", b"ignored")
    log = open_log(fs)
    assert fs.listdir(DIR) == ["00000000000000000000.kafka", "notes.txt"]
    assert fs.is_durable_entry(SEG0)
    assert (log.start_offset, log.end_offset) == (0, 0)


def test_leftover_temporary_files_are_swept():
    fs = FakeFileSystem()
    fs.write_file(SEG0, entries(1))
    fs.write_file(SEG0 + ".deleted", b"x")
    fs.write_file(DIR + "/00000000000000000031.kafka.tmp", b"x")
    open_log(fs)
    assert fs.listdir(DIR) == ["00000000000000000000.kafka"]


def test_bad_segment_names_fail_clearly():
    fs = FakeFileSystem()
    fs.write_file(DIR + "/12.kafka", b"")
    with pytest.raises(LogLoadError, match="12.kafka"):
        open_log(fs)


def test_a_lost_new_segment_after_a_roll_still_loads():
    # The roll fsynced the old segment, created the new one, then crashed
    # before the directory fsync: the new entry may be gone.
    for seed in range(20):
        fs = FakeFileSystem(seed)
        fs.write_file(SEG0, b"")  # the directory entries are durable
        log = open_log(fs, needs_recovery=False)
        log.append(entries(3))
        fs.inject_error("fsync_dir", DIR)
        with pytest.raises(Exception):
            log.roll()
        fs.crash("prefix")
        log = open_log(fs)
        assert log.start_offset == 0 and log.end_offset == len(entries(3))
        assert log.segments.starts in ((0,), (0, len(entries(3))))
