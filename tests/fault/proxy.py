"""A Trio TCP fault proxy for loopback tests (no trikafka imports).

Clients connect to ``127.0.0.1:<proxy.port>``; the proxy opens one upstream
connection per client and pumps bytes both ways.  Faults are named modes:

* ``FORWARD``: pump bytes (the healthy link).
* ``STALL``: keep every connection open but hold all bytes, both ways (a dead
  peer or a full network: no FIN, no RST).  New connections are accepted and
  stalled too.  Switching back to ``FORWARD`` delivers what was held, in order.
* ``REFUSE``: accept new connections and close them at once; existing ones
  keep working (combine with :meth:`FaultProxy.sever` for a full outage).
* :meth:`FaultProxy.sever` cuts every current connection now (a dropped link);
  clients see EOF or a reset and must reconnect.

Counters (``accepted``, ``severed``, ``refused``, ``bytes_forwarded``) let a
test prove that the fault actually hit the traffic.
"""

from __future__ import annotations

import contextlib
import enum
from typing import AsyncIterator

import trio

PUMP_CHUNK_BYTES = 65536


class FaultMode(enum.Enum):
    FORWARD = "forward"
    STALL = "stall"
    REFUSE = "refuse"


class FaultProxy:
    """One listening port in front of ``target``; see the module docstring."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._mode = FaultMode.FORWARD
        self._mode_changed = trio.Event()
        self._connections: set[trio.CancelScope] = set()
        self.accepted = 0
        self.severed = 0
        self.refused = 0
        self.bytes_forwarded = 0

    @property
    def mode(self) -> FaultMode:
        return self._mode

    def set_mode(self, mode: FaultMode) -> None:
        """Switch the fault mode; pumps held by ``STALL`` resume on ``FORWARD``."""
        self._mode = FaultMode(mode)
        self._mode_changed.set()
        self._mode_changed = trio.Event()

    @property
    def live_connections(self) -> int:
        return len(self._connections)

    def sever(self) -> int:
        """Cut every proxied connection now; returns how many were cut."""
        scopes = list(self._connections)
        for scope in scopes:
            scope.cancel()
        self.severed += len(scopes)
        return len(scopes)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        with trio.CancelScope() as scope:
            self._connections.add(scope)
            try:
                if self._mode is FaultMode.REFUSE:
                    self.refused += 1
                    return
                upstream = await trio.open_tcp_stream(*self.target)
                async with upstream, trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
                    nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)
            except OSError:
                pass
            finally:
                self._connections.discard(scope)
        await trio.aclose_forcefully(client)

    async def _wait_forwarding(self) -> None:
        while self._mode is not FaultMode.FORWARD:
            await self._mode_changed.wait()

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
        try:
            while True:
                await self._wait_forwarding()
                data = await source.receive_some(PUMP_CHUNK_BYTES)
                if not data:
                    break
                # Bytes read just before a STALL began are held, not sent.
                await self._wait_forwarding()
                await sink.send_all(data)
                self.bytes_forwarded += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        done.cancel()  # one side closed: close both


@contextlib.asynccontextmanager
async def open_fault_proxy(target_host: str, target_port: int) -> AsyncIterator[FaultProxy]:
    """Run a :class:`FaultProxy` for the duration of the block."""
    proxy = FaultProxy(target_host, target_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()
