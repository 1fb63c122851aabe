"""The unreplicated partition rolls exactly where the §7.2 rule says, though it checks two integers per append."""

from __future__ import annotations

from dataclasses import replace

from trikafka.broker.flusher import FlushScheduler
from trikafka.broker.engine.partition import LocalPartition
from trikafka.broker.server import inline_blocking
from trikafka.log.clock import ManualClock
from trikafka.log.config import LogConfig
from trikafka.log.manager import LogManager
from trikafka.testing import FakeFileSystem
from trikafka.wire.messageset import build_message_set

SET = build_message_set([b"x" * 40])  # one message set of a fixed size


def partition_of(config: LogConfig, clock: ManualClock) -> LocalPartition:
    manager = LogManager("/data", config, FakeFileSystem(seed=1), clock_ms=clock, roll_on_append=False)
    manager.open()
    flusher = FlushScheduler(manager, run_blocking=inline_blocking)
    return LocalPartition(manager.get_or_create("t", 0), flusher)


def segment_starts(partition: LocalPartition) -> list[int]:
    return [s.start for s in partition.log.segments.segments]


async def test_rolls_once_the_active_segment_holds_more_than_segment_bytes():
    clock = ManualClock(1_000)
    partition = partition_of(LogConfig(segment_bytes=3 * len(SET)), clock)
    for _ in range(9):
        await partition.write(SET)
    # A segment takes appends while it holds at most segment_bytes: four sets, the fourth past the limit.
    assert segment_starts(partition) == [0, 4 * len(SET), 8 * len(SET)]


async def test_rolls_once_the_first_append_is_older_than_roll_ms():
    clock = ManualClock(1_000)
    partition = partition_of(LogConfig(roll_ms=100), clock)
    await partition.write(SET)  # the segment's age starts here
    clock.advance(100)
    await partition.write(SET)  # exactly roll_ms old: not older
    assert segment_starts(partition) == [0]
    clock.advance(1)
    await partition.write(SET)
    assert segment_starts(partition) == [0, 2 * len(SET)]
    clock.advance(100)
    await partition.write(SET)  # the new segment's age started at its own first append
    assert segment_starts(partition) == [0, 2 * len(SET)]


async def test_a_smaller_segment_size_set_meanwhile_applies_to_the_next_append():
    clock = ManualClock(1_000)
    partition = partition_of(LogConfig(segment_bytes=100 * len(SET)), clock)
    for _ in range(3):
        await partition.write(SET)
    partition.log.config = replace(partition.log.config, segment_bytes=len(SET))
    await partition.write(SET)
    assert segment_starts(partition) == [0, 3 * len(SET)]


async def test_a_roll_by_someone_else_is_seen():
    clock = ManualClock(1_000)
    partition = partition_of(LogConfig(segment_bytes=2 * len(SET)), clock)
    await partition.write(SET)
    partition.log.roll()  # as retention does, through the flusher
    for _ in range(3):
        await partition.write(SET)
    assert segment_starts(partition) == [0, len(SET)]
    await partition.write(SET)
    assert segment_starts(partition) == [0, len(SET), 4 * len(SET)]
