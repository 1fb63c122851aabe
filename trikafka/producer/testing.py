"""Test support: ``FakeBroker``s reached over in-memory streams, as a producer ``connector``.

Nothing leaves the Trio loop, so producer tests can run under
``MockClock(autojump_threshold=0)`` with no real sleeps::

    async with trio.open_nursery() as nursery:
        cluster = MemoryCluster(nursery)
        broker = cluster.add("b0", 9092, FakeBroker(partitions=2))
        async with Producer(brokers=[(0, "b0", 9092)], connector=cluster.connect) as p:
            ...
        nursery.cancel_scope.cancel()
"""

from __future__ import annotations

from collections import defaultdict

import trio
import trio.testing

from trikafka.client import BrokerConnectionError, Connection
from trikafka.client.fake_broker import FakeBroker


class MemoryCluster:
    """Brokers by ``(host, port)``; ``kill`` drops one (its connections break), ``revive`` brings it back."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self.brokers: dict[tuple[str, int], FakeBroker] = {}
        self.down: set[tuple[str, int]] = set()
        self.connects: dict[tuple[str, int], int] = defaultdict(int)
        self._server_streams: dict[tuple[str, int], list[trio.abc.Stream]] = defaultdict(list)

    def add(self, host: str, port: int, broker: FakeBroker) -> FakeBroker:
        self.brokers[(host, port)] = broker
        return broker

    async def connect(self, host: str, port: int, *, connect_timeout_s: float = 10.0,
                      request_timeout_s: float | None = None, **_ignored) -> Connection:
        """A ``connector`` for ``Producer``/``BrokerPool``."""
        await trio.lowlevel.checkpoint()
        address = (host, port)
        broker = self.brokers.get(address)
        if broker is None or address in self.down:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: connection refused")
        self.connects[address] += 1
        client, server = trio.testing.memory_stream_pair()
        self._server_streams[address].append(server)
        self._nursery.start_soon(broker.serve_connection, server)
        return Connection(client, request_timeout_s=request_timeout_s, address=address)

    async def kill(self, host: str, port: int) -> None:
        """Refuse new connections and close the open ones from the broker's side."""
        address = (host, port)
        self.down.add(address)
        for stream in self._server_streams.pop(address, []):
            await trio.aclose_forcefully(stream)

    def revive(self, host: str, port: int) -> None:
        self.down.discard((host, port))
