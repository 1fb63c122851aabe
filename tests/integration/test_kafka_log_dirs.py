"""DescribeLogDirs and AlterReplicaLogDirs (docs/protocol.md §16.4) through kafka-python, which has both calls
(confluent-kafka 2.16 has neither)."""

from __future__ import annotations

import os

from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, UnknownTopicOrPartitionError

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_wire import produce_records
from tests.helpers.kafka_batches import make_batch
from trikafka.testing import running_kafka_broker


def test_describe_log_dirs_answers_each_partitions_bytes_and_alter_moves_nothing(tmp_path):
    with running_kafka_broker(str(tmp_path), num_partitions=1) as kafka:
        create_topic(kafka.bootstrap, "sized", partitions=2)
        create_topic(kafka.bootstrap, "other")
        batch = make_batch([b"x" * 100, b"y" * 50])
        produce_records(kafka.bootstrap, "sized", 1, batch)
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        try:
            (broker,) = admin.describe_log_dirs({"sized": [0, 1, 7]})
            (log_dir,) = broker["log_dirs"]
            assert (log_dir["error_code"], log_dir["log_dir"]) == (0, os.path.abspath(str(tmp_path)))
            # v4 (KIP-827): the file system's sizes; the usable bytes move with other writers
            volume = os.statvfs(str(tmp_path))
            assert log_dir["total_bytes"] == volume.f_blocks * volume.f_frsize
            assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
            assert log_dir["topics"] == [{"name": "sized", "partitions": [
                {"partition_index": 0, "partition_size": 0, "offset_lag": 0, "is_future_key": False},
                {"partition_index": 1, "partition_size": len(batch), "offset_lag": 0, "is_future_key": False}]}]
            (everything,) = admin.describe_log_dirs()
            assert {t["name"] for t in everything["log_dirs"][0]["topics"]} >= {"sized", "other"}

            answers = admin.alter_replica_log_dirs({
                TopicPartitionReplica("sized", 0, 0): str(tmp_path),
                TopicPartitionReplica("sized", 9, 0): str(tmp_path),
                TopicPartitionReplica("other", 0, 0): str(tmp_path / "elsewhere")})
            assert answers == {TopicPartitionReplica("sized", 0, 0): NoError,
                               TopicPartitionReplica("sized", 9, 0): UnknownTopicOrPartitionError,
                               TopicPartitionReplica("other", 0, 0): LogDirNotFoundError}
        finally:
            admin.close()
