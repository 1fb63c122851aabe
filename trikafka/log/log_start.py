"""A Kafka-format log's start offset as DeleteRecords moved it, and its file (docs/protocol.md §16.6).

``LogStart.offset`` only grows.  ``raise_to`` moves it in memory (the loop's);
``store`` writes it durably (blocking: a worker thread's): the decimal offset
in ``.trikafka-log-start``, through a fsynced temporary file renamed over it
and a directory fsync.  Stores may run in several threads at once: each holds
one lock while it writes, and writes the offset it finds then, so the last
rename always carries the largest offset.
"""

from __future__ import annotations

import os
import threading

from .fs import FileSystem
from .swap import write_small_file

LOG_START_FILE = ".trikafka-log-start"


class LogStart:
    """The offset below which a Kafka-format log's records are deleted (0: none)."""

    __slots__ = ("_fs", "_path", "offset", "_stored", "_lock")

    def __init__(self, fs: FileSystem, dir_path: str, offset: int = 0):
        self._fs = fs
        self._path = os.path.join(dir_path, LOG_START_FILE)
        self.offset = offset
        self._stored = offset
        self._lock = threading.Lock()

    @classmethod
    def load(cls, fs: FileSystem, dir_path: str) -> "LogStart":
        """Read the stored offset (0 without the file, or with one that holds no offset).  Blocking."""
        path = os.path.join(dir_path, LOG_START_FILE)
        offset = 0
        if fs.exists(path):
            text = fs.read_file(path).decode("ascii", "replace").strip()
            offset = int(text) if text.isdigit() else 0
        return cls(fs, dir_path, offset)

    def raise_to(self, offset: int) -> bool:
        """Move the offset up to ``offset``; False (nothing changes) when it is not above it."""
        if offset <= self.offset:
            return False
        self.offset = offset
        return True

    def store(self) -> None:
        """Make the current offset durable, if it is not yet (blocking; raises ``OSError``)."""
        with self._lock:
            offset = self.offset
            if offset == self._stored:
                return
            temp = self._path + ".tmp"
            write_small_file(self._fs, temp, b"%d\n" % offset)
            self._fs.rename(temp, self._path)
            self._fs.fsync_dir(os.path.dirname(self._path))
            self._stored = offset

    def __repr__(self) -> str:
        return f"LogStart({self.offset})"
