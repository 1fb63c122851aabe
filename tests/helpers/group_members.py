"""Group consumers as the named group-consumer scenarios start them, on a :class:`GroupWorld`.

Every wait is bounded by ``WAIT_S``; a hang fails instead of stalling.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import trio

from tests.helpers.group_world import GroupWorld, group_config
from trikafka.group import GroupConsumer, GroupMessage

WAIT_S = 20.0


@contextlib.asynccontextmanager
async def member(world: GroupWorld, topics: Any, name: str, *, coordinator: Any = None,
                 **config: Any) -> AsyncIterator[GroupConsumer]:
    """A group consumer on a session of its own (or on ``coordinator``)."""
    zk = coordinator or await world.backend.open_coordinator()
    try:
        async with GroupConsumer(zk, world.group, topics, consumer_id=name,
                                 config=group_config(**config)) as consumer:
            assert await consumer.wait_settled(WAIT_S)
            yield consumer
    finally:
        if coordinator is None:
            await zk.aclose()


async def take(consumer: GroupConsumer, count: int, timeout_s: float = WAIT_S) -> list[GroupMessage]:
    """The next ``count`` messages ``consumer`` hands out, within ``timeout_s``."""
    messages = []
    with trio.fail_after(timeout_s):
        async for message in consumer:
            messages.append(message)
            if len(messages) == count:
                break
    return messages


async def one_broker(world: GroupWorld, topic: str = "t", partitions: int = 2) -> None:
    """Topic ``topic`` on broker 0 with ``partitions`` partitions."""
    await world.add_topic(topic)
    await world.start_broker(0, partitions)
