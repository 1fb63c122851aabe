"""One owned partition's fetch loop, feeding the group consumer's chunk queue.

A fetcher runs for one partition within one *generation* of the consumer's
ownership.  It fetches from its position onwards and puts each fetched message
set on the queue as a :class:`Chunk` that says which position it continues
(``expect``); the consumer delivers a chunk only when its own position for
that partition equals ``expect`` and the generation is still current, so
chunks of an earlier generation, or fetched past a reset, are never delivered.

Offset resets (no committed offset yet, or OffsetOutOfRange) travel through
the same queue as a chunk with ``new_position``: the consumer applies it once
everything queued before it has been delivered, so ordering holds.

Broker trouble (refused, dropped or stalled connections, a broker that
re-registered elsewhere) is retried with a capped exponential back-off,
reading the broker's address from ``/brokers/ids/<id>`` each time.

A replicated partition (``broker_id`` None, named ``<p>``, docs/protocol.md
§12.9) is fetched from its current leader, found through the consumer's
``LeaderDirectory``; the simple consumer follows the leader through a failover.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import trio

from trikafka.client import (
    BrokerConnectionError,
    BrokerError,
    SimpleConsumer,
    framed_prefix,
)
from trikafka.client.errors import MessageTooLargeForFetch, OffsetOutOfRange
from trikafka.client.leaders import LeaderDirectory
from trikafka.wire import ConsumedMessage, ErrorCode, InvalidMessageError, grown_fetch_size, iter_messages
from trikafka.zk.errors import ZooKeeperClientError, NoNodeError

from .config import LARGEST, SMALLEST, GroupConfig

log = logging.getLogger(__name__)

RETRY_BACKOFF_MIN_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0

PartitionKey = tuple[str, str]  # (topic, "<broker>-<partition>")


@dataclass(slots=True)
class Chunk:
    """What a fetcher hands the consumer: messages, a position reset, or an error."""

    generation: int
    key: PartitionKey
    broker_id: int | None  # None: a replicated partition
    part: int
    expect: int | None  # the consumer position this chunk continues
    messages: list[ConsumedMessage] = field(default_factory=list)
    new_position: int | None = None  # a reset: move the position here
    error: BaseException | None = None  # raise this to the application, in order
    index: int = 0  # how many messages were delivered already
    data: bytes = b""  # the fetched entries as the broker sent them (for next_batch)


@dataclass(frozen=True, slots=True)
class FetchTarget:
    """One partition to fetch, where from, and how to reach its broker."""

    generation: int
    key: PartitionKey
    broker_id: int | None  # None: a replicated partition, read from its leader
    partition: int
    start: int | None  # None: no committed offset, reset per autooffset.reset


BrokerAddress = Callable[[int], Awaitable[tuple[str, int]]]
Gate = Callable[[], Awaitable[None]]


def connect_kwargs_for(config: GroupConfig,
                       open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None) -> dict[str, object]:
    """The keyword arguments of ``trikafka.client.connect`` for a group consumer's broker connections.

    ``open_stream`` replaces ``trio.open_tcp_stream`` (see ``trikafka.client.connect``)."""
    kwargs: dict[str, object] = dict(connect_timeout_s=config.connect_timeout_s,
                                     request_timeout_s=config.socket_timeout_s)
    if open_stream is not None:
        kwargs["open_stream"] = open_stream
    return kwargs


async def run_fetcher(
    target: FetchTarget,
    config: GroupConfig,
    queue: trio.MemorySendChannel[Chunk],
    broker_address: BrokerAddress,
    wait_until_fetching_allowed: Gate,
    *,
    connect_kwargs: dict[str, object],
    leaders: LeaderDirectory | None = None,
) -> None:
    """Fetch ``target`` forever (until cancelled), queueing chunks in order.

    ``connect_kwargs`` go to ``trikafka.client.connect`` (see ``connect_kwargs_for``)."""
    cursor = _Cursor(target.start)
    topic = target.key[0]
    delay_s = RETRY_BACKOFF_MIN_S
    while True:
        try:
            if target.broker_id is None:
                assert leaders is not None, "a replicated partition needs the leader directory"
                host, port = await leaders.leader_address(topic, target.partition)
            else:
                host, port = await broker_address(target.broker_id)
            async with SimpleConsumer(
                (host, port), topic, target.partition,
                fetch_max_bytes=config.fetch_max_bytes,
                max_fetch_bytes_limit=config.max_fetch_bytes_limit,
                max_wait_ms=config.fetch_wait_max_ms,
                connect_kwargs=connect_kwargs,
                leaders=leaders if target.broker_id is None else None,
            ) as simple:
                if cursor.offset is None:
                    cursor.offset = await _reset(simple, target, config, queue, None)
                await _fetch_loop(simple, target, config, queue, cursor, wait_until_fetching_allowed)
        except (BrokerConnectionError, OSError, NoNodeError) as exc:
            log.info("fetching %s/%s: %s; retrying in %.2f s", topic, target.key[1], exc, delay_s)
        except (BrokerError, ZooKeeperClientError) as exc:
            log.warning("fetching %s/%s failed: %s; retrying in %.2f s", topic, target.key[1], exc, delay_s)
        except _Fatal as fatal:
            await queue.send(Chunk(target.generation, target.key, target.broker_id, target.partition, fatal.at,
                             error=fatal.error))
            return
        if cursor.fetched:
            cursor.fetched, delay_s = False, RETRY_BACKOFF_MIN_S  # it worked for a while: retry soon
        await trio.sleep(delay_s)
        delay_s = min(delay_s * 2, RETRY_BACKOFF_MAX_S)


@dataclass(slots=True)
class _Cursor:
    """The next offset to fetch; survives reconnects (None: not known yet)."""

    offset: int | None
    fetched: bool = False  # a fetch succeeded since the last failure


class _Fatal(Exception):
    """An error the application must see (after everything queued before it)."""

    def __init__(self, at: int | None, error: BaseException):
        super().__init__(str(error))
        self.at, self.error = at, error


async def _reset(simple: SimpleConsumer, target: FetchTarget, config: GroupConfig,
                 queue: trio.MemorySendChannel[Chunk], at: int | None) -> int:
    """Apply ``autooffset.reset`` at position ``at`` (None: no committed offset)."""
    if config.autooffset_reset == SMALLEST:
        new = await simple.earliest()
    elif config.autooffset_reset == LARGEST:
        new = await simple.latest()
    else:
        raise _Fatal(at, OffsetOutOfRange(target.key[0], target.partition, -1 if at is None else at))
    log.info("%s/%s: offset %s reset to %d (%s)", target.key[0], target.key[1], at, new,
             config.autooffset_reset)
    await queue.send(Chunk(target.generation, target.key, target.broker_id, target.partition, at,
                     new_position=new))
    return new


async def _fetch_loop(simple: SimpleConsumer, target: FetchTarget, config: GroupConfig,
                      queue: trio.MemorySendChannel[Chunk], cursor: _Cursor, wait_until_fetching_allowed: Gate) -> None:
    size = config.fetch_max_bytes
    offset = cursor.offset
    assert offset is not None
    at_end = False
    while True:
        await wait_until_fetching_allowed()
        result = await simple.fetch(offset, size, wait=at_end)
        cursor.fetched = True
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            offset = cursor.offset = await _reset(simple, target, config, queue, offset)
            at_end = False
            continue
        if result.error != ErrorCode.NO_ERROR:
            raise BrokerError(result.error, f"fetch of {target.key[0]}/{target.key[1]} at {offset}")
        valid_bytes, first_entry_bytes, corrupt = framed_prefix(result.data)
        log.debug("%s/%s: fetched %d valid bytes at %d (generation %d)", target.key[0], target.key[1],
                  valid_bytes, offset, target.generation)
        if valid_bytes == 0 and result.data and not corrupt:
            grown = grown_fetch_size(size, config.max_fetch_bytes_limit, first_entry_bytes)
            if grown is None:
                raise _Fatal(offset, MessageTooLargeForFetch(
                    target.key[0], target.partition, offset, first_entry_bytes, config.max_fetch_bytes_limit))
            size = grown
            continue
        if valid_bytes:
            try:
                messages = list(iter_messages(memoryview(result.data)[:valid_bytes], offset))
            except InvalidMessageError as exc:
                raise _Fatal(offset, exc) from None
            data = result.data if len(result.data) == valid_bytes else result.data[:valid_bytes]
            await queue.send(Chunk(target.generation, target.key, target.broker_id, target.partition, offset,
                             messages, data=bytes(data)))
            offset = cursor.offset = offset + valid_bytes
            size = config.fetch_max_bytes
        if corrupt:
            raise _Fatal(offset, InvalidMessageError(
                f"negative entry length at offset {offset} of {target.key[0]}/{target.key[1]}"))
        at_end = valid_bytes == 0
        if at_end and simple.use_fetch_wait is False:
            await trio.sleep(config.fetcher_backoff_s)  # a plain 0.7 broker: poll
