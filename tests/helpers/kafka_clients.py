"""Real Kafka clients against trikafka's Kafka listener (docs/protocol.md §16): shared test steps.

The clients are other people's code (kafka-python, confluent-kafka, aiokafka,
kcat); these helpers only drive them, so each test states what it checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Seen:
    """One record as a client delivered it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """CreateTopics through kafka-python's admin client."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def read_with_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> list[Seen]:
    """``count`` records from the start of every partition, without a group (assign, earliest)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen: list[Seen] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    seen.append(Seen(r.partition, r.offset, r.key, r.value,
                                     tuple((k, bytes(v)) for k, v in r.headers), r.timestamp))
        return seen
    finally:
        consumer.close()


def read_with_confluent(bootstrap: str, topic: str, partitions: int, count: int, **settings: Any) -> list[Seen]:
    """``count`` records from the start of every partition with librdkafka (assign, no commits)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, **settings})
    try:
        consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: list[Seen] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise AssertionError(f"librdkafka consumer error: {message.error()}")
            seen.append(Seen(message.partition(), message.offset(), message.key(), message.value(),
                             tuple((k, bytes(v)) for k, v in (message.headers() or ())),
                             message.timestamp()[1]))
        return seen
    finally:
        consumer.close()


def dense(seen: list[Seen], partition: int) -> bool:
    """The partition's offsets run 0, 1, 2, ... with no gap (§16.6)."""
    offsets = sorted(s.offset for s in seen if s.partition == partition)
    return offsets == list(range(len(offsets)))
