"""trikafka's group consumer and ``trikafka groups --kafka`` against the broker's group coordinator (§17.8)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Iterator

import pytest
import trio

from trikafka.client.kafka import KafkaAdmin, KafkaClient, KafkaProducer, NewTopic
from trikafka.client.kafka.group import KafkaGroupConsumer, KafkaGroupMessage
from trikafka.client.kafka.group_offsets import TopicPartition
from trikafka.testing import running_kafka_group_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

HANG_GUARD_S = 60.0  # a broken rebalance fails the test instead of hanging it; no timing is asserted


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_group_broker(num_partitions=1) as running:
        yield running


async def _topic(client: KafkaClient, name: str, partitions: int, count: int) -> None:
    assert await KafkaAdmin(client).create_topics([NewTopic(name, partitions)]) == {name: None}
    async with KafkaProducer.open(client, acks=-1) as producer:
        for i in range(count):
            await producer.send(name, f"{name}-{i}".encode(), partition=i % partitions)


async def _until(condition: object) -> None:
    """Wait until ``condition()`` holds (the rebalance settles), checking as the clock moves on."""
    with trio.fail_after(HANG_GUARD_S):
        while not condition():  # type: ignore[operator]
            await trio.sleep(0.05)


class Member:
    """A ``KafkaGroupConsumer`` reading in its own task into ``seen`` until ``stop``."""

    def __init__(self, consumer: KafkaGroupConsumer):
        self.consumer = consumer
        self.seen: list[KafkaGroupMessage] = []
        self.stopped = trio.Event()
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        async with self.consumer:
            with self.scope:
                async for message in self.consumer:
                    self.seen.append(message)
        self.stopped.set()

    async def stop(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


def _members(bootstrap: str, group: str, topic: str, count: int, group_protocol: str = "classic") -> list[Member]:
    return [Member(KafkaGroupConsumer(bootstrap, group, [topic], auto_offset_reset="earliest", max_wait_s=0.1,
                                      heartbeat_interval_s=0.2, session_timeout_s=10.0, rebalance_timeout_s=10.0,
                                      group_protocol=group_protocol))
            for _ in range(count)]


async def _first_read(member: Member) -> list[bytes | None]:
    """What ``member`` reads first, from where its group committed."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(member.run)
        await _until(lambda: member.seen)
        await member.stop()
    return [m.record.value for m in member.seen]


def _values(members: list[Member]) -> set[bytes | None]:
    return {m.record.value for member in members for m in member.seen}


def _held(members: list[Member]) -> list[list[TopicPartition]]:
    return [m.consumer.assignment for m in members]


async def test_three_members_share_six_partitions_and_take_over_from_one_that_leaves(
        kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        await _topic(client, "g3", 6, 60)
    members = _members(kafka.bootstrap, "three", "g3", 3)
    async with trio.open_nursery() as nursery:
        for member in members:
            nursery.start_soon(member.run)
        await _until(lambda: len(_values(members)) >= 60 and all(len(held) == 2 for held in _held(members)))
        held = _held(members)
        assert sorted(tp for h in held for tp in h) == [TopicPartition("g3", p) for p in range(6)]
        assert _values(members) == {f"g3-{i}".encode() for i in range(60)}
        await members[0].stop()
        await _until(lambda: sorted(tp for h in _held(members[1:]) for tp in h) == [
            TopicPartition("g3", p) for p in range(6)])
        async with KafkaClient(kafka.bootstrap) as client:
            async with KafkaProducer.open(client, acks=-1) as producer:
                for i in range(60, 72):
                    await producer.send("g3", f"g3-{i}".encode(), partition=i % 6)
        await _until(lambda: len(_values(members)) >= 72)
        for member in members[1:]:
            await member.stop()
    assert _values(members) == {f"g3-{i}".encode() for i in range(72)}  # at-least-once: every record, maybe twice

    # a new member starts from what the group committed: nothing of the 72 again
    async with KafkaClient(kafka.bootstrap) as client:
        committed = await KafkaAdmin(client).list_group_offsets("three")
        assert committed == {TopicPartition("g3", p): 12 for p in range(6)}
        async with KafkaProducer.open(client, acks=-1) as producer:
            await producer.send("g3", b"after", partition=3)
    assert await _first_read(_members(kafka.bootstrap, "three", "g3", 1)[0]) == [b"after"]


async def test_a_group_consumer_and_a_librdkafka_consumer_split_the_partitions(kafka: RunningKafkaBroker) -> None:
    from confluent_kafka import Consumer

    async with KafkaClient(kafka.bootstrap) as client:
        await _topic(client, "mixed", 4, 40)
    theirs: set[bytes] = set()
    their_assignment: list[TopicPartition] = []
    stop = threading.Event()

    def librdkafka() -> None:
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "mixed",
                             "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"})
        consumer.subscribe(["mixed"])
        try:
            while not stop.is_set():
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    theirs.add(message.value())
                their_assignment[:] = sorted(TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment())
        finally:
            consumer.close()

    member = _members(kafka.bootstrap, "mixed", "mixed", 1)[0]
    everything = {f"mixed-{i}".encode() for i in range(40)}

    def split() -> bool:
        mine = member.consumer.assignment
        return (len(mine) == 2 and len(their_assignment) == 2
                and sorted(mine + their_assignment) == [TopicPartition("mixed", p) for p in range(4)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(member.run)
        nursery.start_soon(trio.to_thread.run_sync, librdkafka)
        await _until(lambda: split() and _values([member]) | theirs >= everything)
        stop.set()
        await member.stop()
    assert _values([member]) | theirs == everything


# a consumer-protocol group (§17.9) is described by ConsumerGroupDescribe: DescribeGroups answers it Dead
@pytest.mark.parametrize("broker, group_protocol, assignor", [("kafka", "classic", "range"),
                                                              ("kafka4", "consumer", "uniform")])
async def test_groups_describe_shows_members_and_lag(request: pytest.FixtureRequest, broker: str,
                                                     group_protocol: str, assignor: str) -> None:
    kafka: RunningKafkaBroker = request.getfixturevalue(broker)
    async with KafkaClient(kafka.bootstrap) as client:
        await _topic(client, "described", 2, 10)
    member = Member(KafkaGroupConsumer(kafka.bootstrap, "described-group", ["described"], auto_offset_reset="earliest",
                                       enable_auto_commit=False, max_wait_s=0.1, group_protocol=group_protocol))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(member.run)
        await _until(lambda: len(member.seen) >= 4 and len(member.consumer.assignment) == 2)
        committed = dict(member.consumer.consumed)  # what commit() commits: it reads them before its first await
        await member.consumer.commit()
        shown = await trio.to_thread.run_sync(lambda: subprocess.run(
            [sys.executable, "-m", "trikafka", "groups", "--kafka", kafka.bootstrap, "described-group"],
            capture_output=True, text=True, check=True).stdout)
        await member.stop()
    lines = shown.splitlines()
    # A Kafka 4 consumer group shows its group epoch between the assignor and the members (§17.8).
    assert lines[0].startswith(f"group described-group: Stable, protocol consumer/{assignor}, ")
    assert lines[0].endswith(", 1 member")
    assert lines[1] == "member\tinstance\tclient_id\thost\tassignment"
    assert lines[2].startswith(member.consumer.membership.member_id)
    assert lines[2].endswith("described-0,described-1")
    assert lines[3] == "topic\tpartition\tmember\tcommitted\tlog_end\tlag"
    for partition in (0, 1):
        offset = committed[TopicPartition("described", partition)]
        assert f"described\t{partition}\t{member.consumer.membership.member_id}\t{offset}\t5\t{5 - offset}" in lines


@pytest.fixture(scope="module")
def kafka4() -> Iterator[RunningKafkaBroker]:
    """A broker whose consumer groups (§17.9) ask for a heartbeat every 0.2 s, so a rebalance takes a few."""
    with running_kafka_group_broker(num_partitions=1, group_consumer_heartbeat_interval_ms=200) as running:
        yield running


async def test_consumer_protocol_members_share_partitions_and_one_takes_all_when_the_other_leaves(
        kafka4: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka4.bootstrap) as client:
        await _topic(client, "k4", 4, 40)
    members = _members(kafka4.bootstrap, "kip848", "k4", 2, "consumer")
    everything = [TopicPartition("k4", p) for p in range(4)]
    async with trio.open_nursery() as nursery:
        for member in members:
            nursery.start_soon(member.run)
        await _until(lambda: len(_values(members)) >= 40 and all(len(held) == 2 for held in _held(members)))
        assert sorted(tp for h in _held(members) for tp in h) == everything
        assert all(m.consumer.membership.generation_id > 0 for m in members)  # the member epoch commits carry
        await members[0].stop()
        await _until(lambda: members[1].consumer.assignment == everything)
        async with KafkaClient(kafka4.bootstrap) as client:
            async with KafkaProducer.open(client, acks=-1) as producer:
                for i in range(40, 48):
                    await producer.send("k4", f"k4-{i}".encode(), partition=i % 4)
        await _until(lambda: len(_values(members)) >= 48)
        await members[1].stop()
    assert _values(members) == {f"k4-{i}".encode() for i in range(48)}

    async with KafkaClient(kafka4.bootstrap) as client:
        assert await KafkaAdmin(client).list_group_offsets("kip848") == {tp: 12 for tp in everything}
        async with KafkaProducer.open(client, acks=-1) as producer:
            await producer.send("k4", b"after", partition=1)
    assert await _first_read(_members(kafka4.bootstrap, "kip848", "k4", 1, "consumer")[0]) == [b"after"]
