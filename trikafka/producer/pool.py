"""One connection per broker, opened on demand, reconnected with backoff.

``connector(host, port, connect_timeout_s=, request_timeout_s=)`` opens a
``Connection`` (default: TCP via ``trikafka.client.connect``; tests pass one
over in-memory streams so a MockClock run never waits on a real socket).

A failed connect or request closes the broker's connection and starts a
backoff (doubling from ``reconnect_backoff_s`` up to
``reconnect_backoff_max_s``), so a dead broker is not hammered: ``get``
waits for the backoff to end before it connects again, and ``available``
is False meanwhile, so that unkeyed messages can go elsewhere.  A success
resets the backoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

import trio

from trikafka.client.connection import Connection, connect
from trikafka.client.errors import BrokerConnectionError


@dataclass
class _BrokerState:
    address: tuple[str, int]
    connection: Connection | None = None
    backoff_s: float = 0.0
    retry_at: float = float("-inf")
    lock: trio.Lock | None = None


class BrokerPool:
    """Connections keyed by broker id; ``address_of(id)`` gives the current (host, port)."""

    def __init__(
        self,
        address_of: Callable[[int], tuple[str, int] | None],
        *,
        connect_timeout_s: float,
        request_timeout_s: float | None,
        reconnect_backoff_s: float,
        reconnect_backoff_max_s: float,
        connector: Callable[..., Awaitable[Connection]] = connect,
    ) -> None:
        self._address_of = address_of
        self._connect = connector
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._backoff_s = reconnect_backoff_s
        self._backoff_max_s = reconnect_backoff_max_s
        self._brokers: dict[int, _BrokerState] = {}
        self.connects = 0  # connections opened (tests and stats)

    def available(self, broker_id: int) -> bool:
        """False while ``broker_id`` is backing off after a failure."""
        state = self._brokers.get(broker_id)
        return state is None or state.connection is not None or trio.current_time() >= state.retry_at

    async def get(self, broker_id: int) -> Connection:
        """The open connection to ``broker_id``, connecting if needed.

        Waits out a backoff first.  Raises ``BrokerConnectionError`` if the
        broker is unknown or cannot be reached.
        """
        address = self._address_of(broker_id)
        if address is None:
            raise BrokerConnectionError(f"broker {broker_id} is not registered")
        state = self._brokers.get(broker_id)
        if state is None or state.address != address:
            if state is not None and state.connection is not None:
                await state.connection.aclose()  # the broker moved (re-registered elsewhere)
            state = self._brokers[broker_id] = _BrokerState(address, lock=trio.Lock())
        conn = state.connection
        if conn is not None and not conn.closed:
            return conn
        assert state.lock is not None
        async with state.lock:  # one connect at a time per broker
            conn = state.connection
            if conn is not None and not conn.closed:
                return conn
            # Still backing off: wait it out, so every attempt a caller makes is a real one.
            await trio.sleep_until(state.retry_at)
            try:
                conn = await self._connect(address[0], address[1], connect_timeout_s=self._connect_timeout_s,
                                     request_timeout_s=self._request_timeout_s)
            except BrokerConnectionError:
                self._back_off(state)
                raise
            self.connects += 1
            state.connection = conn
            return conn

    def succeeded(self, broker_id: int) -> None:
        """A request on ``broker_id`` went through: forget its backoff."""
        state = self._brokers.get(broker_id)
        if state is not None:
            state.backoff_s = 0.0
            state.retry_at = float("-inf")

    async def failed(self, broker_id: int, connection: Connection) -> None:
        """A request on ``connection`` to ``broker_id`` failed: close it and back off.

        Nothing happens if the pool already replaced that connection (another
        task saw the failure first and reconnected).
        """
        state = self._brokers.get(broker_id)
        if state is None or state.connection is not connection:
            await connection.aclose()
            return
        state.connection = None
        await connection.aclose()
        self._back_off(state)

    def _back_off(self, state: _BrokerState) -> None:
        state.backoff_s = min(self._backoff_max_s, max(self._backoff_s, state.backoff_s * 2))
        state.retry_at = trio.current_time() + state.backoff_s

    async def aclose(self) -> None:
        """Close every connection."""
        for state in self._brokers.values():
            conn, state.connection = state.connection, None
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
