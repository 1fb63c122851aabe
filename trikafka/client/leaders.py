"""Keeping the leader cache fresh: docs/protocol.md §9.4 (METADATA) and §12 (replication).

A replicated topic has partitions ``0..N-1`` and, per partition, one leader
per leader epoch; writes go to the leader only, and the leader moves when a
broker dies.  ``trikafka.client.leader_cache.LeaderCache`` holds what is known.

``LeaderDirectory`` adds the I/O: it asks any broker it knows for METADATA
(one short connection per refresh), one refresh at a time (callers that wait
meanwhile share its answer), and waits a doubling backoff before asking again
while some partition asked about has no leader, so a failover costs a few small
requests and never a busy loop.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

import trio

from trikafka.wire import ErrorCode

from .connection import Connection, connect
from .errors import BrokerConnectionError, BrokerError
from .leader_cache import Address, LeaderCache

log = logging.getLogger(__name__)

DEFAULT_REFRESH_BACKOFF_MIN_S = 0.05
DEFAULT_REFRESH_BACKOFF_MAX_S = 1.0


class LeaderNotAvailableError(BrokerError):
    """No leader of the partition became known within the time allowed."""

    def __init__(self, topic: str, partition: int, why: str = ""):
        super().__init__(ErrorCode.LEADER_NOT_AVAILABLE,
                         f"no leader of {topic}-{partition} is known" + (f" ({why})" if why else ""))
        self.topic, self.partition = topic, partition


Connector = Callable[..., Awaitable[Connection]]


class LeaderDirectory:
    """A ``LeaderCache`` kept fresh by METADATA requests to any known broker.

    ``bootstrap()`` gives addresses to ask when the cache knows no broker yet
    (or none of those answer): a static broker list, the ZooKeeper registry.
    ``connector`` opens connections (default ``trikafka.client.connect``).
    """

    def __init__(
        self,
        bootstrap: Callable[[], Iterable[Address]] | Iterable[Address] = (),
        *,
        cache: LeaderCache | None = None,
        connector: Connector = connect,
        connect_kwargs: dict | None = None,
        backoff_min_s: float = DEFAULT_REFRESH_BACKOFF_MIN_S,
        backoff_max_s: float = DEFAULT_REFRESH_BACKOFF_MAX_S,
    ) -> None:
        self.cache = cache if cache is not None else LeaderCache()
        self._bootstrap = bootstrap if callable(bootstrap) else (lambda fixed=tuple(bootstrap): fixed)
        self._connector = connector
        self._connect_kwargs = dict(connect_kwargs or {})
        self._backoff_min_s, self._backoff_max_s = backoff_min_s, backoff_max_s
        self._backoff_s = 0.0
        self._next_at = float("-inf")
        self._lock = trio.Lock()
        self._rounds = 0
        self._start = 0  # rotates the broker asked first
        self.refreshes = 0  # METADATA answers taken in (stats and tests)

    def _candidates(self, also_ask: Iterable[Address] = ()) -> list[Address]:
        known = [self.cache.brokers[b] for b in sorted(self.cache.brokers)]
        if known:
            self._start = (self._start + 1) % len(known)
            known = known[self._start:] + known[:self._start]
        out: list[Address] = []
        for address in [*known, *self._bootstrap(), *also_ask]:
            address = (address[0], int(address[1]))
            if address not in out:
                out.append(address)
        return out

    async def refresh(self, topics: Iterable[str], *, also_ask: Iterable[Address] = ()) -> bool:
        """Ask one broker for METADATA of ``topics``; True if some broker answered.

        ``also_ask``: addresses to try after the known brokers and the bootstrap.
        A caller that waited for another caller's refresh shares its answer.
        Between rounds that left a partition without leader (or found no
        broker) it waits a backoff doubling from ``backoff_min_s`` to
        ``backoff_max_s``; a round that finds every leader resets it.
        """
        topics = list(dict.fromkeys(topics))
        seen = self._rounds
        async with self._lock:
            if self._rounds != seen and not self.cache.missing_leaders(topics):
                return True  # refreshed while we waited, and it answered what we need
            await trio.sleep_until(self._next_at)
            answered = await self._ask_any(topics, list(also_ask))
            self._rounds += 1
            if answered and not self.cache.missing_leaders(topics):
                self._backoff_s = 0.0
                self._next_at = float("-inf")
            else:
                self._backoff_s = min(self._backoff_max_s, max(self._backoff_min_s, self._backoff_s * 2))
                self._next_at = trio.current_time() + self._backoff_s
            return answered

    async def _ask_any(self, topics: list[str], also_ask: list[Address]) -> bool:
        for host, port in self._candidates(also_ask):
            try:
                conn = await self._connector(host, port, **self._connect_kwargs)
            except BrokerConnectionError as exc:
                log.debug("metadata from %s:%d: %s", host, port, exc)
                continue
            try:
                async with conn:
                    metadata = await conn.metadata(topics)
            except (BrokerConnectionError, BrokerError) as exc:
                # A plain 0.7 broker closes on METADATA (ExtensionNotSupported): it
                # knows no replicated topic, so ask the next one.
                log.debug("metadata from %s:%d: %s", host, port, exc)
                continue
            self.cache.learn(metadata)
            self.refreshes += 1
            return True
        return False

    async def leader_address(self, topic: str, partition: int, *, timeout_s: float | None = None) -> Address:
        """Where the leader of ``topic``-``partition`` listens, refreshing until one is known.

        Raises ``LeaderNotAvailableError`` after ``timeout_s`` (None: wait as long as it takes).
        """
        with trio.move_on_after(float("inf") if timeout_s is None else timeout_s):
            while True:
                address = self.cache.leader_address(topic, partition)
                if address is not None:
                    return address
                await self.refresh([topic])
        raise LeaderNotAvailableError(topic, partition, f"for {timeout_s} s")

    def leader_moved(self, topic: str, partition: int) -> None:
        """A broker refused ``topic``-``partition`` (NOT_LEADER, no leader, lost connection)."""
        self.cache.invalidate(topic, partition)


__all__ = ["LeaderDirectory", "LeaderNotAvailableError",
           "DEFAULT_REFRESH_BACKOFF_MIN_S", "DEFAULT_REFRESH_BACKOFF_MAX_S"]
