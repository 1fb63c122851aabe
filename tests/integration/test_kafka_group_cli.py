"""``trikafka groups --kafka`` (docs/protocol.md §17.8) on a librdkafka group: the list, one group's
members with their decoded assignments, its committed offsets and lag, and deleting it once empty."""

from __future__ import annotations

import functools
import time
from typing import Iterator

import pytest
import trio
from confluent_kafka import Consumer

from tests.helpers.cli import cli
from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_groups import ConfluentGroup, produce
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

PARTITIONS = 4
PER_PARTITION = 20
GROUP = "cli-group"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=5) as running:
        yield running


def _consume_all(group: ConfluentGroup) -> None:
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    group.add("a")
    group.add("b")
    assert group.poll_until(lambda: group.balanced(PARTITIONS, 2) and group.delivered() >= everything)
    group.commit("a")
    group.commit("b")


async def test_groups_lists_describes_and_deletes_a_kafka_group(kafka):
    bootstrap = kafka.bootstrap
    await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "cli-topic", partitions=PARTITIONS))
    await trio.to_thread.run_sync(produce, bootstrap, "cli-topic", PARTITIONS, PER_PARTITION)
    group = ConfluentGroup(bootstrap, GROUP, "cli-topic")
    try:
        await trio.to_thread.run_sync(_consume_all, group)
        status, out, err = await cli("groups", "--kafka", bootstrap)
        assert status == 0, err
        assert f"{GROUP}\tconsumer\tStable" in out.splitlines()

        status, out, err = await cli("groups", GROUP, "--kafka", bootstrap)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0].startswith(f"group {GROUP}: Stable, protocol consumer/") and lines[0].endswith(", 2 members")
        members = lines[2:4]
        owned = sorted(int(p.removeprefix("cli-topic-")) for m in members for p in m.split("\t")[4].split(","))
        assert owned == list(range(PARTITIONS))  # librdkafka's assignment, decoded: every partition once
        assert all(m.split("\t")[2] == "rdkafka" for m in members)
        assert lines[4] == "topic\tpartition\tmember\tcommitted\tlog_end\tlag"
        rows = [line.split("\t") for line in lines[5:]]
        assert [(r[0], r[1], r[3], r[4], r[5]) for r in rows] == [
            ("cli-topic", str(p), str(PER_PARTITION), str(PER_PARTITION), "0") for p in range(PARTITIONS)]
        assert {r[2] for r in rows} == {m.split("\t")[0] for m in members}  # each partition's owner

        await trio.to_thread.run_sync(produce, bootstrap, "cli-topic", PARTITIONS, 5, PER_PARTITION)
        status, out, _ = await cli("groups", GROUP, "--kafka", bootstrap)
        row = next(line.split("\t") for line in out.splitlines() if line.startswith("cli-topic\t0\t"))
        assert row[3:] == [str(PER_PARTITION), str(PER_PARTITION + 5), "5"]  # lag in records

        status, _, err = await cli("groups", GROUP, "--kafka", bootstrap, "--delete")
        assert status == 1 and "NON_EMPTY_GROUP" in err
    finally:
        await trio.to_thread.run_sync(group.close_all)
    status, _, err = await cli("groups", GROUP, "--kafka", bootstrap, "--delete")
    assert status == 0 and f"deleted group {GROUP}" in err
    status, out, _ = await cli("groups", "--kafka", bootstrap)
    assert GROUP not in out
    status, _, err = await cli("groups", GROUP, "--kafka", bootstrap)
    assert status == 1 and f"no group {GROUP!r}" in err


def _kip848_member_owning_everything(bootstrap: str, topic: str, group: str) -> Consumer:
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    member.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while {tp.partition for tp in member.assignment()} != set(range(PARTITIONS)):
        assert time.monotonic() < deadline, "the KIP-848 member was not assigned every partition"
        member.poll(0.05)
    return member


async def test_groups_describes_a_kafka_4_consumer_group(kafka):
    """§17.8: a KIP-848 group, which DescribeGroups answers as Dead, is shown from ConsumerGroupDescribe."""
    bootstrap = kafka.bootstrap
    await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "cli-kip848", partitions=PARTITIONS))
    member = await trio.to_thread.run_sync(_kip848_member_owning_everything, bootstrap, "cli-kip848", "cli-kip848-g")
    try:
        status, out, err = await cli("groups", "cli-kip848-g", "--kafka", bootstrap)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("group cli-kip848-g: Stable, protocol consumer/uniform, group epoch ")
        assert lines[0].endswith(", 1 member")
        row = lines[2].split("\t")
        assert row[2] == "rdkafka"
        assert row[4] == ",".join(f"cli-kip848-{p}" for p in range(PARTITIONS))
    finally:
        await trio.to_thread.run_sync(member.close)
