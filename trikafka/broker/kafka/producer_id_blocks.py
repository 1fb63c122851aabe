"""Producer ids in blocks (docs/protocol.md §19.1).

``ProducerIds`` hands out ids from blocks of ``BLOCK_SIZE`` that it takes
durably before using them (from ZooKeeper in a cluster, from a file in the
log directory standalone), so an id is never handed out twice, across brokers
and restarts.
"""

from __future__ import annotations

import logging
import os
from typing import Awaitable, Callable

import trio

from trikafka.log.fs import FileSystem

logger = logging.getLogger(__name__)

BLOCK_SIZE = 1000
PRODUCER_IDS_FILE = ".trikafka-producer-ids"  # standalone: the next free block (§19.1)


class ProducerIds:
    """This broker's source of producer ids; ``take_block(size)`` durably takes ``size`` ids and
    returns the first."""

    def __init__(self, take_block: Callable[[int], Awaitable[int]]):
        self._take_block = take_block
        self._next = 0
        self._end = 0
        self._lock = trio.Lock()

    async def new_id(self) -> int:
        """A producer id no one has had."""
        async with self._lock:
            if self._next >= self._end:
                start = await self._take_block(BLOCK_SIZE)
                self._next, self._end = start, start + BLOCK_SIZE
                logger.info("producer ids %d-%d taken", start, start + BLOCK_SIZE - 1)
            found = self._next
            self._next += 1
            return found


def take_file_block(fs: FileSystem, log_dir: str, size: int) -> int:
    """Standalone: take ``size`` ids from ``<log-dir>/.trikafka-producer-ids``, durably.  Blocking."""
    path = os.path.join(log_dir, PRODUCER_IDS_FILE)
    start = 0
    if fs.exists(path):
        text = fs.read_file(path).decode(errors="replace").strip()
        if not text.isdigit():
            raise ValueError(f"{path} holds {text[:40]!r}, not the next producer id")
        start = int(text)
    fs.write_synced(f"{path}.tmp", f"{start + size}\n".encode())
    fs.rename(f"{path}.tmp", path)
    fs.fsync_dir(log_dir)
    return start
