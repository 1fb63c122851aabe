"""The file-system boundary of the log core: a small protocol and two implementations.

Every byte the log stores goes through a ``FileSystem``, so tests run the same
code over ``FakeFileSystem`` (in memory, with a crash model; see ``trikafka.testing.fakefs``)
that production runs over ``OsFileSystem``.

Durability rules the log relies on (the POSIX ones, which the fake enforces):

* file data is durable only after ``SegmentFile.fsync``;
* a created or removed directory entry is durable only after ``fsync_dir``
  of its parent directory.

``SegmentFile.fsync`` may be called from a worker thread while the event loop
keeps appending to the same file; both implementations allow that.
"""

from __future__ import annotations

import errno
import os
from typing import Protocol, runtime_checkable

__all__ = ["Descriptor", "FileSystem", "RegionSource", "SegmentFile", "OsFileSystem", "OsSegmentFile", "read_boot_id"]

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """The boot id in ``path`` (Linux changes it at every boot), or None where there is none. Blocking."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


@runtime_checkable
class RegionSource(Protocol):
    """What a ``FileRegion`` reads: ``pread``, and ``fileno`` for sendfile (the fake raises
    ``io.UnsupportedOperation`` from ``fileno``, so a sender must fall back to ``pread``)."""

    def pread(self, position: int, n: int) -> bytes: ...
    def fileno(self) -> int: ...


@runtime_checkable
class SegmentFile(Protocol):
    """An open segment file: appended at the end, read anywhere.

    ``size`` counts every byte appended, flushed or not.  ``reader`` is the
    ``source`` of the ``FileRegion`` a read returns: it reads the same file,
    and keeps reading it after ``close()`` (docs/protocol.md §16.4: a fetch
    answer being sent holds the files it reads).  ``close()`` lets go of the
    file; its descriptor closes once no ``reader`` reference is left either.
    """

    size: int

    @property
    def reader(self) -> RegionSource: ...

    def append(self, data: bytes | memoryview) -> None: ...
    def pread(self, position: int, n: int) -> bytes: ...
    def fileno(self) -> int: ...
    def fsync(self) -> None: ...
    def truncate(self, size: int) -> None: ...
    def close(self) -> None: ...


@runtime_checkable
class FileSystem(Protocol):
    """What the log needs from a file system; paths are ``os.path``-style strings."""

    def listdir(self, path: str) -> list[str]: ...
    def makedirs(self, path: str) -> None: ...  # like os.makedirs(exist_ok=True)
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def open_segment(self, path: str, create: bool) -> SegmentFile: ...  # create: must not exist yet
    def create_file(self, path: str) -> None: ...  # a new empty file, fsynced (the clean-shutdown marker)
    def write_synced(self, path: str, data: bytes) -> None: ...  # create or truncate, write, fsync the file
    def read_file(self, path: str) -> bytes: ...  # a small file's whole contents
    def rename(self, src: str, dst: str) -> None: ...  # atomic replace of dst; durable after fsync_dir
    def remove(self, path: str) -> None: ...
    def remove_dir(self, path: str) -> None: ...  # an empty directory; durable after fsync_dir of its parent
    def fsync_dir(self, path: str) -> None: ...
    def mtime_ms(self, path: str) -> int: ...
    def touch(self, path: str, mtime_ms: int) -> None: ...  # set the modification time
    def boot_id(self) -> str | None: ...  # the machine's current boot; None where unknown


class Descriptor:
    """An open file descriptor, closed when the last reference to this object goes.

    An ``OsSegmentFile`` and every ``FileRegion`` read from it share one, so
    the descriptor outlives the file's ``close()`` while a fetch answer still
    reads it (POSIX keeps an unlinked file readable until then), and its number
    is never reused under that answer.  The last holder closes it: a worker
    thread's ``close()`` when no region holds it (the last close of an unlinked
    file frees its blocks, a long wait for a large one), else the answer's end.
    """

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def pread(self, position: int, n: int) -> bytes:
        return os.pread(self.fd, n, position)

    def fileno(self) -> int:
        return self.fd

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)

    def __repr__(self) -> str:
        return f"Descriptor({self.fd})"


CLOSED_DESCRIPTOR = Descriptor(-1)  # what a closed file reads through: every read fails (EBADF)


class OsSegmentFile:
    """A segment file over a raw descriptor (``O_APPEND``: every write lands at the end).

    ``reader`` owns the descriptor (``Descriptor``); ``close()`` lets go of it,
    and so does the garbage collector when the last reference to the file goes.
    """

    __slots__ = ("path", "size", "reader")

    def __init__(self, path: str, create: bool):
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        self.reader = Descriptor(os.open(path, flags, 0o644))
        self.path = path
        self.size = os.fstat(self.reader.fd).st_size

    def append(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        total = len(view)
        written = 0
        while written < total:  # a regular-file write may be short (ENOSPC part-way, signals)
            n = os.write(self.reader.fd, view[written:])
            if n <= 0:
                raise OSError(errno.EIO, f"write returned {n}", self.path)
            written += n
            self.size += n

    # The calls a worker thread makes hold ``reader`` across the call: a close() meanwhile
    # cannot free the descriptor's number for another file under it.

    def pread(self, position: int, n: int) -> bytes:
        return self.reader.pread(position, n)

    def fileno(self) -> int:
        return self.reader.fd

    def fsync(self) -> None:
        reader = self.reader
        os.fsync(reader.fd)

    def truncate(self, size: int) -> None:
        reader = self.reader
        os.ftruncate(reader.fd, size)
        self.size = size

    def close(self) -> None:
        """Let go of the descriptor: it closes here unless a ``FileRegion`` still reads it."""
        self.reader = CLOSED_DESCRIPTOR

    def __repr__(self) -> str:
        return f"OsSegmentFile({self.path!r}, size={self.size})"


class OsFileSystem:
    """The real file system (``os`` calls only; no buffering in between)."""

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) and not os.path.islink(path)

    def open_segment(self, path: str, create: bool) -> OsSegmentFile:
        return OsSegmentFile(path, create)

    def create_file(self, path: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_synced(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def remove_dir(self, path: str) -> None:
        os.rmdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def touch(self, path: str, mtime_ms: int) -> None:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns))

    def boot_id(self) -> str | None:
        """This machine's boot id: it changes at every boot, so a crash that could have
        dropped unflushed writes (a reboot) shows as a new one.  Blocking."""
        return read_boot_id()
