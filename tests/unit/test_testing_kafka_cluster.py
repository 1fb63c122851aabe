"""trikafka.testing's in-process cluster serves the Apache Kafka protocol over its in-memory network
(issue 40, item 1): trikafka's own Trio Kafka clients reach every broker's Kafka listener through the
``open_stream`` seam, on the mock clock, and no real socket is involved (``loopback=False``: the run's
sockets are ``FakeListeners``', which refuse to connect)."""

from __future__ import annotations

import random

import pytest
import trio

from trikafka.client.kafka import (EARLIEST, KafkaAdmin, KafkaClient, KafkaGroupConsumer, KafkaProducer, NewTopic,
                                   PartitionConsumer)
from trikafka.client.errors import BrokerConnectionError
from trikafka.testing import open_broker, open_cluster

TOPIC = "events"
PARTITIONS = 2
REPLICAS = 3
RECORDS = 20
# Bounds each exchange in virtual time: a client that never gets through fails instead of hanging.
EXCHANGE_TIMEOUT_S = 120.0


async def create_replicated_topic(client: KafkaClient) -> None:
    """``TOPIC``, replicated on all three brokers, and wait until every partition has a leader."""
    created = await KafkaAdmin(client).create_topics(
        [NewTopic(TOPIC, PARTITIONS, REPLICAS, {"min.insync.replicas": "2"})])
    assert created == {TOPIC: None}
    topic = await client.topic(TOPIC)
    assert sorted(topic.partitions) == list(range(PARTITIONS))
    assert all(sorted(p.replicas) == [0, 1, 2] for p in topic.partitions.values())


async def read_partition(client: KafkaClient, partition: int, count: int) -> list[tuple[int, bytes | None]]:
    """The first ``count`` records of ``TOPIC``-``partition``, as (offset, value)."""
    seen: list[tuple[int, bytes | None]] = []
    async with PartitionConsumer(client, TOPIC, partition, EARLIEST, max_wait_s=0.1) as consumer:
        while len(seen) < count:
            seen += [(r.offset, r.value) for r in await consumer.fetch()]
    return seen


async def test_the_trio_kafka_clients_create_produce_and_read_back_over_the_in_memory_network(autojump_clock):
    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(3, loopback=False) as cluster, cluster.kafka_client() as client:
            assert client.bootstrap == tuple(member.kafka_address for member in cluster.brokers)
            async with KafkaClient(cluster.kafka_bootstrap, max_retries=0) as over_tcp:
                with pytest.raises(BrokerConnectionError):  # no real network: only the seam reaches them
                    await over_tcp.refresh_metadata()
            await create_replicated_topic(client)
            for member in cluster.brokers:  # a Kafka-format topic on every broker (§16.6)
                assert member.broker.kafka is not None and member.broker.kafka.topic_format(TOPIC) == "v2"

            async with KafkaProducer.open(client, acks=-1, idempotent=True) as producer:
                acked = [await producer.send(TOPIC, b"v%d" % n, key=b"k%d" % n) for n in range(RECORDS)]
            by_partition: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
            for n, (partition, offset) in enumerate(acked):
                by_partition[partition].append((offset, b"v%d" % n))
            assert all(by_partition.values()), f"every partition took records: {acked}"

            for partition, expected in by_partition.items():  # each record once, where it was acknowledged
                assert await read_partition(client, partition, len(expected)) == expected

            values: set[bytes | None] = set()
            async with KafkaGroupConsumer(client, "readers", [TOPIC], auto_offset_reset="earliest",
                                     session_timeout_s=10, heartbeat_interval_s=1) as group:
                async for message in group:
                    values.add(message.record.value)
                    if len(values) == RECORDS:
                        break
            assert values == {b"v%d" % n for n in range(RECORDS)}
            # The Kafka streams went through the network, to more than one broker.
            kafka_connects = {a: n for a, n in cluster.network.connects.items()
                              if a in {m.kafka_address for m in cluster.brokers}}
            assert len(kafka_connects) >= 2, cluster.network.connects


async def test_acknowledged_records_survive_a_crashed_leader_and_its_restart(autojump_clock):
    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(3, loopback=False, survive_failures=True) as cluster, \
                cluster.kafka_client(retry_backoff_s=0.5, max_retries=20) as client:
            await create_replicated_topic(client)
            async with KafkaProducer.open(client, acks=-1, idempotent=True) as producer:
                before = [await producer.send(TOPIC, b"before %d" % n, partition=0) for n in range(5)]
                leader = (await client.topic(TOPIC)).partitions[0].leader_id
                await cluster.crash(leader, random.Random(7))  # a power cut: its unflushed writes are lost
                after = [await producer.send(TOPIC, b"after %d" % n, partition=0) for n in range(5)]
            assert (await client.refresh_metadata([TOPIC])).topics[TOPIC].partitions[0].leader_id != leader
            restarted = await cluster.restart(leader)
            assert restarted.kafka_address == cluster.brokers[leader].kafka_address
            expected = [(offset, b"before %d" % n) for n, (_, offset) in enumerate(before)]
            expected += [(offset, b"after %d" % n) for n, (_, offset) in enumerate(after)]
            assert [offset for offset, _ in expected] == list(range(10))  # idempotent: none stored twice
            assert await read_partition(client, 0, 10) == expected


async def test_a_killed_broker_refuses_on_both_listeners_and_a_revived_one_serves(autojump_clock):
    async with open_cluster(1, loopback=False) as cluster:
        member = cluster.brokers[0]
        await cluster.kill(0)
        for host, port in member.addresses:
            with pytest.raises(ConnectionRefusedError):
                await cluster.open_stream(host, port)
        async with cluster.kafka_client(max_retries=0) as client:
            with pytest.raises(BrokerConnectionError):
                await client.refresh_metadata()
        cluster.revive(0)
        async with cluster.kafka_client() as client:
            assert list((await client.refresh_metadata()).brokers) == [0]


async def test_a_broker_s_in_memory_0_7_connections_reach_its_0_7_listener_only(autojump_clock):
    """With both listeners served, every in-memory 0.7 connection lands on a 0.7 processor (round
    robin over every processor once sent one in two to the Kafka listener, which closed it)."""
    async with open_broker(kafka_port=0) as broker:
        for _ in range(4):
            async with await broker.connect() as conn:
                assert await conn.offsets("t", 0, -1, 1) == [0]


async def test_a_cluster_without_a_kafka_listener_says_so():
    async with open_cluster(1, kafka_port=None) as cluster:
        assert cluster.brokers[0].kafka_address is None
        with pytest.raises(ValueError, match="no Kafka listener"):
            cluster.kafka_client()


async def test_a_transaction_s_markers_reach_the_other_brokers_over_the_in_memory_network(autojump_clock):
    """A commit writes markers to each partition's leader: the coordinator's calls to other brokers
    (§18.5) take the network too (``loopback=False``: over TCP they would find no one)."""
    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(3, loopback=False) as cluster, cluster.kafka_client() as client:
            await create_replicated_topic(client)
            leaders = {p.leader_id for p in (await client.topic(TOPIC)).partitions.values()}
            async with KafkaProducer.open(client, transactional_id="copier") as producer:
                await producer.init_transactions()
                async with producer.transaction():
                    for partition in range(PARTITIONS):
                        await producer.send(TOPIC, b"committed %d" % partition, partition=partition)
            for partition in range(PARTITIONS):
                async with PartitionConsumer(client, TOPIC, partition, EARLIEST, max_wait_s=0.1,
                                             read_committed=True) as consumer:
                    records = await consumer.fetch()
                    while not records:
                        records = await consumer.fetch()
                assert [r.value for r in records] == [b"committed %d" % partition]
                assert consumer.high_watermark == 2  # the record and its commit marker
    assert len(leaders) == PARTITIONS, "the partitions' leaders are two brokers (else no call crosses)"
