"""``trikafka pipeline generate`` against a real in-process broker (no Spark involved): with
``--partitions-per-broker`` the topic gets that many partitions before anything is written,
and a topic that has another count is refused in one line with nothing written."""

from __future__ import annotations

import functools

import trio

from trikafka.spark.pipeline import main as pipeline_main
from trikafka.testing import open_broker


async def generate(port: int, topic: str, *extra: str) -> int:
    argv = ["generate", "--brokers", f"0:127.0.0.1:{port}", "--topic", topic, "--count", "200", "--seed", "1",
            *extra]
    return await trio.to_thread.run_sync(functools.partial(pipeline_main, argv))


async def test_generate_creates_the_declared_partitions_of_a_missing_topic(capsys):
    async with open_broker() as broker, await broker.connect() as conn:
        assert await generate(broker.port, "views", "--partitions-per-broker", "2") == 0
        out = capsys.readouterr().out
        assert '"views/0-0"' in out and '"views/0-1"' in out
        assert (await conn.metadata(["views"])).topic("views").partition_count == 2


async def test_generate_refuses_a_topic_with_another_count_before_writing(capsys):
    async with open_broker() as broker, await broker.connect() as conn:
        await conn.create_topic("views", 1)
        assert await generate(broker.port, "views", "--partitions-per-broker", "2") == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("trikafka:")]
        assert errors == ["trikafka: topic 'views' has a partition count of 1 on broker 0 "
                          f"(127.0.0.1:{broker.port}), not the 2 that --partitions-per-broker names"]
        assert await conn.offsets("views", 0, -1, 1) == [0]
