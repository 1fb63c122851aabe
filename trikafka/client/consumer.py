"""The simple (single-partition) consumer, following the client algorithm of spec §5.2.

``SimpleConsumer.messages(start_offset)`` fetches from one broker-partition and
yields every message deep (wrappers unpacked), each with the offset to commit
after it (spec §4).  Between fetches:

* the position advances by the *valid bytes* of the fetched set only, so a
  truncated trailing entry is fetched again whole next time;
* a first entry larger than the fetch size grows the fetch size by
  ``trikafka.wire.grown_fetch_size`` (at least double, at once to the entry's
  size when known), up to a limit, then raises ``MessageTooLargeForFetch``
  (0.7's consumer just stalls);
* at the end of the log it long-polls with FETCH_WAIT when the broker has it,
  and otherwise polls with an injectable backoff (tests pass a fake sleep or
  run under Trio's autojump clock).

Given ``leaders`` (a ``LeaderDirectory``), a consumer of a replicated
partition (docs/protocol.md §12) reads from its current leader: a fetch
answered NOT_LEADER_FOR_PARTITION / LEADER_NOT_AVAILABLE, or a connection that
breaks, makes it look the leader up again (METADATA) and fetch the same offset
there, after a doubling backoff, for up to ``leader_wait_s``.  Offsets are byte
offsets on every replica, so the position carries over.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, NamedTuple

import trio

from trikafka.wire import (
    ConsumedMessage,
    OFFSETS_EARLIEST,
    OFFSETS_LATEST,
    ErrorCode,
    FetchResult,
    InvalidMessageError,
    grown_fetch_size,
    iter_messages,
    needs_leader_refresh,
)

from .connection import Connection, connect
from .errors import (
    BrokerConnectionError,
    BrokerError,
    ExtensionNotSupported,
    MessageTooLargeForFetch,
    OffsetOutOfRange,
)
from .leaders import LeaderDirectory, LeaderNotAvailableError

log = logging.getLogger(__name__)

DEFAULT_FETCH_MAX_BYTES = 300 * 1024            # 0.7 consumer fetch.size
DEFAULT_MAX_FETCH_BYTES_LIMIT = 64 * 1024 * 1024
DEFAULT_MAX_WAIT_MS = 1000
DEFAULT_LEADER_WAIT_S = 60.0
_INT32 = struct.Struct(">i")

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class PollBackoff:
    """Exponential delay between polls that found no new data; reset when data arrives."""

    initial_s: float = 0.1
    max_s: float = 2.0
    multiplier: float = 2.0
    _next_s: float | None = None

    def next_delay_s(self) -> float:
        delay = self.initial_s if self._next_s is None else self._next_s
        self._next_s = min(delay * self.multiplier, self.max_s)
        return delay

    def reset(self) -> None:
        self._next_s = None


class FramedPrefix(NamedTuple):
    """What the length fields of a fetched set say (see ``framed_prefix``)."""

    valid_bytes: int               # up to the end of the last complete top-level entry
    first_entry_bytes: int | None  # size of a cut *first* entry, else None
    corrupt: bool                  # a negative length follows the valid bytes


def framed_prefix(data: bytes) -> FramedPrefix:
    """Scan only the length fields of a fetched set (spec §5.2), without copying.

    ``first_entry_bytes`` is None when the first entry is whole or even its
    length prefix is cut.  A negative length ends the scan with ``corrupt``.
    """
    pos, end = 0, len(data)
    while end - pos >= 4:
        (n,) = _INT32.unpack_from(data, pos)
        if n < 0:
            return FramedPrefix(pos, None, True)
        if end - pos - 4 < n:
            return FramedPrefix(pos, 4 + n if pos == 0 else None, False)
        pos += 4 + n
    return FramedPrefix(pos, None, False)


async def earliest_offset(conn: Connection, topic: str, partition: int) -> int:
    """The log start ``S`` via OFFSETS time -2 (spec §5.5)."""
    return await _single_offset(conn, topic, partition, OFFSETS_EARLIEST)


async def latest_offset(conn: Connection, topic: str, partition: int) -> int:
    """The visible end ``E`` via OFFSETS time -1 (spec §5.5)."""
    return await _single_offset(conn, topic, partition, OFFSETS_LATEST)


async def _single_offset(conn: Connection, topic: str, partition: int, time_ms: int) -> int:
    offsets = await conn.offsets(topic, partition, time_ms, 1)
    if not offsets:
        raise BrokerError(ErrorCode.UNKNOWN, f"OFFSETS time {time_ms} for {topic}-{partition} returned nothing")
    return offsets[0]


class SimpleConsumer:
    """Consume one partition of one broker.

    ``source`` is an open ``Connection`` (shared; not closed by the consumer) or
    a ``(host, port)`` pair (the consumer opens and owns its connection; use
    ``async with``).  ``use_fetch_wait``: None = try FETCH_WAIT and fall back to
    polling if the broker is plain 0.7; True/False force one way.  ``leaders``:
    follow the leader of a replicated partition (see the module docstring);
    ``source`` is then only where to start.
    """

    def __init__(
        self,
        source: Connection | tuple[str, int],
        topic: str,
        partition: int,
        *,
        fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_fetch_bytes_limit: int = DEFAULT_MAX_FETCH_BYTES_LIMIT,
        use_fetch_wait: bool | None = None,
        max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        min_bytes: int = 1,
        backoff: PollBackoff | None = None,
        sleep: Sleep = trio.sleep,
        connect_kwargs: dict | None = None,
        leaders: LeaderDirectory | None = None,
        leader_wait_s: float = DEFAULT_LEADER_WAIT_S,
    ):
        if fetch_max_bytes <= 0 or max_fetch_bytes_limit < fetch_max_bytes:
            raise ValueError("need 0 < fetch_max_bytes <= max_fetch_bytes_limit")
        self._conn: Connection | None = source if isinstance(source, Connection) else None
        self._owns_conn = self._conn is None
        self._address: tuple[str, int] | None
        if isinstance(source, Connection):
            self._address = source.address
        else:
            host, port = source
            self._address = (host, port)
        self.topic, self.partition = topic, partition
        self.fetch_max_bytes, self.max_fetch_bytes_limit = fetch_max_bytes, max_fetch_bytes_limit
        self.use_fetch_wait = use_fetch_wait
        self.max_wait_ms, self.min_bytes = max_wait_ms, min_bytes
        self.backoff = backoff or PollBackoff()
        self._sleep = sleep
        self._connect_kwargs = connect_kwargs or {}
        self.next_offset: int | None = None  # offset to commit after the last yielded message
        self.leaders, self.leader_wait_s = leaders, leader_wait_s
        self._failover_backoff = PollBackoff(initial_s=0.05, max_s=1.0)
        self._asked_if_replicated = False

    async def __aenter__(self) -> "SimpleConsumer":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection if the consumer opened it."""
        if self._owns_conn and self._conn is not None:
            await self._conn.aclose()
            self._conn = None

    async def _connection(self) -> Connection:
        if self.leaders is not None:
            await self._follow_leader()
        if self._conn is None or self._conn.closed:
            if self._address is None:
                raise BrokerConnectionError("the shared connection is closed and its address is unknown")
            self._conn = await connect(*self._address, **self._connect_kwargs)
            self._owns_conn = True
        return self._conn

    def _following(self) -> bool:
        return self.leaders is not None and bool(self.leaders.cache.replicated(self.topic))

    async def _follow_leader(self) -> None:
        """Point ``_address`` at the partition's leader (a replicated topic), learning it if need be."""
        assert self.leaders is not None
        cache = self.leaders.cache
        if cache.replicated(self.topic) is None and not self._asked_if_replicated:
            self._asked_if_replicated = True  # once: a 0.7 topic stays with its broker
            await self.leaders.refresh([self.topic], also_ask=[self._address] if self._address else ())
        if not cache.replicated(self.topic):
            return
        leader = await self.leaders.leader_address(self.topic, self.partition, timeout_s=self.leader_wait_s)
        if leader != self._address:
            await self._drop_connection()
            self._address = leader

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            if self._owns_conn:
                await self._conn.aclose()
            self._conn = None

    async def earliest(self) -> int:
        return await earliest_offset(await self._connection(), self.topic, self.partition)

    async def latest(self) -> int:
        return await latest_offset(await self._connection(), self.topic, self.partition)

    async def fetch(self, offset: int, max_bytes: int, *, wait: bool) -> FetchResult:
        """One fetch at ``offset``; with ``wait`` it long-polls if the broker can.

        Following leaders, a leader change is waited out (up to ``leader_wait_s``).
        """
        if self.leaders is None:
            return await self._fetch_once(offset, max_bytes, wait=wait)
        deadline = trio.current_time() + self.leader_wait_s
        while True:
            try:
                result = await self._fetch_once(offset, max_bytes, wait=wait)
            except BrokerConnectionError:
                if not self._following() or trio.current_time() >= deadline:
                    raise
                why = "the connection to the leader broke"
            else:
                if not needs_leader_refresh(result.error):
                    self._failover_backoff.reset()
                    return result
                if trio.current_time() >= deadline:
                    raise LeaderNotAvailableError(self.topic, self.partition, f"{result.error.name} for "
                                                  f"{self.leader_wait_s} s")
                why = result.error.name
            self.leaders.leader_moved(self.topic, self.partition)
            await self._drop_connection()
            delay_s = self._failover_backoff.next_delay_s()
            log.info("%s-%d: %s; looking for the leader again in %.2f s", self.topic, self.partition, why, delay_s)
            await self._sleep(delay_s)

    async def _fetch_once(self, offset: int, max_bytes: int, *, wait: bool) -> FetchResult:
        conn = await self._connection()
        if wait and self.use_fetch_wait is not False:
            try:
                [result] = await conn.fetch_wait(
                    [(self.topic, self.partition, offset, max_bytes)], self.max_wait_ms, self.min_bytes
                )
                self.use_fetch_wait = True
                return result
            except ExtensionNotSupported:
                if self.use_fetch_wait or self._following():
                    # Forced on: do not silently degrade.  A replicated partition lives on
                    # trikafka brokers only: a close there is a lost leader, not a 0.7 broker.
                    raise
                self.use_fetch_wait = False  # a plain 0.7 broker: reconnect and poll
                conn = await self._connection()
        return await conn.fetch(self.topic, self.partition, offset, max_bytes)

    async def messages(
        self,
        start_offset: int,
        *,
        fetch_max_bytes: int | None = None,
        max_fetch_bytes_limit: int | None = None,
        decode: Callable[..., Iterable[Any]] = iter_messages,
    ) -> AsyncIterator[ConsumedMessage]:
        """Yield messages from ``start_offset`` forever (break out to stop).

        ``decode(data, base_offset)`` turns each fetched set into messages with a
        ``next_offset``; ``wire.keyed.iter_keyed_messages`` gives keys and values apart.

        Raises ``OffsetOutOfRange``, ``MessageTooLargeForFetch``, ``BrokerError``
        for other error codes, and ``InvalidMessageError`` for corrupt data.
        """
        size = fetch_max_bytes or self.fetch_max_bytes
        limit = max_fetch_bytes_limit or self.max_fetch_bytes_limit
        offset, at_end = start_offset, False
        while True:
            result = await self.fetch(offset, size, wait=at_end)
            self._raise_for_error(result)
            valid_bytes, first_entry_bytes, corrupt = framed_prefix(result.data)
            if valid_bytes == 0 and result.data and not corrupt:
                size = self._grow(offset, size, limit, first_entry_bytes)
                continue
            for message in decode(memoryview(result.data)[:valid_bytes], offset):
                self.next_offset = message.next_offset
                yield message
            if corrupt:
                raise InvalidMessageError(
                    f"negative entry length at offset {offset + valid_bytes} of {self.topic}-{self.partition}"
                )
            offset += valid_bytes
            at_end = valid_bytes == 0
            if not at_end:
                self.backoff.reset()
            elif self.use_fetch_wait is False:  # long polls wait at the broker instead
                await self._sleep(self.backoff.next_delay_s())

    def _grow(self, offset: int, size: int, limit: int, needed: int | None) -> int:
        # The first entry does not fit: grow by wire's one rule (§5.2; 0.7 itself stalls here).
        grown = grown_fetch_size(size, limit, needed)
        if grown is None:
            raise MessageTooLargeForFetch(self.topic, self.partition, offset, needed, limit)
        return grown

    def _raise_for_error(self, result: FetchResult) -> None:
        if result.error == ErrorCode.NO_ERROR:
            return
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            raise OffsetOutOfRange(self.topic, self.partition, result.offset)
        raise BrokerError(result.error, f"fetch of {self.topic}-{self.partition} at {result.offset} failed")
