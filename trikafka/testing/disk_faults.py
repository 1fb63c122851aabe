"""Which calls of a ``FakeFileSystem`` fail: injected errors and a dead process (``fakefs`` fault model).

``DiskFaults`` holds the faults a test armed: errors injected for the next
matching calls of one operation, and the frozen state in which the process
using the disk is gone and every write fails.  The file system asks it
before each operation that can fail (``check``); a crash disarms it.
"""

from __future__ import annotations

import errno
import os

FAULT_OPS = ("write", "fsync", "fsync_dir", "truncate", "open", "remove", "rename")


class _Fault:
    __slots__ = ("op", "path_contains", "count", "errno")

    def __init__(self, op: str, path_contains: str, count: int, errno_: int):
        self.op, self.path_contains, self.count, self.errno = op, path_contains, count, errno_


class DiskFaults:
    """The armed faults of one fake disk; ``check(op, path)`` raises the ``OSError`` due, if any."""

    __slots__ = ("_faults", "_frozen")

    def __init__(self) -> None:
        self._faults: list[_Fault] = []
        self._frozen = False  # see freeze()

    def inject(self, op: str, path_contains: str = "", count: int = 1, errno_: int = errno.EIO) -> None:
        """Make the next ``count`` ``op`` calls on a path containing ``path_contains`` fail."""
        if op not in FAULT_OPS:
            raise ValueError(f"unknown fault op {op!r}; expected one of {FAULT_OPS}")
        self._faults.append(_Fault(op, path_contains, count, errno_))

    @property
    def pending(self) -> int:
        """Injected errors not yet raised."""
        return len(self._faults)

    def clear(self) -> None:
        """Drop the injected errors not yet raised."""
        self._faults.clear()

    def freeze(self) -> None:
        """The process using this disk dies now: until ``thaw()`` (or a crash), every write,
        fsync, truncate, open, removal and rename fails with EIO, so clean-up code that a
        SIGKILL would never run (flushes, the clean-shutdown marker) leaves no trace."""
        self._frozen = True

    def thaw(self) -> None:
        """Writes work again (a new process on the same machine; the page cache kept everything)."""
        self._frozen = False

    def reset(self) -> None:
        """After a crash: nothing is armed and the new process may write."""
        self.clear()
        self.thaw()

    def check(self, op: str, path: str) -> None:
        """Raise the ``OSError`` an ``op`` on ``path`` meets now, if any (it uses up one injected error)."""
        if self._frozen:
            raise OSError(errno.EIO, f"{op} by a process that is gone", path)
        for fault in self._faults:
            if fault.op == op and fault.path_contains in path:
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
                raise OSError(fault.errno, f"injected {os.strerror(fault.errno)} on {op}", path)
