"""A standalone broker's Kafka-format topics are created by the engine's topic admin, one change at
a time (docs/protocol.md §16.4): two creations of one name at once make one topic."""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.topics import TopicError
from trikafka.testing import open_broker


async def _outcome(call) -> object:
    try:
        return await call()
    except TopicError as exc:
        return exc.code


async def test_two_creations_of_one_topic_at_once_create_it_once(autojump_clock):
    async with open_broker(kafka_port=0) as running:
        kafka = running.broker.kafka
        assert kafka is not None
        outcomes: list[object] = []

        async def create() -> None:
            outcomes.append(await _outcome(lambda: kafka.topics.create("twice", 2, 1, {})))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            nursery.start_soon(create)
        assert sorted(outcomes, key=str) == sorted([(2, 1), ErrorCode.topic_already_exists], key=str)
        assert kafka.partition_count("twice") == 2

