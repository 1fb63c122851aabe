"""Watches as async iterators: re-armed one-shot ZooKeeper watches, yielding the current value."""

from __future__ import annotations

from typing import Any, Generic, Union

import trio

from .errors import ConnectionLossError, ZooKeeperClientClosedError, NoNodeError, SessionExpiredError
from .ops import Stat, T, WatchCallback


class _Watch(Generic[T]):
    """Re-arming, de-duplicating async iterator over a znode's state.

    Each round reads the node with a fresh one-shot watch, yields the value if
    it differs from the last one yielded, then waits for that watch.  A watch
    fired by a disconnect simply causes a re-read once reconnected, so the
    iterator is level-triggered: it may skip intermediate values but never
    stays on a stale one.
    """

    def __init__(self, coordinator: Any,  # a BaseZooKeeperClient (which imports this module)
        path: str) -> None:
        self._coordinator = coordinator
        self.path = path
        self._fired = trio.Event()
        self._fired.set()  # the first round reads at once
        self._last_key: object = _NOTHING
        self._stopped = False

    def __aiter__(self) -> "_Watch[T]":
        return self

    async def __anext__(self) -> T:
        try:
            return await self._next_change()
        except ZooKeeperClientClosedError:
            if self._stopped:
                raise StopAsyncIteration from None
            raise

    async def _next_change(self) -> T:
        while not self._stopped:
            await self._fired.wait()
            if self._stopped:
                break
            fired = trio.Event()
            self._fired = fired
            try:
                value = await self._read(fired.set)
            except (ConnectionLossError, SessionExpiredError):
                fired.set()
                await self._coordinator.wait_reconnected()
                continue
            key = self._key(value)
            if key != self._last_key:
                self._last_key = key
                return value
        raise StopAsyncIteration

    def stop(self) -> None:
        """End the iteration (a pending ``__anext__`` ends at its next wake-up)."""
        self._stopped = True
        self._fired.set()

    async def _read(self, watch: WatchCallback) -> T:
        raise NotImplementedError

    def _key(self, value: T) -> object:
        raise NotImplementedError


_NOTHING = object()


class DataWatch(_Watch[Union[tuple[bytes, Stat], None]]):
    """Yields ``(data, Stat)`` of a znode, or None while it does not exist."""

    async def _read(self, watch: WatchCallback) -> tuple[bytes, Stat] | None:
        coordinator = self._coordinator
        while True:
            try:
                return await coordinator._get(self.path, watch)
            except NoNodeError:
                pass
            # An exists-watch fires when the node is created.
            if await coordinator._exists(self.path, watch) is None:
                return None

    def _key(self, value: tuple[bytes, Stat] | None) -> object:
        return None if value is None else (value[1].czxid, value[1].mzxid)


class ChildrenWatch(_Watch[Union[list[str], None]]):
    """Yields the sorted child names of a znode, or None while it does not exist."""

    async def _read(self, watch: WatchCallback) -> list[str] | None:
        coordinator = self._coordinator
        while True:
            try:
                return sorted(await coordinator._children(self.path, watch))
            except NoNodeError:
                pass
            if await coordinator._exists(self.path, watch) is None:
                return None

    def _key(self, value: list[str] | None) -> object:
        return None if value is None else tuple(value)
