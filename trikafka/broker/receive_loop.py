"""The reading side of a connection, for both listeners (docs/protocol.md §2, §16.2).

``ReceiveLoop.run`` reads the stream, gives each read to the connection's
parser and lets the connection handle every request that read completed,
until the peer closes or ``stop()``.  ``stop()`` cancels a read in progress at
once; requests already received whole are still handled, then the loop ends
(graceful shutdown).  Errors are the connection's: they propagate.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import trio

# One socket read.  Big enough for ~300 single-message PRODUCE requests or
# six 50-message batches per read, small enough to stay off glibc's mmap path.
RECEIVE_BYTES = 128 * 1024

# What a vanished peer raises: the connection ends without a word.
PEER_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError)


class ReceiveLoop:
    """Reads one stream for its connection; see the module docstring."""

    def __init__(self, stream: trio.abc.Stream):
        self._stream = stream
        self._stopping = False
        self._receive_scope: trio.CancelScope | None = None

    def stop(self) -> None:
        """Finish the requests already received, then end (graceful shutdown)."""
        self._stopping = True
        if self._receive_scope is not None:
            self._receive_scope.cancel()

    async def run(self, feed: Callable[[bytes | bytearray], None], handle_received: Callable[[], Awaitable[None]]) -> str:
        """Read until the peer closes or ``stop()``; why the loop ended."""
        while not self._stopping:
            with trio.CancelScope() as scope:
                self._receive_scope = scope
                data = await self._stream.receive_some(RECEIVE_BYTES)
            self._receive_scope = None
            if scope.cancelled_caught:
                break  # stop() while idle
            if not data:
                return "peer closed"
            feed(data)
            await handle_received()
        # Stopping: answer what was received whole, accept nothing more.
        await handle_received()
        return "broker shutting down"
