"""Fetcher control: one fetcher task per owned partition, restarted at each ownership change."""

from __future__ import annotations

import functools
import logging

import trio

from trikafka.zk import paths
from trikafka.zk.errors import NoNodeError
from trikafka.zk.ops import SessionState
from trikafka.zk.registry_values import parse_broker_registration

from .fetcher import FetchTarget, run_fetcher
from .registry import parse_partition_name

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer


class FetcherControl:
    """Starts and stops the fetchers; they pause while the session is SUSPENDED.

    Part of ``GroupConsumer``: the state it uses is set up in ``GroupConsumer.__init__``.
    """

    def _stop_fetchers(self) -> None:
        if self._fetch_scope is not None:
            self._fetch_scope.cancel()
            self._fetch_scope = None

    def _start_fetchers(self) -> None:
        self._stop_fetchers()
        if not self.owned or self._nursery is None:
            return
        targets = []
        for key in sorted(self.owned):
            broker_id, part = parse_partition_name(key[1])
            targets.append(FetchTarget(self.generation, key, broker_id, part, self._positions.get(key)))
        scope = trio.CancelScope()
        self._fetch_scope = scope
        self._nursery.start_soon(self._run_fetchers, scope, targets)

    async def _run_fetchers(self, scope: trio.CancelScope, targets: list[FetchTarget]) -> None:
        with scope:
            if any(t.broker_id is None for t in targets):
                await self._read_live_brokers()
            async with trio.open_nursery() as nursery:
                for target in targets:
                    nursery.start_soon(functools.partial(
                        run_fetcher, target, self.config, self._chunk_send, self._broker_address,
                        self._wait_until_fetching_allowed, open_stream=self._open_stream,
                        leaders=self._leaders))

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
