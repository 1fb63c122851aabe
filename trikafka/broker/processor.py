"""Processors: 0.7's "N processor threads which handle a fixed number of connections each".

In Trio a processor is a task that owns a nursery of connection tasks.  The
acceptor hands each new connection to the next processor round-robin (as 0.7
does), so connections are supervised in ``num.threads`` groups and a
processor can be drained on shutdown.  They share one event loop: Python's
GIL makes processor *threads* useless for CPU work, and the I/O waits are
already concurrent.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

import trio

logger = logging.getLogger(__name__)

# Connections queued for a processor before the acceptor waits (accept backpressure).
HANDOFF_QUEUE = 64


class ServedConnection(Protocol):
    """One connection of either listener (0.7's ``Connection``, the Kafka protocol's ``KafkaConnection``)."""

    requests_handled: int

    async def run(self) -> None:
        """Serve until the peer leaves, breaks the protocol, or ``stop``."""

    def stop(self) -> None:
        """Finish the requests already received, then close."""


# How a processor serves a stream it was handed: (stream, peer name) -> its connection.
ConnectionFactory = Callable[[trio.abc.Stream, str], ServedConnection]


class Processor:
    """Runs the connections handed to it; start with ``nursery.start(processor.run)``."""

    def __init__(self, index: int, make_connection: ConnectionFactory):
        self.index = index
        self._make_connection = make_connection
        self._send, self._receive = trio.open_memory_channel[tuple[trio.abc.Stream, str]](HANDOFF_QUEUE)
        self._connections: set[ServedConnection] = set()
        self._draining = False
        self.connections_served = 0

    @property
    def connections(self) -> frozenset[ServedConnection]:
        return frozenset(self._connections)

    async def hand_off(self, stream: trio.abc.Stream, peer: str) -> None:
        """Give a new connection to this processor (waits if its queue is full)."""
        try:
            await self._send.send((stream, peer))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
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
                async for stream, peer in self._receive:
                    if self._draining:  # queued before the drain: refuse it
                        await trio.aclose_forcefully(stream)
                        continue
                    connection = self._make_connection(stream, peer)
                    self._connections.add(connection)
                    nursery.start_soon(self._run_connection, connection)
        logger.debug("processor %d drained", self.index)

    async def _run_connection(self, connection: ServedConnection) -> None:
        self.connections_served += 1
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
