"""The leader-epoch history and its crash-safe file."""

from __future__ import annotations

import pytest

from trikafka.log.epochs import (
    EPOCH_FILE_MAGIC, EPOCH_FILE_NAME, RECORD_BYTES, EpochEntry, EpochFile, EpochHistory, EpochOrderError,
    decode_records, encode_record,
)
from trikafka.log.errors import LogFailedError
from trikafka.testing import FakeFileSystem

DIR = "/data/t-0"


def durable_dir(fs: FakeFileSystem) -> None:
    """The partition directory, durable as the log manager leaves it."""
    fs.makedirs(DIR)
    fs.fsync_dir("/")
    fs.fsync_dir("/data")


def history(*pairs):
    return EpochHistory([EpochEntry(e, o) for e, o in pairs])


def test_queries():
    h = history((0, 0), (2, 40), (5, 100))
    assert h.latest_epoch == 5
    assert [h.epoch_at(o) for o in (0, 39, 40, 99, 100, 500)] == [0, 0, 2, 2, 5, 5]
    assert h.next_boundary(0) == 40 and h.next_boundary(40) == 100 and h.next_boundary(100) is None
    assert h.end_offset_for(5, 130) == (5, 130)
    assert h.end_offset_for(9, 130) == (5, 130)
    assert h.end_offset_for(2, 130) == (2, 100)
    assert h.end_offset_for(3, 130) == (2, 100)  # epoch 3 never wrote here: the largest below it
    assert h.end_offset_for(0, 130) == (0, 40)
    assert history((3, 10)).end_offset_for(1, 50) == (1, 10)
    assert EpochHistory().end_offset_for(1, 50) == (-1, -1)
    assert EpochHistory().epoch_at(3) == -1


def test_assign_rules():
    h = history((1, 10))
    assert not h.assign(1, 20)  # the same epoch again is a no-op
    for bad in ((0, 20), (2, 5), (-1, 0)):
        with pytest.raises(EpochOrderError):
            h.assign(*bad)
    assert h.assign(2, 10)  # an empty epoch 1 is kept; its end is its own start
    assert h.end_offset_for(1, 30) == (1, 10)


def test_truncate_from():
    h = history((0, 0), (1, 40), (2, 40), (3, 90))
    assert h.truncate_from(41) == 3
    assert h.truncate_from(40) == 1
    assert h.entries == (EpochEntry(0, 0),)


def test_record_codec_stops_at_a_torn_or_disordered_record():
    recs = [encode_record(EpochEntry(e, o)) for e, o in ((0, 0), (1, 8), (2, 16))]
    good = EPOCH_FILE_MAGIC + b"".join(recs)
    assert len(recs[0]) == RECORD_BYTES
    assert decode_records(good) == [EpochEntry(0, 0), EpochEntry(1, 8), EpochEntry(2, 16)]
    assert decode_records(good[:-1]) == [EpochEntry(0, 0), EpochEntry(1, 8)]
    flipped = bytearray(good)
    flipped[len(EPOCH_FILE_MAGIC) + RECORD_BYTES + 3] ^= 1
    assert decode_records(bytes(flipped)) == [EpochEntry(0, 0)]
    assert decode_records(EPOCH_FILE_MAGIC + recs[1] + recs[0]) == [EpochEntry(1, 8)]
    assert decode_records(b"XXXX" + recs[0]) == []


def test_file_round_trip_and_truncation_survive_a_crash():
    fs = FakeFileSystem(seed=1)
    durable_dir(fs)
    f = EpochFile.open(fs, DIR, log_end=0)
    assert f.assign(0, 0) and f.assign(3, 24) and f.assign(4, 48)
    f.truncate_from(48)
    fs.crash("garbage")
    again = EpochFile.open(fs, DIR, log_end=100)
    assert again.history == history((0, 0), (3, 24))
    assert fs.read_file(f"{DIR}/{EPOCH_FILE_NAME}") == EPOCH_FILE_MAGIC + encode_record(EpochEntry(0, 0)) \
        + encode_record(EpochEntry(3, 24))


@pytest.mark.parametrize("mode", ["prefix", "zeros", "garbage", "flip", "keep_all"])
def test_a_torn_append_is_cut_and_the_rest_kept(mode):
    fs = FakeFileSystem(seed=7)
    durable_dir(fs)
    path = f"{DIR}/{EPOCH_FILE_NAME}"
    f = EpochFile.open(fs, DIR, log_end=0)
    f.assign(0, 0)
    f.assign(1, 8)
    f._file.append(encode_record(EpochEntry(2, 16)))  # not fsynced: the crash may tear it
    fs.crash(mode)
    again = EpochFile.open(fs, DIR, log_end=64)
    assert again.history.entries[:2] == (EpochEntry(0, 0), EpochEntry(1, 8))
    assert len(again.history.entries) in (2, 3)
    data = fs.read_file(path)
    assert decode_records(data) == list(again.history.entries)
    assert len(data) == len(EPOCH_FILE_MAGIC) + RECORD_BYTES * len(again.history.entries)


def test_epochs_past_the_recovered_log_end_are_dropped():
    fs = FakeFileSystem()
    durable_dir(fs)
    f = EpochFile.open(fs, DIR, log_end=0)
    f.assign(0, 0)
    f.assign(1, 40)
    f.assign(2, 80)
    again = EpochFile.open(fs, DIR, log_end=40)  # the log lost its tail past 40
    assert again.history == history((0, 0), (1, 40))


@pytest.mark.parametrize("op", ["fsync", "write", "truncate"])
def test_an_io_error_fails_the_epoch_file_for_good(op):
    """Fail-stop, as a log: a record whose fsync failed may or may not be on disk, so the file
    refuses every later write and the broker halts; the next start's recovery decides."""
    fs = FakeFileSystem(seed=2)
    durable_dir(fs)
    f = EpochFile.open(fs, DIR, log_end=0)
    assert f.assign(0, 0)
    fs.inject_error(op, EPOCH_FILE_NAME)
    with pytest.raises(LogFailedError, match="epoch file"):
        f.assign(2, 10) if op != "truncate" else (f.assign(2, 10), f.truncate_from(10))
    with pytest.raises(LogFailedError):
        f.assign(3, 20)  # the error was used up, but the file stays failed
    fs.crash()
    again = EpochFile.open(fs, DIR, log_end=100)
    assert again.history in (history((0, 0)), history((0, 0), (2, 10)))


def test_an_epoch_entry_is_a_value():
    import dataclasses

    entry = EpochEntry(3, 100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.start_offset = 50
