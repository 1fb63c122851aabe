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
