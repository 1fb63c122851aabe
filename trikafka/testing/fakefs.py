"""An in-memory ``FileSystem`` with a crash model, deterministic from a seed.

Fault model (what a test can make happen, and why the log must survive it):

* **Unflushed file data** (bytes appended or truncated since the file's last
  ``fsync``) is volatile.  ``crash(mode)`` decides, per file, what of it
  reaches the "disk", after the crash the file holds its durable bytes plus:

  - ``"prefix"``: any prefix of the unflushed bytes (lost pages at the end);
  - ``"zeros"``: a prefix, then zeros up to at most the pre-crash size (the
    inode's new size was written, the data blocks were not);
  - ``"garbage"``: a prefix, then random bytes likewise (stale block contents);
  - ``"flip"``: a prefix with 1-3 bytes flipped inside it (a torn sector);
  - ``"keep_all"``: everything (a process crash: the page cache survived);
  - ``"random"``: one of the above, drawn per file.

  These are the torn tails of ALICE's append model and of 0.7's own
  ``FileMessageSetTest``; recovery must cut every one of them at the last
  valid entry and lose nothing that was fsynced.
* **Directory entries** created or removed since the parent directory's last
  ``fsync_dir`` are volatile too: after a crash each such change independently
  survives or is undone (probability ``dir_entry_keep_probability``), except
  under ``"keep_all"``.  A new segment whose directory was not fsynced may
  vanish; a deleted one may come back.
* **Injected errors**: ``inject_error(op, ...)`` makes the next matching
  ``write``/``fsync``/``fsync_dir``/``truncate``/``open``/``remove``/``rename`` raise
  ``OSError(EIO)`` (``disk_faults.DiskFaults`` holds what is armed).  A failed ``write`` may have written a prefix of its data
  (volatile); a failed ``fsync`` makes nothing durable.  The log must stop
  writing (fail-stop) rather than carry on over a hole.
* **A dead process**: ``freeze()`` makes every write fail until ``crash()`` or
  ``thaw()``, so an in-process broker stopped by cancellation (whose
  ``finally`` blocks do run) leaves the disk as a SIGKILL would.
* **Bit rot** of fsynced data only happens when a test asks for it
  (``flip_byte``); a crash never touches durable bytes.

Everything is synchronous and no hook yields or sleeps, so fault injection adds
no scheduling points to async callers.  File handles from before a crash raise
``RuntimeError`` when used: the process that held them is gone.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import random
from typing import Callable

from .disk_faults import DiskFaults

CRASH_MODES = ("prefix", "zeros", "garbage", "flip", "keep_all")


class _File:
    __slots__ = ("data", "durable", "mtime_ms")

    def __init__(self, mtime_ms: int):
        self.data = bytearray()
        self.durable = b""
        self.mtime_ms = mtime_ms


class _Dir:
    __slots__ = ()


class FakeFileSystem:
    """In-memory file system; see the module docstring for the fault model."""

    def __init__(self, seed: int = 0, clock_ms: Callable[[], int] | None = None):
        self.rng = random.Random(seed)
        self.clock_ms = clock_ms if clock_ms is not None else (lambda: 0)
        root = _Dir()
        self._entries: dict[str, _File | _Dir] = {"/": root}
        self._durable_entries: dict[str, _File | _Dir] = {"/": root}
        self.faults = DiskFaults()  # which calls fail: injected errors, a frozen (dead) process
        self._generation = 0
        self.crash_count = 0

    # -- the FileSystem protocol ------------------------------------------------

    def listdir(self, path: str) -> list[str]:
        path = self._dir(path)
        return sorted(posixpath.basename(p) for p in self._entries if p != "/" and posixpath.dirname(p) == path)

    def makedirs(self, path: str) -> None:
        path = _norm(path)
        missing = []
        while path not in self._entries:
            missing.append(path)
            path = posixpath.dirname(path)
        if not isinstance(self._entries[path], _Dir):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        for p in reversed(missing):
            self._entries[p] = _Dir()

    def exists(self, path: str) -> bool:
        return _norm(path) in self._entries

    def is_dir(self, path: str) -> bool:
        return isinstance(self._entries.get(_norm(path)), _Dir)

    def open_segment(self, path: str, create: bool) -> "FakeSegmentFile":
        path = _norm(path)
        self.faults.check("open", path)
        if create:
            self._dir(posixpath.dirname(path))
            if path in self._entries:
                raise FileExistsError(errno.EEXIST, "file exists", path)
            self._entries[path] = _File(self.clock_ms())
        return FakeSegmentFile(self, path, self._file(path))

    def create_file(self, path: str) -> None:
        path = _norm(path)
        self.faults.check("open", path)
        self._dir(posixpath.dirname(path))
        node = _File(self.clock_ms())
        self._entries[path] = node

    def write_synced(self, path: str, data: bytes) -> None:
        path = _norm(path)
        self.faults.check("open", path)
        self._dir(posixpath.dirname(path))
        node = self._entries.get(path)
        if node is None:
            node = self._entries[path] = _File(self.clock_ms())
        elif not isinstance(node, _File):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        node.data = bytearray()  # O_TRUNC: the same inode, its old bytes gone (volatile until the fsync)
        try:
            self.faults.check("write", path)
        except OSError:
            node.data += data[: self.rng.randint(0, len(data))]
            raise
        node.data += data
        node.mtime_ms = self.clock_ms()
        self.faults.check("fsync", path)
        node.durable = bytes(node.data)

    def remove(self, path: str) -> None:
        path = _norm(path)
        self._file(path)
        self.faults.check("remove", path)
        del self._entries[path]

    def remove_dir(self, path: str) -> None:
        path = _norm(path)
        if not isinstance(self._entries.get(path), _Dir):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        if any(posixpath.dirname(p) == path for p in self._entries if p != path):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self.faults.check("remove", path)
        del self._entries[path]

    def rename(self, src: str, dst: str) -> None:
        """Atomic replace of ``dst`` by ``src``.  Both directory entries stay volatile
        until ``fsync_dir``: a crash may keep either, both or neither change, which
        is at least as harsh as a real journaled rename."""
        src, dst = _norm(src), _norm(dst)
        node = self._file(src)
        self._dir(posixpath.dirname(dst))
        if isinstance(self._entries.get(dst), _Dir):
            raise IsADirectoryError(errno.EISDIR, "is a directory", dst)
        self.faults.check("rename", src)
        del self._entries[src]
        self._entries[dst] = node

    def fsync_dir(self, path: str) -> None:
        path = self._dir(path)
        self.faults.check("fsync_dir", path)
        for p in set(self._entries) | set(self._durable_entries):
            if p != "/" and posixpath.dirname(p) == path:
                node = self._entries.get(p)
                if node is None:
                    self._durable_entries.pop(p, None)
                else:
                    self._durable_entries[p] = node

    def mtime_ms(self, path: str) -> int:
        return self._file(_norm(path)).mtime_ms

    def touch(self, path: str, mtime_ms: int) -> None:
        self._file(_norm(path)).mtime_ms = mtime_ms

    # -- faults -----------------------------------------------------------------

    def freeze(self) -> None:
        """The process using this disk dies now (``DiskFaults.freeze``; ``crash()`` ends it too)."""
        self.faults.freeze()

    def thaw(self) -> None:
        """Writes work again (``DiskFaults.thaw``)."""
        self.faults.thaw()

    def boot_id(self) -> str:
        """The simulated machine's boot: a new one after every ``crash()`` (a power cut reboots)."""
        return f"fake-boot-{self.crash_count}"

    def inject_error(self, op: str, path_contains: str = "", count: int = 1, errno_: int = errno.EIO) -> None:
        """Make the next ``count`` ``op`` calls on a path containing ``path_contains`` fail (``DiskFaults.inject``)."""
        self.faults.inject(op, path_contains, count, errno_)

    def clear_errors(self) -> None:
        """Drop the injected errors not yet raised."""
        self.faults.clear()

    @property
    def pending_errors(self) -> int:
        """Injected errors not yet raised."""
        return self.faults.pending

    def crash(self, mode: str = "random", rng: random.Random | None = None,
              dir_entry_keep_probability: float = 0.5) -> None:
        """Replace the state by one a machine crash could leave (module docstring)."""
        if mode != "random" and mode not in CRASH_MODES:
            raise ValueError(f"unknown crash mode {mode!r}")
        rng = rng if rng is not None else self.rng
        self._generation += 1
        self.crash_count += 1
        self.faults.reset()
        entries = self._crash_entries(mode, rng, dir_entry_keep_probability)
        for path in sorted(entries):
            node = entries[path]
            if isinstance(node, _File):
                file_mode = rng.choice(CRASH_MODES) if mode == "random" else mode
                node.data = bytearray(_crashed_contents(bytes(node.data), node.durable, file_mode, rng))
                node.durable = bytes(node.data)
        self._entries = entries
        self._durable_entries = dict(entries)

    def flip_byte(self, path: str, position: int) -> None:
        """Bit rot: flip every bit of one byte, durable or not."""
        node = self._file(_norm(path))
        node.data[position] ^= 0xFF
        if position < len(node.durable):
            durable = bytearray(node.durable)
            durable[position] ^= 0xFF
            node.durable = bytes(durable)

    # -- inspection and setup for tests -------------------------------------------

    def read_file(self, path: str) -> bytes:
        """Current contents (what a read sees now, flushed or not)."""
        return bytes(self._file(_norm(path)).data)

    def durable_size(self, path: str) -> int:
        """Bytes that survive any crash (as of the last fsync)."""
        return len(self._file(_norm(path)).durable)

    def write_file(self, path: str, data: bytes, *, durable: bool = True) -> None:
        """Create or replace a file with ``data`` (its directory entry made durable too)."""
        path = _norm(path)
        self.makedirs(posixpath.dirname(path))
        node = _File(self.clock_ms())
        node.data = bytearray(data)
        node.durable = bytes(data) if durable else b""
        self._entries[path] = node
        self._durable_entries[path] = node
        parent = posixpath.dirname(path)
        while parent != "/":
            self._durable_entries[parent] = self._entries[parent]
            parent = posixpath.dirname(parent)

    def is_durable_entry(self, path: str) -> bool:
        path = _norm(path)
        return self._durable_entries.get(path) is self._entries.get(path)

    # -- internals ----------------------------------------------------------------

    def _crash_entries(self, mode: str, rng: random.Random, keep_p: float) -> dict[str, _File | _Dir]:
        kept: dict[str, _File | _Dir] = {}
        for path in sorted(set(self._entries) | set(self._durable_entries), key=lambda p: (p.count("/"), p)):
            now, durable = self._entries.get(path), self._durable_entries.get(path)
            node = now if now is durable or mode == "keep_all" or rng.random() < keep_p else durable
            parent = posixpath.dirname(path)
            if node is not None and (path == "/" or isinstance(kept.get(parent), _Dir)):
                kept[path] = node
        return kept

    def _file(self, path: str) -> _File:
        node = self._entries.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if not isinstance(node, _File):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        return node

    def _dir(self, path: str) -> str:
        path = _norm(path)
        node = self._entries.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        if not isinstance(node, _Dir):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return path


class FakeReader:
    """A ``FakeSegmentFile``'s ``reader``: reads its bytes after the file's ``close()`` too (a
    ``FileRegion`` in flight holds it, as a real one holds its descriptor), never after a crash."""

    __slots__ = ("_fs", "path", "_node", "_generation")

    def __init__(self, fs: FakeFileSystem, path: str, node: _File):
        self._fs, self.path, self._node = fs, path, node
        self._generation = fs._generation

    def pread(self, position: int, n: int) -> bytes:
        if self._generation != self._fs._generation:
            raise RuntimeError(f"{self.path}: file handle from before a crash")
        assert position >= 0 and n >= 0, (position, n)
        return bytes(self._node.data[position:position + n])

    def fileno(self) -> int:
        raise io.UnsupportedOperation("FakeFileSystem files have no descriptor; use pread")


class FakeSegmentFile:
    """An open file of a ``FakeFileSystem``; it outlives the directory entry, as on POSIX."""

    __slots__ = ("_fs", "path", "_node", "_generation", "_closed", "reader")

    def __init__(self, fs: FakeFileSystem, path: str, node: _File):
        self._fs, self.path, self._node = fs, path, node
        self._generation = fs._generation
        self._closed = False
        self.reader = FakeReader(fs, path, node)

    @property
    def size(self) -> int:
        return len(self._node.data)

    def append(self, data: bytes | memoryview) -> None:
        self._check()
        try:
            self._fs.faults.check("write", self.path)
        except OSError:
            self._node.data += bytes(data)[: self._fs.rng.randint(0, len(data))]  # a torn write
            raise
        self._node.data += data
        self._node.mtime_ms = self._fs.clock_ms()

    def pread(self, position: int, n: int) -> bytes:
        self._check()
        return self.reader.pread(position, n)

    def fileno(self) -> int:
        return self.reader.fileno()

    def fsync(self) -> None:
        self._check()
        self._fs.faults.check("fsync", self.path)
        self._node.durable = bytes(self._node.data)

    def truncate(self, size: int) -> None:
        self._check()
        self._fs.faults.check("truncate", self.path)
        node = self._node
        if size < len(node.data):
            del node.data[size:]
        else:
            node.data += bytes(size - len(node.data))
        node.mtime_ms = self._fs.clock_ms()

    def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._generation != self._fs._generation:
            raise RuntimeError(f"{self.path}: file handle from before a crash")
        if self._closed:
            raise ValueError(f"{self.path}: I/O on a closed file")

    def __repr__(self) -> str:
        return f"FakeSegmentFile({self.path!r}, size={self.size})"


def _norm(path: str) -> str:
    return posixpath.normpath(posixpath.join("/", path))


def _crashed_contents(now: bytes, durable: bytes, mode: str, rng: random.Random) -> bytes:
    """What a file holds after a crash in ``mode`` (module docstring)."""
    if mode == "keep_all" or now == durable:
        return now
    if now.startswith(durable):
        base, volatile = durable, now[len(durable):]
    else:  # truncated or rewritten since the last fsync: either version may win
        common = len(os.path.commonprefix([now, durable]))
        target = rng.choice([now, durable])
        base, volatile = target[:common], target[common:]
    if not volatile:
        return base
    kept = rng.randint(0, len(volatile))
    room = len(volatile) - kept
    if mode == "prefix" or room == 0 and mode in ("zeros", "garbage"):
        return base + volatile[:kept]
    if mode == "zeros":
        return base + volatile[:kept] + bytes(rng.randint(1, room))
    if mode == "garbage":
        return base + volatile[:kept] + rng.randbytes(rng.randint(1, room))
    assert mode == "flip", mode
    tail = bytearray(volatile[:max(kept, 1)])
    for _ in range(rng.randint(1, 3)):
        tail[rng.randrange(len(tail))] ^= rng.randint(1, 255)
    return base + bytes(tail)
