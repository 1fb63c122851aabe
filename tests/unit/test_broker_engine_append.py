"""``Engine.append``, the one append-then-acknowledge path of both listeners: every write is
appended, in order, before any acknowledgement is awaited; acks -1 returns once a flush made
the writes visible; a refused or bad write is that write's outcome alone."""

from __future__ import annotations

from typing import cast

import trio

from trikafka.broker.engine.engine import ACKS_ALL, Engine, PartitionWrite
from trikafka.broker.engine.errors import EngineError
from trikafka.broker.engine.partition import LocalPartition, Partition, Refused
from trikafka.broker.engine.waiters import VisibleEndWaiters
from trikafka.broker.flusher import FlushScheduler
from trikafka.broker.metrics import BrokerMetrics
from trikafka.broker.server import inline_blocking
from trikafka.log.clock import ManualClock
from trikafka.log.config import LogConfig
from trikafka.log.manager import LogManager
from trikafka.log.log import AppendResult
from trikafka.testing import FakeFileSystem
from trikafka.wire.errors import MessageSizeTooLargeError
from trikafka.wire.messageset import build_message_set

SET = build_message_set([b"x" * 40])


class _Refusing:
    """A partition this broker may not append to (a follower's, §12.6)."""

    key = ("t", 2)

    async def append(self, messages: bytes | bytearray, acks: int, *, kafka: object = None) -> AppendResult:
        raise Refused(EngineError.WRONG_PARTITION, "t-2 is led elsewhere")


async def _engine_and_partitions(nursery: trio.Nursery, config: LogConfig) -> tuple[Engine, list[LocalPartition]]:
    manager = LogManager("/data", config, FakeFileSystem(seed=1), clock_ms=ManualClock(1_000), partitions=2,
                         roll_on_append=False)
    manager.open()
    waiters = VisibleEndWaiters()
    flusher = await nursery.start(FlushScheduler(manager, run_blocking=inline_blocking).run)
    partitions = []
    for index in range(2):
        log = manager.get_or_create("t", index)
        log.add_visible_listener(waiters.on_visible)
        partitions.append(LocalPartition(log, flusher))
    engine = Engine(directory=None, admin=None, waiters=waiters, metrics=BrokerMetrics())  # type: ignore[arg-type]
    return engine, partitions


async def test_acks_all_returns_once_every_write_is_visible_and_counts_the_clients_messages():
    async with trio.open_nursery() as nursery:
        engine, (p0, p1) = await _engine_and_partitions(nursery, LogConfig(flush_interval_messages=10_000))
        writes = [PartitionWrite(p0, SET), PartitionWrite(p1, SET), PartitionWrite(p0, SET, client=False)]
        outcomes = await engine.append(writes, ACKS_ALL, trio.current_time() + 10)
        assert [type(o) for o in outcomes] == [AppendResult] * 3
        assert [o.base_offset for o in outcomes] == [0, 0, len(SET)]  # type: ignore[union-attr]
        assert p0.log.visible_end == 2 * len(SET) and p1.log.visible_end == len(SET)
        assert engine.metrics.topic("t").messages_in == 2  # the broker's own write is not counted
        nursery.cancel_scope.cancel()


async def test_pipelined_writes_are_all_appended_before_the_acknowledgement_is_awaited():
    async with trio.open_nursery() as nursery:
        engine, (p0, _) = await _engine_and_partitions(nursery, LogConfig(flush_interval_messages=10_000))
        first = await engine.append_pipelined([PartitionWrite(p0, SET)], ACKS_ALL, trio.current_time() + 10)
        second = await engine.append_pipelined([PartitionWrite(p0, SET)], ACKS_ALL, trio.current_time() + 10)
        assert p0.log.end_offset == 2 * len(SET)  # both appended, neither acknowledged yet
        assert [type(o) for o in await first.acknowledged() + await second.acknowledged()] == [AppendResult] * 2
        nursery.cancel_scope.cancel()


async def test_a_refused_or_bad_write_is_its_own_outcome_and_the_others_are_appended():
    async with trio.open_nursery() as nursery:
        engine, (p0, p1) = await _engine_and_partitions(nursery, LogConfig(max_message_size=20))
        refusing = cast(Partition, _Refusing())
        writes = [PartitionWrite(refusing, SET), PartitionWrite(p0, SET), PartitionWrite(p1, b"")]
        outcomes = await engine.append(writes, ACKS_ALL, trio.current_time() + 10)
        assert outcomes[0] == EngineError.WRONG_PARTITION
        assert isinstance(outcomes[1], MessageSizeTooLargeError)
        assert type(outcomes[2]) is AppendResult  # an empty set appends nothing and is acknowledged at once
        assert p0.log.end_offset == 0
        nursery.cancel_scope.cancel()


async def test_one_flush_per_partition_answers_every_connections_acks_all_write():
    """Group commit (§12.6): acks -1 requests of many connections, to two partitions, appended while
    no flush has started, are all answered by one flush of each partition."""
    async with trio.open_nursery() as nursery:
        engine, (p0, p1) = await _engine_and_partitions(nursery, LogConfig(flush_interval_messages=10_000))
        flusher = cast(FlushScheduler, p0._flusher)
        flushes = flusher.flushes_completed
        outcomes: list[list[object]] = []

        async def connection(writes: list[PartitionWrite]) -> None:
            outcomes.append(list(await engine.append(writes, ACKS_ALL, trio.current_time() + 10)))

        async with trio.open_nursery() as connections:
            for index in range(8):  # connections to p0, to p1, to both
                connections.start_soon(connection, [PartitionWrite((p0, p1, p0)[index % 3], SET)]
                                       + ([PartitionWrite(p1, SET)] if index % 3 == 2 else []))
        assert sorted(type(o).__name__ for row in outcomes for o in row) == ["AppendResult"] * 10
        assert p0.log.visible_end == p0.log.end_offset and p1.log.visible_end == p1.log.end_offset
        assert flusher.flushes_completed - flushes == 2
        nursery.cancel_scope.cancel()
