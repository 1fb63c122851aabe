"""Processors, each listener's (0.7 and Kafka): 0.7's "N processor threads which handle a fixed number of
connections each".

In Trio a processor is a task that owns a nursery of connection tasks.  The
acceptor hands each new connection to the next processor round-robin (as 0.7
does), so connections are supervised in ``num.threads`` groups and a
processor can be drained on shutdown.  They share one event loop: Python's
GIL makes processor *threads* useless for CPU work, and the I/O waits are
already concurrent.
"""

from __future__ import annotations

import logging
import socket
from typing import Awaitable, Callable, Protocol

import trio

logger = logging.getLogger(__name__)

# Connections queued for a processor before the acceptor waits (accept backpressure).
HANDOFF_QUEUE = 64


class ServedConnection(Protocol):
    """One connection of either listener: 0.7's ``ServedConnection07``, the Kafka protocol's
    ``ServedKafkaConnection``."""

    requests_handled: int

    async def run(self) -> None:
        """Serve until the peer leaves, breaks the protocol, or ``stop``."""

    def stop(self) -> None:
        """Finish the requests already received, then close."""


# How a processor serves a stream it was handed: (stream, peer name) -> its connection.
ConnectionFactory = Callable[[trio.abc.Stream, str], ServedConnection]
# A TLS listener's handshake (``security.TlsAcceptance.secure``): the secured stream, or None when
# the peer failed it (already closed and logged).
Secure = Callable[[trio.abc.Stream, str], Awaitable[trio.abc.Stream | None]]


def _nothing_to_release() -> None:
    pass


def _is_unix_socket(stream: trio.abc.Stream) -> bool:
    """A connection of the Unix-domain listener, which passes descriptors (§9.8) and never takes TLS."""
    return isinstance(stream, trio.SocketStream) and stream.socket.family == socket.AF_UNIX


class Processor:
    """Runs the connections handed to it; start with ``nursery.start(processor.run)``."""

    def __init__(self, index: int, make_connection: ConnectionFactory, secure: Secure | None = None):
        self.index = index
        self._make_connection = make_connection
        self._secure = secure
        self._send, self._receive = trio.open_memory_channel[
            tuple[trio.abc.Stream, str, Callable[[], None]]](HANDOFF_QUEUE)
        self._connections: set[ServedConnection] = set()
        self._draining = False
        self.connections_served = 0

    @property
    def connections(self) -> frozenset[ServedConnection]:
        return frozenset(self._connections)

    async def hand_off(self, stream: trio.abc.Stream, peer: str,
                       release: Callable[[], None] = _nothing_to_release) -> None:
        """Give a new connection to this processor (waits if its queue is full); ``release()`` is
        called once when the connection is over (the acceptor's per-address count, §18.4)."""
        try:
            await self._send.send((stream, peer, release))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            release()
            await trio.aclose_forcefully(stream)  # processor already draining

    def drain(self) -> None:
        """Shutdown: take no more connections; let each live one finish what it received."""
        self._draining = True
        self._send.close()
        for connection in list(self._connections):
            connection.stop()

    async def run(self, *, task_status: trio.TaskStatus[Processor] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            async with self._receive:
                async for stream, peer, release in self._receive:
                    if self._draining:  # queued before the drain: refuse it
                        release()
                        await trio.aclose_forcefully(stream)
                        continue
                    if self._secure is None or _is_unix_socket(stream):  # local: never TLS (§18.1)
                        connection = self._make_connection(stream, peer)
                        self._connections.add(connection)
                        nursery.start_soon(self._run_connection, connection, release)
                    else:  # the handshake runs in the connection's own task, never in this loop
                        nursery.start_soon(self._run_secured, stream, peer, release)
        logger.debug("processor %d drained", self.index)

    async def _run_secured(self, stream: trio.abc.Stream, peer: str, release: Callable[[], None]) -> None:
        assert self._secure is not None
        try:
            secured = await self._secure(stream, peer)
        except BaseException:
            release()
            raise
        if secured is None or self._draining:
            release()
            if secured is not None:
                await trio.aclose_forcefully(secured)
            return
        connection = self._make_connection(secured, peer)
        self._connections.add(connection)
        await self._run_connection(connection, release)

    async def _run_connection(self, connection: ServedConnection, release: Callable[[], None]) -> None:
        self.connections_served += 1
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            release()
