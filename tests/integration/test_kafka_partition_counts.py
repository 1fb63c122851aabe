"""A Kafka-format topic's partition count is its own, whatever ``num.partitions`` says (docs/protocol.md §9.6,
§16.4, §16.5): real clients create, describe, grow and auto-create topics on a broker whose default differs."""

from __future__ import annotations

import os

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_batches import make_batch
from tests.helpers.kafka_wire import produce_records
from trikafka.testing import running_kafka_broker


def _partitions(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _dirs(log_dir: str, topic: str) -> list[str]:
    return sorted(d for d in os.listdir(log_dir) if d.rsplit("-", 1)[0] == topic)


def test_a_topic_created_with_fewer_partitions_than_the_default_has_its_own_count(tmp_path) -> None:
    log_dir = str(tmp_path / "logs")
    with running_kafka_broker(log_dir, num_partitions=3) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_topics([NewTopic("one", num_partitions=1, replication_factor=1)])["one"].result(timeout=30)
        assert _partitions(admin, "one") == [0]
        error, _ = produce_records(kafka.bootstrap, "one", 2, make_batch([b"nowhere"]))
        assert error == ErrorCode.unknown_topic_or_partition
        assert _dirs(log_dir, "one") == ["one-0"]
        # librdkafka's 0044_partition_cnt: fewer than num.partitions, then grown.
        admin.create_partitions([NewPartitions("one", 2)])["one"].result(timeout=30)
        assert _partitions(admin, "one") == [0, 1]
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        producer.produce("one", value=b"to the new partition", partition=1)
        assert producer.flush(10) == 0
    with running_kafka_broker(log_dir, num_partitions=3) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        assert _partitions(admin, "one") == [0, 1]  # the directories keep the count across a restart
        assert produce_records(kafka.bootstrap, "one", 2, make_batch([b"x"]))[0] == ErrorCode.unknown_topic_or_partition
        assert _dirs(log_dir, "one") == ["one-0", "one-1"]


def test_the_default_count_is_num_partitions_for_creation_with_minus_one_and_auto_creation() -> None:
    from kafka import KafkaProducer

    with running_kafka_broker(num_partitions=2) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        # KIP-464: -1 partitions and -1 replication factor take the broker's defaults.
        admin.create_topics([NewTopic("by-default", num_partitions=-1, replication_factor=-1)])["by-default"].result(
            timeout=30)
        assert _partitions(admin, "by-default") == [0, 1]
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)  # its Metadata allows auto-creation
        try:
            producer.send("auto", b"first").get(timeout=30)
        finally:
            producer.close()
        assert _partitions(admin, "auto") == [0, 1]
    with running_kafka_broker() as kafka:  # Kafka's default num.partitions: 1
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        producer.produce("auto-one", value=b"first")
        assert producer.flush(10) == 0
        assert _partitions(AdminClient({"bootstrap.servers": kafka.bootstrap}), "auto-one") == [0]


def test_auto_creation_off_creates_nothing(tmp_path) -> None:
    log_dir = str(tmp_path / "logs")
    with running_kafka_broker(log_dir, num_partitions=2, auto_create_topics_enable=False) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        metadata = admin.list_topics("never", timeout=10)
        assert metadata.topics["never"].error is not None and metadata.topics["never"].error.code() == 3
        assert _dirs(log_dir, "never") == []


def test_auto_creation_of_an_invalid_name_answers_topic_exception_and_the_producer_fails_at_once() -> None:
    """§16.5, librdkafka's 0057_invalid_topic: Kafka's auto-creation answers INVALID_TOPIC_EXCEPTION for a
    name no topic may have; librdkafka then fails its records instead of holding them for message.timeout.ms."""
    with running_kafka_broker() as kafka:
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        errors: list[str] = []
        producer.produce("bad$#!", value=b"nowhere", on_delivery=lambda err, _: errors.append(err.name()))
        producer.produce("good", value=b"somewhere", on_delivery=lambda err, _: errors.append(err and err.name()))
        assert producer.flush(10) == 0
        assert sorted(errors, key=str) == [None, "TOPIC_EXCEPTION"]


def test_the_07_side_keeps_num_partitions_per_topic_beside_a_smaller_kafka_topic() -> None:
    import trio

    from trikafka.client import connect
    from trikafka.wire import build_message_set
    from trikafka.wire.errors import ErrorCode as Error07

    with running_kafka_broker(num_partitions=3) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_topics([NewTopic("kafka-one", num_partitions=1, replication_factor=1)])["kafka-one"].result(
            timeout=30)

        async def with_07_client() -> None:
            async with await connect("127.0.0.1", kafka.port) as conn:
                produced = await conn.produce_acked([("plain", 2, build_message_set([b"on partition 2"]))])
                assert produced[0].error == Error07.NO_ERROR  # a 0.7 topic: num.partitions on this broker
                assert (await conn.fetch("kafka-one", 0, 0, 4096)).error == Error07.WRONG_FORMAT
                assert (await conn.fetch("kafka-one", 2, 0, 4096)).error == Error07.WRONG_PARTITION

        trio.run(with_07_client)


async def test_serve_with_num_partitions_on_zookeeper_gives_a_created_topic_its_own_count(zk_chroot, tmp_path) -> None:
    """The issue's own steps on processes: ``trikafka serve --num-partitions 3`` (ZooKeeper mode, one broker)."""
    import functools

    import trio

    from tests.helpers.kafka_processes import kafka_cluster

    def steps(bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("one", num_partitions=1, replication_factor=1)])["one"].result(timeout=30)
        assert _partitions(admin, "one") == [0]
        assert produce_records(bootstrap, "one", 2, make_batch([b"x"]))[0] == ErrorCode.unknown_topic_or_partition
        admin.create_topics([NewTopic("dflt", num_partitions=-1, replication_factor=-1)])["dflt"].result(timeout=30)
        assert _partitions(admin, "dflt") == [0, 1, 2]

    async with kafka_cluster(tmp_path, zk_chroot, 1, "--num-partitions", "3") as cluster:
        await trio.to_thread.run_sync(functools.partial(steps, cluster.bootstrap()))
        assert not [d for d in (tmp_path / "broker-1").iterdir() if d.name.startswith("one-") and d.name != "one-0"]
