"""The fetchers of one consumer: one fetcher task per owned partition, restarted at each ownership change."""

from __future__ import annotations

import functools
import logging
from typing import Awaitable, Callable

import trio

from trikafka.client.leaders import LeaderDirectory
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import NoNodeError
from trikafka.zk.ops import SessionState
from trikafka.zk.registry_values import parse_broker_registration

from .config import GroupConfig
from .fetcher import Chunk, FetchTarget, connect_kwargs_for, run_fetcher

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer


class Fetchers:
    """Starts and stops the fetchers and queues their chunks; they pause while the session is SUSPENDED.

    ``attach(nursery)`` gives them the nursery to run in; until then ``start`` does nothing.
    """

    def __init__(self, zk: ZooKeeperClient, config: GroupConfig,
                 open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None):
        self._zk = zk
        self._config = config
        self._connect_kwargs = connect_kwargs_for(config, open_stream)
        self._send, self._receive = trio.open_memory_channel[Chunk](config.queued_chunks_max)
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        # Leaders of replicated partitions (docs/protocol.md §12.9), asked of the live brokers.
        self._live_brokers: list[tuple[str, int]] = []
        self.leaders = LeaderDirectory(lambda: self._live_brokers, connect_kwargs=self._connect_kwargs)

    def attach(self, nursery: trio.Nursery) -> None:
        """Run the fetchers in ``nursery`` (the consumer's)."""
        self._nursery = nursery

    async def receive(self) -> Chunk:
        """The next queued chunk, in the order each fetcher queued its own."""
        return await self._receive.receive()

    def stop(self) -> None:
        """Cancel every running fetcher."""
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    def start(self, targets: list[FetchTarget]) -> None:
        """Stop the running fetchers and start one per target."""
        self.stop()
        if not targets or self._nursery is None:
            return
        scope = trio.CancelScope()
        self._scope = scope
        self._nursery.start_soon(self._run, scope, targets)

    async def _run(self, scope: trio.CancelScope, targets: list[FetchTarget]) -> None:
        with scope:
            if any(t.broker_id is None for t in targets):
                await self._read_live_brokers()
            async with trio.open_nursery() as nursery:
                for target in targets:
                    nursery.start_soon(functools.partial(
                        run_fetcher, target, self._config, self._send, self._broker_address,
                        self._wait_until_fetching_allowed, connect_kwargs=self._connect_kwargs,
                        leaders=self.leaders))

    async def _read_live_brokers(self) -> None:
        """The registered brokers' addresses: whom to ask for replicated partitions' leaders."""
        found = []
        try:
            ids = await self._zk.children(paths.broker_ids())
        except NoNodeError:
            ids = []
        for child in sorted(ids):
            if child.isdigit():
                try:
                    found.append(await self._broker_address(int(child)))
                except (NoNodeError, ValueError, UnicodeDecodeError):
                    continue
        self._live_brokers = found

    async def _wait_until_fetching_allowed(self) -> None:
        """Fetchers pause while the ZooKeeper session is SUSPENDED (0.7 race fix)."""
        await self._zk.state.wait_value(SessionState.CONNECTED)

    async def _broker_address(self, broker_id: int) -> tuple[str, int]:
        data, _stat = await self._zk.get(paths.broker_id(broker_id))
        info = parse_broker_registration(data)
        return info.host, info.port
