"""``trikafka pipeline generate`` against a real broker (no Spark involved): with
``--partitions-per-broker`` the topic gets that many partitions before anything is written,
a topic that has another count is refused in one line with nothing written, and without it
a topic no broker has is created (the README's command on a fresh ``trikafka serve``)."""

from __future__ import annotations

import functools
import json
import shlex

import trio

from tests.helpers.broker_testing import REPO_ROOT, serve_process
from tests.helpers.cli import cli
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


async def test_the_readmes_generate_command_runs_on_a_default_serve(tmp_path):
    """README's page-view section: `trikafka pipeline generate --brokers 0:127.0.0.1:9092 --topic pageviews
    ...` right after `trikafka serve --standalone`, which has no such topic: generate creates it."""
    readme = (REPO_ROOT / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.startswith("trikafka pipeline generate ")]
    async with serve_process(tmp_path / "data") as (_child, port):
        argv = shlex.split(command.replace("127.0.0.1:9092", f"127.0.0.1:{port}"))
        status, out, err = await cli(*argv[1:])
        assert status == 0, err
        assert json.loads(out)["partitions"] == {"pageviews/0-0": json.loads(out)["messages"]}
        assert err == "trikafka: topic 'pageviews' does not exist: creating it with 1 partition on each broker\n"
