"""A range of a segment file that a broker granted through FETCH_LOCAL (docs/protocol.md §9.8).

The broker answers FETCH_LOCAL with a read-only descriptor of the segment file
and the range ``[position, position + length)`` of it that FETCH would have
sent, which stands for the log's bytes ``[offset, offset + length)``.  Visible
bytes never change, so the client keeps the descriptor and reads later fetches
inside the range from it with ``pread``, asking the broker again only past the
range's end: one request per segment instead of one per fetch.
"""

from __future__ import annotations

import os

from .sockets import read_range


class GrantedRegion:
    """The log's bytes ``[offset, offset + length)`` of one partition, at ``position`` in the
    file open as ``fd`` (owned: ``close()`` releases it)."""

    __slots__ = ("topic", "partition", "offset", "length", "_fd", "_position")

    def __init__(self, topic: str, partition: int, offset: int, fd: int, position: int, length: int):
        assert offset >= 0 and position >= 0 and length > 0, (offset, position, length)
        self.topic, self.partition, self.offset, self.length = topic, partition, offset, length
        self._fd, self._position = fd, position

    def covers(self, topic: str, partition: int, offset: int, size: int) -> bool:
        """Whether the log's bytes ``[offset, offset + size)`` of that partition lie inside."""
        return (self.offset <= offset and offset + size <= self.offset + self.length
                and self.partition == partition and self.topic == topic)

    def read_into(self, view: memoryview, offset: int) -> int:
        """Read the log's bytes from ``offset`` into ``view`` (at most to the range's end): the
        bytes read, fewer only where the file ends first (a follower truncated its log, §9.8).
        Raises ``OSError`` if the read fails."""
        assert self.offset <= offset <= self.offset + self.length and self._fd >= 0
        want = min(len(view), self.offset + self.length - offset)
        return read_range(self._fd, view[:want], self._position + offset - self.offset)

    def close(self) -> None:
        """Close the descriptor; idempotent."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
