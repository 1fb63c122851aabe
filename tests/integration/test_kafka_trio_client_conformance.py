"""trikafka's Trio client against two brokers: trikafka's own and librdkafka's mock cluster.

The same tests run against both. trikafka's broker and client share one codec
(``kio``), so a mistake they made alike would pass every test of the one
against the other; librdkafka's mock cluster is a second implementation of the
protocol, written in C by others. Covered: version negotiation (the mock
answers ApiVersions v3 with an empty refusal, §16.2), metadata, produce at
acks 1, all and idempotent, fetch, ListOffsets, and a group member that joins,
reads, commits and is resumed from its commit by the next member, over the
classic protocol and Kafka 4's (ConsumerGroupHeartbeat, which the mock of
confluent-kafka 2.16 serves at v1).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest
import trio

from tests.helpers.kafka_clients import read_partition
from tests.helpers.kafka_mock_cluster import LIBRDKAFKA_GROUP_VERSIONS, MOCK_PARTITIONS, librdkafka_mock_cluster
from trikafka.client.kafka import EARLIEST, LATEST, KafkaAdmin, KafkaClient, KafkaGroupConsumer, KafkaProducer, NewTopic
from trikafka.kafka.apis import KafkaApi
from trikafka.testing import running_kafka_broker

PARTITIONS = MOCK_PARTITIONS
TOPICS = ("conformance-acks1", "conformance-acksall", "conformance-idempotent", "conformance-group",
          "conformance-kip848")


class Broker:
    """A bootstrap address, and the api versions a client must stay under there."""

    def __init__(self, bootstrap: str, max_versions: dict[KafkaApi, int]):
        self.bootstrap = bootstrap
        self.max_versions = max_versions

    def client(self) -> KafkaClient:
        return KafkaClient(self.bootstrap, max_versions=self.max_versions)


@contextmanager
def _trikafka() -> Iterator[Broker]:
    with running_kafka_broker(num_partitions=1) as running:
        async def create() -> None:
            async with KafkaClient(running.bootstrap) as client:
                errors = await KafkaAdmin(client).create_topics([NewTopic(t, PARTITIONS) for t in TOPICS])
                assert errors == {t: None for t in TOPICS}
        trio.run(create)
        yield Broker(running.bootstrap, {})


@contextmanager
def _mock() -> Iterator[Broker]:
    with librdkafka_mock_cluster(3, TOPICS) as bootstrap:
        yield Broker(bootstrap, dict(LIBRDKAFKA_GROUP_VERSIONS))


@pytest.fixture(scope="module", params=["trikafka", "librdkafka-mock"])
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with (_trikafka() if request.param == "trikafka" else _mock()) as running:
        yield running


async def test_metadata_names_the_brokers_and_every_partition_s_leader(broker: Broker) -> None:
    async with broker.client() as client:
        metadata = await client.refresh_metadata(None)
        topic = await client.topic("conformance-acks1")
    assert metadata.brokers and all(node.port > 0 for node in metadata.brokers.values())
    assert sorted(topic.partitions) == list(range(PARTITIONS))
    assert {p.leader_id for p in topic.partitions.values()} <= set(metadata.brokers)


@pytest.mark.parametrize("topic, acks, idempotent", [("conformance-acks1", 1, False),
                                                     ("conformance-acksall", -1, False),
                                                     ("conformance-idempotent", -1, True)])
async def test_keyed_records_are_stored_in_order_and_read_back_whole(broker: Broker, topic: str, acks: int,
                                                                     idempotent: bool) -> None:
    sent = [(f"key-{i % 7}".encode(), f"value-{i}".encode() * (1 + i % 3), (("n", str(i).encode()),))
            for i in range(60)]
    async with broker.client() as client:
        async with KafkaProducer.open(client, acks=acks, idempotent=idempotent, linger_s=0.005) as producer:
            placed = [await producer.send(topic, value, key=key, headers=headers) for key, value, headers in sent]
        by_partition: dict[int, list[int]] = {}
        for index, (partition, offset) in enumerate(placed):
            by_partition.setdefault(partition, []).append(index)
            assert offset == len(by_partition[partition]) - 1  # each partition's offsets are dense from 0
        # The key decides the partition: one key, one partition.
        assert all(len({placed[i][0] for i in range(k, 60, 7)}) == 1 for k in range(7))
        for partition in range(PARTITIONS):
            with trio.fail_after(20):
                records = await read_partition(client, topic, partition, len(by_partition.get(partition, [])))
            assert [(r.key, r.value, r.headers) for r in records] == [
                sent[i] for i in by_partition.get(partition, [])]
            assert [r.offset for r in records] == list(range(len(records)))
        ends = await KafkaAdmin(client).list_offsets(topic, {p: LATEST for p in range(PARTITIONS)})
        starts = await KafkaAdmin(client).list_offsets(topic, {p: EARLIEST for p in range(PARTITIONS)})
    assert {p: at.offset for p, at in ends.items()} == {p: len(by_partition.get(p, [])) for p in range(PARTITIONS)}
    assert {p: at.offset for p, at in starts.items()} == {p: 0 for p in range(PARTITIONS)}


@pytest.mark.parametrize("group_protocol, topic", [("classic", "conformance-group"),
                                                    ("consumer", "conformance-kip848")])
async def test_a_group_member_reads_every_partition_commits_and_the_next_member_resumes(
        broker: Broker, group_protocol: str, topic: str) -> None:
    values = [f"g-{i}".encode() for i in range(40)]
    async with broker.client() as client:
        async with KafkaProducer.open(client, acks=-1, linger_s=0.005) as producer:
            for i, value in enumerate(values):
                await producer.send(topic, value, partition=i % PARTITIONS)
        assigned: list[list[tuple[str, int]]] = []

        async def on_assigned(partitions: list) -> None:
            assigned.append(sorted((tp.topic, tp.partition) for tp in partitions))

        # librdkafka's mock holds the join of a group that a member left for the timeouts of the members
        # it knew (seen: not answered in 20 s at Kafka's defaults, 45 s and 300 s): 6 s and 5 s keep it short.
        settings = {"auto_offset_reset": "earliest", "enable_auto_commit": False, "rebalance_timeout_s": 5.0,
                    "session_timeout_s": 6.0, "group_protocol": group_protocol}
        seen: list[bytes] = []
        with trio.fail_after(30):
            async with KafkaGroupConsumer(client, topic, [topic], on_assigned=on_assigned,
                                          **settings) as consumer:  # type: ignore[arg-type]
                async for message in consumer:
                    seen.append(message.record.value or b"")
                    if len(seen) == len(values):
                        break
                await consumer.commit()
        assert sorted(seen) == sorted(values)
        assert assigned[-1] == [(topic, p) for p in range(PARTITIONS)]
        async with KafkaProducer.open(client, acks=-1) as producer:
            later = [await producer.send(topic, b"after-commit", partition=p) for p in range(PARTITIONS)]
        assert [offset for _, offset in later] == [len(values) // PARTITIONS] * PARTITIONS
        resumed: list[bytes] = []
        with trio.fail_after(30):
            async with KafkaGroupConsumer(client, topic, [topic],
                                          **settings) as consumer:  # type: ignore[arg-type]
                async for message in consumer:
                    resumed.append(message.record.value or b"")
                    if len(resumed) == PARTITIONS + 1:
                        break
        # The commit, not the earliest offset, is where it starts. The record the first member left
        # the loop on is read again: a message counts as consumed once its loop body has finished,
        # and a ``break`` leaves the iterator before it resumes (at least once, §17.8).
        assert sorted(resumed) == sorted([seen[-1]] + [b"after-commit"] * PARTITIONS)
