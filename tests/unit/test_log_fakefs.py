"""The FakeFileSystem's crash model: durable vs volatile data and directory entries, injected errors."""

import errno
import io
import random

import pytest

from trikafka.log import ManualClock
from trikafka.testing import FakeFileSystem


def make_fs(seed=0):
    fs = FakeFileSystem(seed)
    fs.makedirs("/d")
    fs.fsync_dir("/")
    return fs


def test_fsynced_bytes_survive_every_crash_mode():
    for mode in ("prefix", "zeros", "garbage", "flip", "keep_all", "random"):
        for seed in range(30):
            fs = make_fs(seed)
            f = fs.open_segment("/d/a", create=True)
            fs.fsync_dir("/d")
            f.append(b"durable!")
            f.fsync()
            f.append(b"volatile" * 4)
            fs.crash(mode)
            after = fs.read_file("/d/a")
            assert after.startswith(b"durable!"), (mode, seed)
            assert len(after) <= 8 + 32


def test_prefix_mode_keeps_a_prefix_of_the_unflushed_bytes():
    seen = set()
    for seed in range(60):
        fs = make_fs(seed)
        f = fs.open_segment("/d/a", create=True)
        fs.fsync_dir("/d")
        f.fsync()
        f.append(b"0123456789")
        fs.crash("prefix")
        after = fs.read_file("/d/a")
        assert b"0123456789".startswith(after)
        seen.add(len(after))
    assert 0 in seen and 10 in seen and len(seen) > 5


def test_zeros_and_garbage_fill_within_the_old_size():
    kinds = set()
    for mode in ("zeros", "garbage"):
        for seed in range(60):
            fs = make_fs(seed)
            f = fs.open_segment("/d/a", create=True)
            fs.fsync_dir("/d")
            f.append(b"x" * 100)
            fs.crash(mode)
            after = fs.read_file("/d/a")
            assert len(after) <= 100
            kept = len(after) - len(after.lstrip(b"x"))
            tail = after[kept:]
            if tail:
                kinds.add(mode)
                if mode == "zeros":
                    assert tail == bytes(len(tail))
    assert kinds == {"zeros", "garbage"}


def test_flip_changes_bytes_only_in_the_unflushed_tail():
    fs = make_fs(3)
    f = fs.open_segment("/d/a", create=True)
    fs.fsync_dir("/d")
    f.append(b"a" * 50)
    f.fsync()
    f.append(b"b" * 50)
    fs.crash("flip")
    after = fs.read_file("/d/a")
    assert after[:50] == b"a" * 50
    assert after[50:] != b"b" * (len(after) - 50)


def test_unsynced_directory_entries_may_vanish_and_synced_ones_stay():
    outcomes = set()
    for seed in range(40):
        fs = make_fs(seed)
        fs.open_segment("/d/kept", create=True).fsync()
        fs.fsync_dir("/d")
        fs.open_segment("/d/new", create=True).fsync()
        fs.crash("prefix")
        assert fs.exists("/d/kept")
        outcomes.add(fs.exists("/d/new"))
    assert outcomes == {True, False}


def test_removed_entry_may_come_back_until_the_directory_is_fsynced():
    outcomes = set()
    for seed in range(40):
        fs = make_fs(seed)
        fs.open_segment("/d/a", create=True)
        fs.fsync_dir("/d")
        fs.remove("/d/a")
        fs.crash("prefix")
        outcomes.add(fs.exists("/d/a"))
    assert outcomes == {True, False}
    fs = make_fs()
    fs.open_segment("/d/a", create=True)
    fs.fsync_dir("/d")
    fs.remove("/d/a")
    fs.fsync_dir("/d")
    fs.crash("prefix", dir_entry_keep_probability=0.0)
    assert not fs.exists("/d/a")


def test_keep_all_is_a_process_crash():
    fs = make_fs()
    f = fs.open_segment("/d/new", create=True)
    f.append(b"abc")
    fs.crash("keep_all")
    assert fs.read_file("/d/new") == b"abc"


def test_handles_from_before_a_crash_are_dead():
    fs = make_fs()
    f = fs.open_segment("/d/a", create=True)
    fs.crash("keep_all")
    with pytest.raises(RuntimeError):
        f.append(b"x")


def test_crash_is_deterministic_from_the_seed():
    def run(seed):
        fs = make_fs(seed)
        f = fs.open_segment("/d/a", create=True)
        f.append(bytes(range(200)))
        fs.crash("random")
        return fs.exists("/d/a") and fs.read_file("/d/a")
    assert run(7) == run(7)
    assert len({run(s) for s in range(20)}) > 3


def test_explicit_rng_overrides_the_seeded_one():
    results = set()
    for _ in range(3):
        fs = make_fs(1)
        f = fs.open_segment("/d/a", create=True)
        fs.fsync_dir("/d")
        f.append(bytes(range(100)))
        fs.crash("prefix", rng=random.Random(42))
        results.add(fs.read_file("/d/a"))
    assert len(results) == 1


def test_injected_write_error_may_tear_the_write():
    fs = make_fs(5)
    f = fs.open_segment("/d/a", create=True)
    fs.inject_error("write", "/d/a")
    with pytest.raises(OSError) as info:
        f.append(b"x" * 100)
    assert info.value.errno == errno.EIO
    assert f.size <= 100
    f.append(b"y")  # the fault fired once
    assert fs.read_file("/d/a").endswith(b"y")


def test_injected_fsync_error_makes_nothing_durable():
    fs = make_fs()
    f = fs.open_segment("/d/a", create=True)
    f.append(b"abc")
    fs.inject_error("fsync")
    with pytest.raises(OSError):
        f.fsync()
    assert fs.durable_size("/d/a") == 0
    f.fsync()
    assert fs.durable_size("/d/a") == 3


def test_injected_errors_match_op_and_path_and_count():
    fs = make_fs()
    fs.inject_error("fsync_dir", "/d", count=2)
    fs.fsync_dir("/")
    for _ in range(2):
        with pytest.raises(OSError):
            fs.fsync_dir("/d")
    fs.fsync_dir("/d")
    with pytest.raises(ValueError):
        fs.inject_error("chmod")


def test_open_file_outlives_its_removal():
    fs = make_fs()
    f = fs.open_segment("/d/a", create=True)
    f.append(b"still here")
    fs.remove("/d/a")
    assert not fs.exists("/d/a")
    assert f.pread(0, 100) == b"still here"


def test_fileno_is_unsupported_and_pread_is_the_fallback():
    fs = make_fs()
    f = fs.open_segment("/d/a", create=True)
    with pytest.raises(io.UnsupportedOperation):
        f.fileno()
    f.append(b"abcdef")
    assert f.pread(2, 3) == b"cde"
    assert f.pread(4, 10) == b"ef"


def test_namespace_errors_look_like_os_errors():
    fs = make_fs()
    with pytest.raises(FileNotFoundError):
        fs.open_segment("/d/missing", create=False)
    fs.open_segment("/d/a", create=True)
    with pytest.raises(FileExistsError):
        fs.open_segment("/d/a", create=True)
    with pytest.raises(FileNotFoundError):
        fs.listdir("/nope")
    with pytest.raises(NotADirectoryError):
        fs.makedirs("/d/a/b")
    assert fs.listdir("/d") == ["a"]
    assert fs.is_dir("/d") and not fs.is_dir("/d/a")


def test_mtime_follows_the_clock_and_touch():
    clock = ManualClock(1000)
    fs = FakeFileSystem(0, clock)
    fs.makedirs("/d")
    f = fs.open_segment("/d/a", create=True)
    assert fs.mtime_ms("/d/a") == 1000
    clock.advance(500)
    f.append(b"x")
    assert fs.mtime_ms("/d/a") == 1500
    fs.touch("/d/a", 7)
    assert fs.mtime_ms("/d/a") == 7


def test_a_lost_directory_takes_its_files_with_it():
    lost = 0
    for seed in range(30):
        fs = FakeFileSystem(seed)
        fs.makedirs("/logs/t-0")  # never fsynced in "/logs"
        fs.fsync_dir("/")
        f = fs.open_segment("/logs/t-0/a", create=True)
        f.fsync()
        fs.fsync_dir("/logs/t-0")
        fs.crash("prefix")
        if not fs.exists("/logs/t-0"):
            lost += 1
            assert not fs.exists("/logs/t-0/a")
    assert lost > 0


def test_a_closed_file_s_reader_reads_on_as_a_held_descriptor_does_but_not_past_a_crash():
    fs = make_fs()
    f = fs.open_segment("/d/a", create=True)
    f.append(b"bytes in flight")
    reader = f.reader  # what a FileRegion of a fetch answer holds
    f.close()
    fs.remove("/d/a")
    with pytest.raises(ValueError, match="closed file"):
        f.pread(0, 5)
    assert reader.pread(6, 2) == b"in"
    with pytest.raises(io.UnsupportedOperation):
        reader.fileno()
    fs.crash("keep_all")
    with pytest.raises(RuntimeError, match="before a crash"):
        reader.pread(0, 5)
