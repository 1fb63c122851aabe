"""The log over the real file system (OsFileSystem), in a temporary directory."""

import os

import pytest

from trikafka.log import (
    CLEAN_SHUTDOWN_MARKER, InvalidTopicError, LogConfig, LogManager, ManualClock, OsFileSystem, wall_clock_ms,
)
from trikafka.log.checkpoint import CHECKPOINT_FILE_NAME
from trikafka.wire.messageset import build_message_set

WEEK_MS = 7 * 24 * 3600 * 1000


def open_manager(path, clock_ms=None, **config):
    mgr = LogManager(str(path), LogConfig(**config), OsFileSystem(), **({"clock_ms": clock_ms} if clock_ms else {}))
    mgr.open()
    return mgr


def test_append_flush_read_with_a_real_descriptor(tmp_path):
    mgr = open_manager(tmp_path / "logs")
    log = mgr.get_or_create("t", 0)
    data = build_message_set([b"hello", b"world"])
    log.append(data)
    log.flush()
    region = log.read(0, 1 << 20)
    assert os.pread(region.source.fileno(), region.length, region.position) == data
    assert region.read() == data
    assert sorted(os.listdir(tmp_path / "logs" / "t-0")) == [CHECKPOINT_FILE_NAME, "00000000000000000000.kafka"]


def test_rolls_and_recovery_on_disk(tmp_path):
    root = tmp_path / "logs"
    mgr = open_manager(root, segment_bytes=100)
    log = mgr.get_or_create("t", 0)
    sets = [build_message_set([b"x" * 40]) for _ in range(5)]
    for s in sets:
        log.append(s)
    log.flush()
    # 50-byte entries: a segment exceeds 100 bytes after 3; the flush wrote a recovery checkpoint
    assert len(os.listdir(root / "t-0")) == 3
    mgr.close(clean=False)  # as if the process died
    newest = root / "t-0" / ("%020d.kafka" % log.segments.starts[-1])
    with open(newest, "ab") as f:
        f.write(b"\x00" * 5)
    mgr2 = open_manager(root, segment_bytes=100)
    assert mgr2.recovered
    log2 = mgr2.get("t", 0)
    assert log2.visible_end == sum(map(len, sets))
    assert os.path.getsize(newest) == log2.end_offset - log2.segments.starts[-1]
    assert mgr2.close() and (root / CLEAN_SHUTDOWN_MARKER).exists()
    mgr3 = open_manager(root)
    assert not mgr3.recovered and not (root / CLEAN_SHUTDOWN_MARKER).exists()
    mgr3.close()


def test_retention_unlinks_but_a_held_region_still_reads(tmp_path):
    root = tmp_path / "logs"
    clock = ManualClock(wall_clock_ms())  # real mtimes come from the wall clock
    mgr = open_manager(root, clock_ms=clock)
    log = mgr.get_or_create("t", 0)
    old = build_message_set([b"old"])
    log.append(old)
    log.roll()
    region = log.read(0, 100)
    log.append(build_message_set([b"new"]))
    log.flush()
    first = log.segments.segments[0].path
    OsFileSystem().touch(first, clock() - WEEK_MS - 1)
    assert log.apply_retention() == 1
    assert not os.path.exists(first)
    assert region.read() == old  # the unlinked file stays readable through the region
    mgr.close()


def test_hostile_topic_creates_nothing(tmp_path):
    root = tmp_path / "logs"
    mgr = open_manager(root)
    for name in ("..", "../escape", "a/b", "x\x00y", "z" * 10240):
        with pytest.raises(InvalidTopicError):
            mgr.get_or_create(name, 0)
    assert os.listdir(root) == [] and sorted(os.listdir(tmp_path)) == ["logs"]
    mgr.close()


def test_segment_file_flags(tmp_path):
    import fcntl
    import stat

    from trikafka.log.fs import OsSegmentFile

    path = str(tmp_path / "00000000000000000000.kafka")
    with pytest.raises(FileNotFoundError):
        OsSegmentFile(path, create=False)  # opening never creates
    created = OsSegmentFile(path, create=True)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 & ~umask
    assert fcntl.fcntl(created.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    with pytest.raises(FileExistsError):
        OsSegmentFile(path, create=True)  # creating never reuses a file
    created.append(b"abc")
    created.close()
    opened = OsSegmentFile(path, create=False)
    assert opened.size == 3 and opened.pread(0, 3) == b"abc"
    os.lseek(opened.fileno(), 0, os.SEEK_SET)
    opened.append(b"de")  # O_APPEND: at the end wherever the descriptor points
    assert opened.pread(0, 10) == b"abcde" and opened.size == 5
    opened.close()


def test_makedirs_accepts_a_directory_that_exists(tmp_path):
    fs = OsFileSystem()
    fs.makedirs(str(tmp_path / "a" / "b"))
    fs.makedirs(str(tmp_path / "a" / "b"))
    assert fs.is_dir(str(tmp_path / "a" / "b"))
