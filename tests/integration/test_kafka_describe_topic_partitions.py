"""DescribeTopicPartitions (KIP-966, docs/protocol.md §16.4) through kafka-python: Metadata's partitions,
a page at a time."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient

from tests.helpers.kafka_clients import create_topic
from trikafka.kafka.topic_ids import topic_id
from trikafka.testing import running_kafka_broker


def _rows(answer):
    return [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]]


def test_kafka_python_pages_through_the_partitions_with_the_cursor():
    with running_kafka_broker(num_partitions=1) as kafka:
        create_topic(kafka.bootstrap, "b-three", partitions=3)
        create_topic(kafka.bootstrap, "a-two", partitions=2)
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        try:
            whole = admin.describe_topic_partitions(["b-three", "a-two", "missing"])
            assert _rows(whole) == [("a-two", 0, [0, 1]), ("b-three", 0, [0, 1, 2]), ("missing", 3, [])]
            assert whole["next_cursor"] is None
            # The topic's id, as Metadata answers it (§17.9); none for a topic that is not there.
            assert [t["topic_id"] for t in whole["topics"]] == [topic_id("a-two"), topic_id("b-three"), None]
            partition = whole["topics"][0]["partitions"][0]
            assert (partition["leader_id"], partition["replica_nodes"], partition["isr_nodes"],
                    partition["offline_replicas"]) == (0, [0], [0], [])
            assert not partition["eligible_leader_replicas"]  # empty on the wire; kafka-python reads None

            first = admin.describe_topic_partitions(["a-two", "b-three"], response_partition_limit=3)
            assert _rows(first) == [("a-two", 0, [0, 1]), ("b-three", 0, [0])]
            assert first["next_cursor"] == {"topic_name": "b-three", "partition_index": 1}
            rest = admin.describe_topic_partitions(["a-two", "b-three"], cursor=first["next_cursor"])
            assert _rows(rest) == [("b-three", 0, [1, 2])] and rest["next_cursor"] is None

            at_the_seam = admin.describe_topic_partitions(["a-two", "b-three"], response_partition_limit=2)
            assert _rows(at_the_seam) == [("a-two", 0, [0, 1])]
            assert at_the_seam["next_cursor"] == {"topic_name": "b-three", "partition_index": 0}
        finally:
            admin.close()
