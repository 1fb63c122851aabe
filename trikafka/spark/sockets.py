"""Blocking sockets for the Spark client: connecting, kernel time-outs, passed descriptors.

The client's half of FETCH_LOCAL (docs/protocol.md §9.8) lives here too: the
broker sends the answer's head with a segment file's descriptor attached
(``SCM_RIGHTS``), and the client reads the named range with ``pread``.  Every
descriptor received is the caller's to close, including any it did not expect
(the caller closes them all in one ``finally``, so none leaks on an error).
"""

from __future__ import annotations

import array
import errno
import os
import socket
import struct


def connect_unix(path: str, timeout_s: float) -> socket.socket:
    """A stream socket connected to the Unix-domain listener at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def use_kernel_timeouts(sock: socket.socket, timeout_s: float) -> None:
    """Blocking mode, with ``timeout_s`` enforced by the kernel on every send and receive
    call; where the platform lacks those options, Python's timeout mode instead."""
    seconds = int(timeout_s)
    value = struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    except (AttributeError, OSError):
        return  # the socket keeps the timeout it was created with
    sock.settimeout(None)


def describe_error(exc: OSError, timeout_s: float) -> str:
    """An OS error of a call, naming a kernel time-out (EAGAIN on a blocking socket) as one."""
    if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) or isinstance(exc, TimeoutError):
        return f"timed out after {timeout_s:g} s"
    return str(exc)


_INT = array.array("i").itemsize
# Room for two descriptors: one is the protocol, a second one is detected (and closed)
# rather than cut off by the kernel.
_ANCILLARY_BYTES = socket.CMSG_SPACE(2 * _INT)


class DescriptorError(OSError):
    """Ancillary data that FETCH_LOCAL never sends: cut off, or not descriptors."""


def receive_with_descriptors(sock: socket.socket, view: memoryview, fds: list[int]) -> int:
    """Fill ``view`` from the blocking ``sock``; descriptors that arrive with the bytes are
    appended to ``fds``.  Returns the bytes received: ``len(view)``, or fewer when the peer
    closed the connection first."""
    got = 0
    while got < len(view):
        n, ancillary, flags, _ = sock.recvmsg_into([view[got:]], _ANCILLARY_BYTES)
        for level, kind, data in ancillary:
            if level != socket.SOL_SOCKET or kind != socket.SCM_RIGHTS:
                raise DescriptorError(f"unexpected ancillary data (level {level}, type {kind})")
            passed = array.array("i")
            passed.frombytes(data[:len(data) - len(data) % _INT])
            fds.extend(passed)
        if flags & socket.MSG_CTRUNC:
            raise DescriptorError("more descriptors arrived than a FETCH_LOCAL answer carries")
        if n == 0:
            break
        got += n
    return got


def read_range(fd: int, view: memoryview, position: int) -> int:
    """``pread`` ``len(view)`` bytes of ``fd`` from ``position`` into ``view``; fewer only where
    the file ends first (it was truncated after the broker answered)."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], position + got)
        if n == 0:
            break
        got += n
    return got
