"""Kafka-format topics beside 0.7 ones, from the command line (real processes against a real
``trikafka serve``): ``topics`` lists both and marks the Kafka-format ones, and a 0.7 command on a
Kafka-format topic says to add ``--kafka`` (docs/protocol.md §16.6)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import cli, lines
from tests.helpers.kafka_processes import kafka_serve

HINT = "greetings-v2 is a Kafka-format topic: add --kafka"


async def _with_both_formats(serve) -> tuple[str, ...]:
    """A 0.7 topic ``greetings`` and a Kafka-format ``greetings-v2`` read by a Kafka consumer group
    (which creates ``__consumer_offsets``); the ``--broker`` flags of the 0.7 port."""
    broker = ("--broker", f"127.0.0.1:{serve.port}")
    for topic, protocol in (("greetings", broker), ("greetings-v2", ("--kafka", serve.bootstrap))):
        status, _, err = await cli("produce", topic, *protocol, stdin=lines("hello", "world"))
        assert status == 0, err
    status, out, err = await cli("consume", "greetings-v2", "--kafka", serve.bootstrap, "--group", "readers",
                                 "--max-messages", "2")
    assert (status, out) == (0, "hello\nworld\n"), err
    return broker


async def test_topics_lists_every_topic_with_kafka_format_ones_marked(tmp_path):
    async with kafka_serve(tmp_path / "broker") as serve:
        broker = await _with_both_formats(serve)

        status, out, err = await cli("topics", *broker)
        assert status == 0, err
        rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()}
        assert rows["greetings"] == ["1 partition", "30 bytes"]
        assert rows["greetings-v2"] == ["1 partition", "Kafka format (--kafka reads it)"]
        assert rows["__consumer_offsets"][1] == "Kafka format (--kafka reads it)"

        status, out, err = await cli("topics", "--json", *broker)
        assert status == 0, err
        formats = {t["topic"]: t["format"] for t in json.loads(out)["topics"]}
        assert formats == {"greetings": "0.7", "greetings-v2": "kafka", "__consumer_offsets": "kafka"}

        status, out, err = await cli("topics", "greetings-v2", "greetings", *broker)
        assert status == 0, err
        assert out.splitlines()[1:] == [f"greetings-v2\t0\t127.0.0.1:{serve.port}\t-\t-\t-",
                                        f"greetings\t0\t127.0.0.1:{serve.port}\t0\t30\t30"]
        assert err == f"trikafka: {HINT}\n"


@pytest.mark.parametrize("command", [("consume", "greetings-v2", "-e"), ("consume", "greetings-v2"),
                                     ("produce", "greetings-v2"), ("produce", "greetings-v2", "--acks", "0")])
async def test_a_07_command_on_a_kafka_format_topic_says_to_add_kafka(tmp_path, command):
    async with kafka_serve(tmp_path / "broker") as serve:
        status, _, err = await cli("produce", "greetings-v2", "--kafka", serve.bootstrap, stdin=lines("hello"))
        assert status == 0, err
        status, out, err = await cli(*command, "--broker", f"127.0.0.1:{serve.port}", stdin=lines("more"))
        assert (status, out, err) == (1, "", f"trikafka: {HINT}\n")
        status, out, err = await cli("consume", "greetings-v2", "--kafka", serve.bootstrap, "--max-messages", "5",
                                     "--exit-at-end")
        assert (status, out) == (0, "hello\n"), err  # nothing of the refused produce was written


@pytest.mark.zookeeper
async def test_topics_from_zookeeper_marks_kafka_format_topics(tmp_path, zk_chroot):
    """``topics --zookeeper``, what a cluster's operator runs: every broker's topics, the Kafka-format
    ones without 0.7 offsets."""
    async with kafka_serve(tmp_path / "broker", broker_id=1, zookeeper=zk_chroot) as serve:
        await _with_both_formats(serve)
        status, out, err = await cli("topics", "--zookeeper", zk_chroot)
        assert status == 0, err
        rows = {tuple(line.split("\t")[:2]): line.split("\t")[3:] for line in out.splitlines()[1:]}
        assert rows[("greetings", "0")] == ["0", "30", "30"]
        assert rows[("greetings-v2", "0")] == ["-", "-", "-"]
        assert HINT in err


@pytest.mark.zookeeper
async def test_produce_through_zookeeper_to_a_kafka_format_topic_says_to_add_kafka(tmp_path, zk_chroot):
    async with kafka_serve(tmp_path / "broker", broker_id=1, zookeeper=zk_chroot) as serve:
        status, _, err = await cli("produce", "greetings-v2", "--kafka", serve.bootstrap, stdin=lines("hello"))
        assert status == 0, err
        status, out, err = await cli("produce", "greetings-v2", "--zookeeper", zk_chroot, stdin=lines("more"))
        assert (status, out, err.splitlines()[-1:]) == (1, "", [f"trikafka: {HINT}"])


@pytest.mark.zookeeper
async def test_a_zookeeper_group_on_a_kafka_format_topic_says_to_add_kafka(tmp_path, zk_chroot):
    async with kafka_serve(tmp_path / "broker", broker_id=1, zookeeper=zk_chroot) as serve:
        status, _, err = await cli("produce", "greetings-v2", "--kafka", serve.bootstrap, stdin=lines("hello"))
        assert status == 0, err
        status, out, err = await cli("consume", "greetings-v2", "--group", "readers", "--zookeeper", zk_chroot,
                                     "--max-messages", "1")
        assert (status, out, err) == (1, "", f"trikafka: {HINT}\n")


async def test_consume_from_an_offset_outside_the_log_names_the_log_s_offsets(tmp_path):
    """``consume --kafka --from N`` below the log start (records deleted by DeleteRecords) or past the
    end is one line naming where the partition's log starts and ends, before consuming anything."""
    import trio
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    async with kafka_serve(tmp_path / "broker") as serve:
        status, _, err = await cli("produce", "clicks", "--kafka", serve.bootstrap, stdin=lines("a", "b", "c"))
        assert status == 0, err

        def delete_before_2() -> None:
            admin = AdminClient({"bootstrap.servers": serve.bootstrap})
            (deleted,) = admin.delete_records([TopicPartition("clicks", 0, 2)]).values()
            deleted.result(timeout=30)

        await trio.to_thread.run_sync(delete_before_2)
        for offset in ("0", "4"):
            status, out, err = await cli("consume", "clicks", "--kafka", serve.bootstrap, "--from", offset, "-e")
            assert (status, out, err) == (
                1, "", f"trikafka: --from {offset} is outside clicks-0: its log starts at offset 2 and ends at 3\n")
        status, out, err = await cli("consume", "clicks", "--kafka", serve.bootstrap, "--from", "2", "-e")
        assert (status, out) == (0, "c\n"), err


async def test_consume_group_protocol_consumer_joins_as_a_kafka_4_member(tmp_path):
    """``consume --kafka --group G --group-protocol consumer`` is a member of Kafka 4's protocol (the
    broker assigns, §17.9), which ``groups G --kafka`` then shows; the flag is only for a --kafka group."""
    async with kafka_serve(tmp_path / "broker") as serve:
        status, _, err = await cli("produce", "clicks", "--kafka", serve.bootstrap, stdin=lines("a", "b"))
        assert status == 0, err
        status, out, err = await cli("consume", "clicks", "--kafka", serve.bootstrap, "--group", "clickers",
                                     "--group-protocol", "consumer", "--from", "earliest", "--max-messages", "2")
        assert (status, out) == (0, "a\nb\n"), err
        status, out, err = await cli("groups", "clickers", "--kafka", serve.bootstrap)
        assert status == 0, err
        # the group epoch: 1 when the member joined, 2 when it left (§17.9)
        assert out.splitlines()[0] == "group clickers: Empty, protocol consumer/uniform, group epoch 2, 0 members"
        status, _, err = await cli("consume", "clicks", "--kafka", serve.bootstrap, "--group-protocol", "consumer")
        assert (status, err.splitlines()[-1]) == (
            2, "trikafka: error: --group-protocol is for a --kafka --group member")
