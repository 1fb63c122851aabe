"""FETCH_LOCAL (docs/protocol.md §9.8): a segment file's descriptor instead of its bytes.

A client on the broker's machine, connected to the Unix-domain listener,
asks for FETCH's answer and gets the segment file's descriptor with the
range to read; it then reads the bytes with one ``pread`` from the page
cache.  The broker does no ``sendfile``, and no socket buffer holds the
bytes: HDFS's short-circuit local reads, for a 0.7 log.

What this module guarantees:

* The answer is FETCH's (``RequestHandler.fetch_part``): same error, same range;
  an answer that goes inline is bounded by the request's ``inlineMaxSize``.
* The descriptor passed is a new, read-only one for the same file, opened
  here; the broker's own descriptor (open for appending) never leaves it.
* Anything that is not one plain range of one real file (TCP, an error, an
  empty answer, a compacted log's synthesized padding, the fake file system)
  goes inline, framed as in §9.8, so FETCH_LOCAL works on every connection.
"""

from __future__ import annotations

import array
import os
import socket
from typing import Protocol, TypeVar

import trio

from trikafka.wire.errors import ErrorCode
from trikafka.wire.requests import FetchLocalRequest, FetchPart
from trikafka.wire.responses import FetchData, FileRegion, encode_fetch_local_descriptor, encode_fetch_local_response

from .sendfile import region_fd, send_chunks


def passes_descriptors(stream: trio.abc.Stream) -> bool:
    """Whether answers on ``stream`` may carry descriptors: a Unix-domain socket's only."""
    sock = stream.socket if isinstance(stream, trio.SocketStream) else None
    return sock is not None and sock.family == socket.AF_UNIX and hasattr(sock, "sendmsg")


# A handler's fetch outcome: what its ``fetch_part`` gives is what its ``count_fetched`` takes.
Outcome = TypeVar("Outcome", bound=tuple[ErrorCode, FetchData])


class FetchAnswers(Protocol[Outcome]):
    """What FETCH_LOCAL asks of the 0.7 request handler."""

    def fetch_part(self, part: FetchPart) -> Outcome: ...

    def count_fetched(self, part: FetchPart, outcome: Outcome) -> None: ...


async def answer_fetch_local(stream: trio.abc.Stream, request: FetchLocalRequest, handler: FetchAnswers[Outcome], *,
                             descriptors: bool) -> None:
    """Answer FETCH_LOCAL: FETCH's answer for ``request.part`` as a descriptor where
    ``descriptors`` allows and that answer is one range of a real file; else inline, FETCH's
    answer for ``request.inline_part`` (the same one, unless the client asked for a larger
    range than its buffer holds: docs §9.8)."""
    code, data = outcome = handler.fetch_part(request.part)
    if descriptors and code == ErrorCode.NO_ERROR and isinstance(data, FileRegion) and data.length:
        readonly = _reopen_read_only(data)
        if readonly is not None:
            handler.count_fetched(request.part, outcome)
            try:
                await _send_with_descriptor(stream, encode_fetch_local_descriptor(data), readonly)
            finally:
                os.close(readonly)  # the message in flight holds its own reference
            return
    if code == ErrorCode.NO_ERROR and request.inline_part != request.part:
        code, data = outcome = handler.fetch_part(request.inline_part)
    handler.count_fetched(request.inline_part, outcome)
    await send_chunks(stream, encode_fetch_local_response(code, data))


def _reopen_read_only(region: FileRegion) -> int | None:
    """A new read-only descriptor for the region's file, or None where there is none to give.

    Opened through ``/proc/self/fd`` on the event loop, on purpose: the file is
    open already, so this reads no disk, and doing it in the same step as the
    fetch means retention cannot close the segment (freeing its descriptor
    number for another file) in between.
    """
    fd = region_fd(region)
    if fd is None:
        return None
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no /proc (not Linux): the bytes go inline


async def _send_with_descriptor(stream: trio.abc.Stream, frame: bytes, fd: int) -> None:
    assert isinstance(stream, trio.SocketStream)
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
    sent = await stream.socket.sendmsg([frame], rights)  # the descriptor rides on these bytes
    if sent < len(frame):
        await stream.send_all(frame[sent:])
