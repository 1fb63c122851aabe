"""The Kafka listener on a ZooKeeper cluster (docs/protocol.md §16.1, §16.4, §16.6, §12).

Three real ``trikafka serve --zookeeper`` processes; real Kafka clients create a
replicated Kafka-format topic, produce with ``acks=all`` and read it back.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from tests.helpers.broker_testing import produce_acked
from tests.helpers.kafka_clients import (CountedProducer, check_acknowledged_read_back, create_topic,
                                         high_watermarks, read_with_confluent)
from tests.helpers.kafka_processes import kafka_cluster
from trikafka.client import connect

TOPIC = "replicated-v2"
PARTITIONS = 2
RECORDS = 1000
WAIT_S = 60.0
BROKER_IDS = [1, 2, 3]
FLUSH_INTERVAL_MS = 3000


def partition_bytes(log_dir: Path, topic: str, partition: int) -> tuple[bytes, bytes]:
    """(the ``.trikafka-format`` file, the segments in offset order) of one replica (blocking)."""
    directory = log_dir / f"{topic}-{partition}"
    fmt = (directory / ".trikafka-format").read_bytes()
    return fmt, b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


async def wait_full_metadata(bootstrap: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """Metadata once every partition has a leader and its full ISR: partition -> (leader, replicas, isr)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with trio.fail_after(WAIT_S):
        while True:
            metadata = await trio.to_thread.run_sync(functools.partial(admin.list_topics, timeout=10))
            assert sorted(metadata.brokers) == BROKER_IDS  # every broker's Kafka listener (§16.1)
            topic = metadata.topics[TOPIC]
            found = {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in topic.partitions.items()}
            if len(found) == PARTITIONS and all(leader >= 0 and isr == BROKER_IDS
                                                for leader, _, isr in found.values()):
                return found
            await trio.sleep(0.1)


async def test_a_replicated_kafka_topic_takes_acks_all_writes_and_every_replica_holds_them(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, PARTITIONS,
                                                        {"min.insync.replicas": "2"}, replication_factor=3))
        found = await wait_full_metadata(bootstrap)
        assert all(replicas == BROKER_IDS for _, replicas, _ in found.values())
        ports = {b.kafka_port for b in cluster.brokers.values()}
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert {b.port for b in metadata.brokers.values()} == ports

        admin = AdminClient({"bootstrap.servers": bootstrap})
        (future,) = admin.describe_configs([ConfigResource("topic", TOPIC)]).values()
        configs = await trio.to_thread.run_sync(functools.partial(future.result, timeout=30))
        assert configs["min.insync.replicas"].value == "2"

        producer = CountedProducer(bootstrap, TOPIC)
        await trio.to_thread.run_sync(producer.run, 0, RECORDS)
        assert producer.failed == [] and len(producer.acked) == RECORDS
        ends = await trio.to_thread.run_sync(high_watermarks, bootstrap, TOPIC, PARTITIONS)
        assert sum(ends) == RECORDS  # no fault: nothing sent twice
        seen = await trio.to_thread.run_sync(read_with_confluent, bootstrap, TOPIC, PARTITIONS, RECORDS)
        check_acknowledged_read_back(producer.acked, seen, PARTITIONS)
        assert len(seen) == RECORDS

        # Followers append the leader's batches verbatim (§16.6): byte-identical v2 replicas.
        with trio.fail_after(WAIT_S):
            for partition in range(PARTITIONS):
                while True:
                    replicas = [await trio.to_thread.run_sync(partition_bytes, cluster.brokers[b].log_dir, TOPIC,
                                                              partition) for b in BROKER_IDS]
                    if len(set(replicas)) == 1 and replicas[0][1]:
                        break
                    await trio.sleep(0.1)
                assert replicas[0][0] == b"v2\n"


GROWN = "grown-then-deleted"


async def _admin_call(call: Any) -> None:
    """Run a confluent-kafka admin call (a dict of futures) to completion in a thread; its errors raise."""
    futures = call()
    for future in futures.values():
        await trio.to_thread.run_sync(functools.partial(future.result, timeout=30))


async def _metadata(bootstrap: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return await trio.to_thread.run_sync(functools.partial(admin.list_topics, timeout=10))


def _produce_to_each_partition(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    """One acks=all record to each partition by number; the (partition, offset) of each answer."""
    from confluent_kafka import Producer

    acked: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30_000})
    for partition in range(partitions):
        producer.produce(topic, value=b"x", partition=partition,
                         on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset()))
                         if err is None else None)
    assert producer.flush(60) == 0
    return sorted(acked)


async def test_create_partitions_and_delete_topics_on_a_zookeeper_cluster(zk_chroot, tmp_path):
    """§16.4: CreatePartitions adds replicated partitions that every broker serves; DeleteTopics removes
    the topic from every broker's Metadata and log directory, and a topic created again is empty."""
    async with kafka_cluster(tmp_path, zk_chroot) as cluster:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, GROWN, 1, replication_factor=3))
        await _admin_call(lambda: admin.create_partitions([NewPartitions(GROWN, 3)]))
        each_broker = [f"127.0.0.1:{cluster.brokers[b].kafka_port}" for b in BROKER_IDS]
        with trio.fail_after(WAIT_S):
            for one in each_broker:  # each broker learns of the new partitions through its own watch
                while True:
                    partitions = (await _metadata(one)).topics[GROWN].partitions
                    if len(partitions) == 3 and all(len(p.isrs) == 3 and p.leader >= 0
                                                    for p in partitions.values()):
                        break
                    await trio.sleep(0.1)
        acked = await trio.to_thread.run_sync(_produce_to_each_partition, bootstrap, GROWN, 3)
        assert acked == [(0, 0), (1, 0), (2, 0)]  # (partition, offset): every new partition takes writes
        with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
            await _admin_call(lambda: admin.create_partitions([NewPartitions(GROWN, 2)]))

        await _admin_call(lambda: admin.delete_topics([GROWN]))
        directories = [cluster.brokers[b].log_dir / f"{GROWN}-{p}" for b in BROKER_IDS for p in range(3)]
        with trio.fail_after(WAIT_S):
            for one in each_broker:
                while GROWN in (await _metadata(one)).topics:
                    await trio.sleep(0.1)
            while any(d.exists() for d in directories):
                await trio.sleep(0.1)

        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, GROWN, 1, replication_factor=3))
        with trio.fail_after(WAIT_S):
            while not ((found := (await _metadata(bootstrap)).topics.get(GROWN)) and found.partitions
                       and found.partitions[0].leader >= 0):
                await trio.sleep(0.1)
        assert await trio.to_thread.run_sync(high_watermarks, bootstrap, GROWN, 1) == [0]


async def test_topics_created_without_a_replication_factor_take_default_replication_factor(zk_chroot, tmp_path):
    """§16.4, §16.5: CreateTopics with -1 (KIP-464) and auto-creation take `default.replication.factor`,
    as librdkafka's reference environment (three brokers, default replication factor 3) sets it."""
    from confluent_kafka.admin import NewTopic

    async with kafka_cluster(tmp_path, zk_chroot, 3, "--set", "default.replication.factor=3",
                             "--set", "num.partitions=2") as cluster:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        await _admin_call(lambda: admin.create_topics([NewTopic("defaulted")]))  # -1 partitions, -1 factor
        acked = await trio.to_thread.run_sync(_produce_to_each_partition, bootstrap, "auto-created", 2)
        assert acked == [(0, 0), (1, 0)]
        with trio.fail_after(WAIT_S):
            for topic in ("defaulted", "auto-created"):
                while not ((found := (await _metadata(bootstrap)).topics.get(topic)) and found.partitions):
                    await trio.sleep(0.1)
                assert {p: sorted(m.replicas) for p, m in found.partitions.items()} == {0: BROKER_IDS,
                                                                                        1: BROKER_IDS}



def _produce_acks_1(bootstrap: str, topic: str, value: bytes) -> None:
    """One record with acks=1: answered once the leader appended it, before any flush."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "message.timeout.ms": 30_000})
    producer.produce(topic, value=value, partition=0)
    assert producer.flush(60) == 0


async def test_a_topic_deleted_before_its_flush_deadline_leaves_every_broker_serving(zk_chroot, tmp_path):
    """librdkafka's 0098_consumer_txn deletes a topic seconds after producing to it: the pending flush
    deadline of its log then found the log closed, and all three brokers stopped (LogClosedError)."""
    flags = ("--set", f"log.flush.interval.ms={FLUSH_INTERVAL_MS}", "--set", "log.flush.interval.messages=100000")
    async with kafka_cluster(tmp_path, zk_chroot, 3, *flags) as cluster:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "doomed", 1))
        await trio.to_thread.run_sync(_produce_acks_1, bootstrap, "doomed", b"unflushed")
        [holder] = [b for b in cluster.brokers.values() if (b.log_dir / "doomed-0").exists()]
        await _admin_call(lambda: admin.delete_topics(["doomed"]))
        with trio.fail_after(WAIT_S):
            while (holder.log_dir / "doomed-0").exists():  # closed and removed before its deadline
                await trio.sleep(0.1)
        # A 0.7 message is visible once flushed (§7.2): appended after the deletion, so at a later deadline.
        await produce_acked(holder.port, "later", 0, b"after")
        async with await connect("127.0.0.1", holder.port) as conn:
            with trio.fail_after(WAIT_S):
                while (await conn.offsets("later", 0, -1, 1)) == [0]:
                    await trio.sleep(0.1)
