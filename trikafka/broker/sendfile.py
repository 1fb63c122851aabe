"""Writing response chunks, with zero-copy for file regions (design doc "Maximizing Efficiency").

A fetch response is a list of chunks (``trikafka.wire.responses``): header
bytes, then message-set data as ``bytes`` or a ``FileRegion`` of a segment
file.  On a real socket a region goes out with ``os.sendfile`` from the
segment's descriptor straight into the socket, so message bytes never enter
user space.  Trio has no sendfile (python-trio/trio#45), so this calls it on
the non-blocking socket and parks in ``trio.lowlevel.wait_writable`` on
EAGAIN.

Streams without a socket (in-memory test streams) and files without a
descriptor (the fake file system) take the fallback: ``pread`` + ``send_all``.

Caveat (njsmith's, in trio#45): sendfile of bytes that are not in the page
cache blocks the event loop on the disk read.  Kafka's consumers read recent
data, which is hot; a cold read costs one disk read of at most one fetch.
"""

from __future__ import annotations

import io
import os
from typing import Iterable

import trio

from trikafka.wire.responses import Chunk, FileRegion


FALLBACK_PIECE_BYTES = 1 << 20  # a region sent without sendfile goes out in pieces of this size


class RegionTruncatedError(OSError):
    """The file ended before the region did: the response cannot be completed."""


async def send_chunks(stream: trio.abc.SendStream, chunks: Iterable[Chunk]) -> None:
    """Send ``chunks`` in order; adjacent ``bytes`` go out in one ``send_all``."""
    pending: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, FileRegion):
            if pending:
                await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))
                pending = []
            await send_region(stream, chunk)
        else:
            pending.append(chunk)
    if pending:
        await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))


def _region_fd(region: FileRegion) -> int | None:
    try:
        fd = region.source.fileno()
    except (AttributeError, io.UnsupportedOperation, OSError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


async def send_region(stream: trio.abc.SendStream, region: FileRegion) -> None:
    """Send one file region: sendfile on a socket stream, else the read fallback."""
    if region.length == 0:
        return
    fd = _region_fd(region)
    sock = getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
    if fd is None or sock is None:
        if region.length <= FALLBACK_PIECE_BYTES:
            await stream.send_all(region.read())
            return
        for start in range(0, region.length, FALLBACK_PIECE_BYTES):  # never the whole region in memory
            piece = FileRegion(region.source, region.position + start, min(FALLBACK_PIECE_BYTES, region.length - start))
            await stream.send_all(piece.read())
        return
    await _sendfile(sock, fd, region.position, region.length)


async def _sendfile(sock: trio.socket.SocketType, in_fd: int, position: int, length: int) -> None:
    # The region keeps its SegmentFile alive (the caller holds it), so in_fd
    # stays open even if retention unlinks the segment meanwhile.
    out_fd = sock.fileno()
    await trio.lowlevel.checkpoint_if_cancelled()
    while length > 0:
        try:
            sent = os.sendfile(out_fd, in_fd, position, length)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            raise RegionTruncatedError(f"file ended with {length} bytes of the region unsent")
        position += sent
        length -= sent
    await trio.lowlevel.cancel_shielded_checkpoint()
