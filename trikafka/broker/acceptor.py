"""The acceptor: listens, accepts, and hands connections to processors round-robin.

Each listener has one (the 0.7 port, and the Kafka port of docs/protocol.md
§16.1).  It listens on the TCP port and, when configured (the 0.7 listener),
on a Unix-domain socket too (§2: the same protocol, for clients on this
machine).

Like ``trio.serve_listeners``, errors are classified: running out of file
descriptors or memory (``ACCEPT_CAPACITY_ERRNOS``) is an overload, logged and
retried after a short pause; any other ``OSError`` propagates and brings the
broker down, because a listener that fails that way will not recover.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import socket
import stat
from dataclasses import dataclass
from typing import Sequence

import trio

from .processor import Processor

logger = logging.getLogger(__name__)

ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
# How long to back off after a capacity error: long enough for connections to
# close and free descriptors, short enough not to be noticed (trio uses the same).
ACCEPT_RETRY_S = 0.100
# A Unix-domain socket has no send-buffer autotuning and a small default (about 200 KiB),
# so a large fetch would go out in many partial sendfile calls, each a trip through the
# event loop: its connections get a send buffer that holds a 4 MiB fetch whole (the kernel
# caps it at net.core.wmem_max).
UNIX_SEND_BUFFER_BYTES = 4 << 20


class ConnectionQuota:
    """Open connections per client IP address, over every listener that shares it (§18.4:
    ``max.connections.per.ip``).  Unix-domain socket connections are not counted."""

    def __init__(self, max_per_address: int):
        self.max_per_address = max_per_address
        self._open: dict[str, int] = {}
        self.refused = 0

    def admit(self, address: str) -> bool:
        """Count one more connection from ``address``, or False (not counted) when it is at the limit."""
        count = self._open.get(address, 0)
        if count >= self.max_per_address:
            self.refused += 1
            return False
        self._open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        """One connection from ``address`` is over."""
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)


@dataclass(frozen=True)
class BoundAddress:
    """Where the broker listens (the port is the real one even when 0 was asked)."""

    host: str
    port: int


class Acceptor:
    """Owns the listening sockets; ``nursery.start(acceptor.run)`` returns the addresses.

    It listens from the start but takes no connection off the backlog until
    :meth:`start_accepting` names the processors: clients that connect early wait
    in the kernel.  So the broker binds first, and builds what serves the
    connections once it knows its ports (its registration, docs/protocol.md §8.2,
    holds the bound port).
    """

    def __init__(self, host: str, port: int, *,
                 socket_send_buffer: int = 0, socket_receive_buffer: int = 0,
                 unix_socket_path: str | None = None, quota: ConnectionQuota | None = None):
        # start_accepting hands the processors to the running accept loops, once.
        self._give_processors, self._given_processors = trio.open_memory_channel[list[Processor]](1)
        self._host = host
        self._port = port
        self._send_buffer = socket_send_buffer
        self._receive_buffer = socket_receive_buffer
        self._unix_path = unix_socket_path
        self._quota = quota
        self.connections_accepted = 0

    async def run(self, *, task_status: trio.TaskStatus[list[BoundAddress]] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self._port, host=self._host)
        except OSError as exc:  # name the endpoint: "address in use" alone does not say which
            raise OSError(exc.errno, f"broker port {self._host}:{self._port}: {exc.strerror or exc}") from exc
        unix_listener = None
        try:
            for listener in listeners:
                self._tune(listener.socket)
            bound = [BoundAddress(*listener.socket.getsockname()[:2]) for listener in listeners]
            if self._unix_path is not None:
                unix_listener = await _open_unix_listener(self._unix_path)
                self._tune(unix_listener.socket)
                listeners.append(unix_listener)
            task_status.started(bound)
            processors = await self._given_processors.receive()
            next_processor = itertools.cycle(processors)
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener, next_processor)
        finally:
            # Usually reached by cancellation: shielded, so that the socket file is removed too.
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await trio.aclose_forcefully(listener)
                if unix_listener is not None and self._unix_path is not None:
                    await trio.to_thread.run_sync(_remove_socket_file, self._unix_path)

    def start_accepting(self, processors: Sequence[Processor]) -> None:
        """Begin accepting, handing each connection to the next of ``processors`` (once)."""
        assert processors, "at least one processor"
        self._give_processors.send_nowait(list(processors))

    def _tune(self, sock: trio.socket.SocketType) -> None:
        # Set on the listening socket so accepted sockets inherit the sizes from
        # the start (the window scale is fixed at the handshake).
        if self._send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if self._receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)

    async def _accept_loop(self, listener: trio.SocketListener, next_processor: "itertools.cycle[Processor]") -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                logger.error("accept failed (%s); retrying in %.0f ms", errno.errorcode.get(exc.errno, exc.errno),
                             ACCEPT_RETRY_S * 1000)
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            self.connections_accepted += 1
            unix = stream.socket.family == socket.AF_UNIX
            if unix and self._send_buffer <= 0:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BUFFER_BYTES)
            peer = _peer_name(stream)
            if unix or self._quota is None:
                await next(next_processor).hand_off(stream, peer)
                continue
            address = peer.rpartition(":")[0]
            if not self._quota.admit(address):
                logger.info("refusing a connection from %s: %d open from that address (max.connections.per.ip)",
                            peer, self._quota.max_per_address)
                await trio.aclose_forcefully(stream)
                continue
            await next(next_processor).hand_off(stream, peer, functools.partial(self._quota.release, address))


async def _open_unix_listener(path: str) -> trio.SocketListener:
    """Listen on a Unix-domain socket at ``path``, replacing a stale socket file there."""
    await trio.to_thread.run_sync(_remove_socket_file, path)  # file system calls: off the loop
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


def _remove_socket_file(path: str) -> None:
    """Remove the socket file at ``path`` if there is one; anything else there is an error."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, f"unix.socket.path {path} exists and is not a socket")
    os.unlink(path)


def _peer_name(stream: trio.SocketStream) -> str:
    if stream.socket.family == socket.AF_UNIX:
        return "unix-socket"
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
