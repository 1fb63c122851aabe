"""The connections of this broker's own calls to other brokers, kept for the next call (docs/protocol.md §18.5).

A call ``take``s a kept idle connection to its peer when there is one, else
the ``Connector`` opens one (TCP, TLS, the login); it ``give_back``s the
connection once answered, or closes it when the call failed.  At most
``MAX_IDLE_PER_PEER`` idle connections are kept per peer, each for at most
``IDLE_S`` after its last call: ``run`` (a task of the broker's nursery)
closes older ones every ``SWEEP_S`` and all of them when it is cancelled.

Invariant: a connection is either idle here or held by exactly one call, so
two calls never interleave requests on one connection.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

import trio

from trikafka.wire.metadata import BrokerAddress

from .peer_call import Connector, PeerStream

MAX_IDLE_PER_PEER = 4
IDLE_S = 60.0
SWEEP_S = 30.0


@dataclass(frozen=True, slots=True)
class _Idle:
    stream: PeerStream
    since_s: float  # when its last call gave it back (``clock``)


class PeerConnections:
    """Idle connections by peer, over the ``connector`` that opens new ones; see the module docstring."""

    def __init__(self, connector: Connector, *, max_idle_per_peer: int = MAX_IDLE_PER_PEER,
                 idle_s: float = IDLE_S, clock: Callable[[], float] = trio.current_time):
        self.connector = connector
        self._max_idle_per_peer = max_idle_per_peer
        self._idle_s = idle_s
        self._clock = clock
        self._idle: dict[BrokerAddress, deque[_Idle]] = {}

    def idle_count(self, address: BrokerAddress | None = None) -> int:
        """How many idle connections are kept (to ``address``, or to every peer)."""
        if address is not None:
            return len(self._idle.get(address, ()))
        return sum(len(kept) for kept in self._idle.values())

    async def take(self, address: BrokerAddress) -> tuple[PeerStream, bool]:
        """A connection to ``address`` for one call, and whether it was kept from an earlier call (then
        the peer may have closed it meanwhile).  Raises what ``Connector.connect`` raises."""
        kept = self._idle.get(address)
        now_s = self._clock()
        while kept:
            idle = kept.pop()  # the most recently used: the likeliest to be still open
            if now_s - idle.since_s <= self._idle_s:
                return idle.stream, True
            await idle.stream.aclose()
        return await self.connector.connect(address), False

    async def give_back(self, stream: PeerStream) -> None:
        """Keep ``stream``, whose call was answered, for the next call to its peer (or close it when
        that peer already has ``max_idle_per_peer`` idle connections)."""
        kept = self._idle.setdefault(stream.address, deque())
        if len(kept) >= self._max_idle_per_peer:
            await stream.aclose()
            return
        kept.append(_Idle(stream, self._clock()))

    async def close_expired(self) -> int:
        """Close the idle connections unused for longer than ``idle_s``; how many."""
        now_s, closed = self._clock(), 0
        for address in list(self._idle):
            kept = self._idle[address]
            while kept and now_s - kept[0].since_s > self._idle_s:
                await kept.popleft().stream.aclose()
                closed += 1
            if not kept:
                del self._idle[address]
        return closed

    async def run(self, sweep_s: float = SWEEP_S) -> None:
        """Close expired connections every ``sweep_s``; close every idle one when cancelled (shutdown)."""
        try:
            while True:
                await trio.sleep(sweep_s)
                await self.close_expired()
        finally:
            idle = [entry.stream for kept in self._idle.values() for entry in kept]
            self._idle.clear()
            with trio.CancelScope(shield=True):  # each close is forceful: it does not wait on the peer
                for stream in idle:
                    await stream.aclose()
