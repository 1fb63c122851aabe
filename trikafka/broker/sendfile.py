"""Writing response chunks, with zero-copy for file regions (design doc "Maximizing Efficiency").

A fetch response is a list of chunks (``trikafka.wire.responses``): header
bytes, then message-set data as ``bytes`` or a ``FileRegion`` of a segment
file.  On a real socket a region goes out with ``os.sendfile`` from the
segment's descriptor straight into the socket, so message bytes never enter
user space.  Trio has no sendfile (python-trio/trio#45), so this calls it on
the non-blocking socket and parks in ``trio.lowlevel.wait_writable`` on
EAGAIN.

Streams without a socket (a TLS stream, which encrypts in user space, and
in-memory test streams) take the fallback (docs/protocol.md §18.1): the
region is read in a worker thread in pieces of ``FALLBACK_PIECE_BYTES``, each
written with ``send_all`` before the next is read.  Files without a
descriptor (the fake file system) are in memory: read on the loop.

Cold regions (njsmith's caveat in trio#45): sendfile of bytes that are not in
the page cache blocks the event loop on the disk read, and with it every other
client.  So before a region goes out, ``page_cache_resident`` asks the kernel
(``mincore`` on a short-lived mapping: no data is copied or faulted in)
whether all its pages are cached.  Hot regions, the common case since
consumers read recent data, go out with sendfile at once.  For a region with
any page missing, a worker thread asks the kernel to read it ahead
(``posix_fadvise(WILLNEED)``) and waits for its first ``COLD_READ_CHUNK_BYTES``
with a ``pread``; each chunk goes out with sendfile once cached (a chunk still
missing is waited for in a thread again), so only that client waits for the
disk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import mmap
import os
import sys
from typing import Callable, Iterable

import trio

from trikafka.wire.responses import Chunk, FileRegion

# A cold region is waited for and sent in pieces of this size: small enough
# that sending starts soon, large enough that thread hops stay few.
COLD_READ_CHUNK_BYTES = 256 << 10

ResidencyCheck = Callable[[int, int, int], bool]


FALLBACK_PIECE_BYTES = 1 << 20  # a region sent without sendfile goes out in pieces of this size


class RegionTruncatedError(OSError):
    """The file ended before the region did: the response cannot be completed."""


async def send_chunks(stream: trio.abc.SendStream, chunks: Iterable[Chunk],
                      resident: ResidencyCheck | None = None) -> None:
    """Send ``chunks`` in order; adjacent ``bytes`` go out in one ``send_all``, and so do the regions of
    an in-memory file (no descriptor: the fake file system) up to ``FALLBACK_PIECE_BYTES`` each.

    ``resident(fd, position, length)`` says whether a file region is in the
    page cache (default ``page_cache_resident``; tests inject their own).
    """
    pending: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, FileRegion):
            if chunk.length <= FALLBACK_PIECE_BYTES and region_fd(chunk) is None:
                pending.append(chunk.read())  # an in-memory file's bytes join the send around them
                continue
            if pending:
                await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))
                pending = []
            await send_region(stream, chunk, resident)
        else:
            pending.append(chunk)
    if pending:
        await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))


def region_fd(region: FileRegion) -> int | None:
    try:
        fd = region.source.fileno()
    except (AttributeError, io.UnsupportedOperation, OSError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


async def send_region(stream: trio.abc.SendStream, region: FileRegion,
                      resident: ResidencyCheck | None = None) -> None:
    """Send one file region: sendfile on a socket stream, else the read fallback;
    bytes not in the page cache are first waited for in a worker thread."""
    if region.length == 0:
        return
    fd = region_fd(region)
    if fd is None:
        await _send_read(stream, region)  # an in-memory file: nothing to wait for
        return
    sock = getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
    check = resident or page_cache_resident
    if not check(fd, region.position, region.length):
        await _send_cold(stream, sock, fd, region, check)
    elif sock is None:
        await _send_read(stream, region, off_loop=True)
    else:
        await _sendfile(sock, fd, region.position, region.length)


async def _send_read(stream: trio.abc.SendStream, region: FileRegion, *, off_loop: bool = False) -> None:
    """The fallback without sendfile: read and send, never more than one piece of the region in
    memory at once; ``off_loop`` reads each piece in a worker thread (a file with a descriptor)."""
    for start in range(0, region.length, FALLBACK_PIECE_BYTES):
        piece = FileRegion(region.source, region.position + start, min(FALLBACK_PIECE_BYTES, region.length - start))
        await stream.send_all(await trio.to_thread.run_sync(piece.read) if off_loop else piece.read())


async def _send_cold(stream: trio.abc.SendStream, sock: trio.socket.SocketType | None, fd: int,
                     region: FileRegion, check: ResidencyCheck) -> None:
    # The first thread call asks the kernel to read the whole region ahead
    # (WILLNEED), so later chunks stream in while earlier ones are sent.  Each
    # chunk still missing is read in a thread; then sendfile finds it cached.
    position, remaining = region.position, region.length
    prefetch_bytes = remaining
    while remaining > 0:
        n = min(remaining, COLD_READ_CHUNK_BYTES)
        data = None
        if prefetch_bytes or not check(fd, position, n):
            data = await trio.to_thread.run_sync(_read_ahead, region.source, fd, position, n, prefetch_bytes)
            prefetch_bytes = 0
            if len(data) != n:
                raise RegionTruncatedError(f"file ended with {remaining - len(data)} bytes of the region unread")
        if sock is not None:
            await _sendfile(sock, fd, position, n)
        else:
            await stream.send_all(data if data is not None else region.source.pread(position, n))
        position += n
        remaining -= n


def _read_ahead(source: object, fd: int, position: int, n: int, prefetch_bytes: int) -> bytes:
    """Blocking (a worker thread's job): start reading ``prefetch_bytes`` ahead, wait for ``n``."""
    if prefetch_bytes and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, position, prefetch_bytes, os.POSIX_FADV_WILLNEED)
    return source.pread(position, n)  # type: ignore[attr-defined]


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int64]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(b & 1 for b in range(256))


def page_cache_resident(fd: int, position: int, length: int) -> bool:
    """Whether every page of bytes ``[position, position + length)`` of ``fd`` is in the page cache.

    Maps the range (no page is faulted in), asks ``mincore``, unmaps: a few
    microseconds, no data copied, safe on the event loop.  Where this cannot
    be asked (no Linux libc), it answers True: the old behaviour, sendfile.
    A failed mapping answers False, so the read goes to a thread.
    """
    if _LIBC is None:
        return True
    if length <= 0:
        return True
    page = mmap.PAGESIZE
    start = position - position % page
    span = position + length - start
    addr = _LIBC.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr is None or addr == _MAP_FAILED:
        return False
    try:
        pages = (span + page - 1) // page
        vector = (ctypes.c_ubyte * pages)()
        if _LIBC.mincore(addr, span, vector) != 0:
            return False
        return b"\x00" not in bytes(vector).translate(_LOW_BIT)  # only the low bit is defined
    finally:
        _LIBC.munmap(addr, span)


async def _sendfile(sock: trio.socket.SocketType, in_fd: int, position: int, length: int) -> None:
    # The caller holds the region, whose source owns in_fd (a segment file's
    # ``reader``), so in_fd stays open and keeps its number even if the segment
    # is deleted and its file closed meanwhile (docs/protocol.md §16.4).
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
