"""Transactional clients nobody here wrote, driven through their own transaction managers
(docs/protocol.md §19.5): shared steps of the transaction tests."""

from __future__ import annotations

import time
from typing import Any

CLIENT_TIMEOUT_S = 30.0


def confluent_transactional_producer(bootstrap: str, transactional_id: str) -> Any:
    """A confluent-kafka producer of ``transactional_id``, its transactions initialised (Any: librdkafka's
    Producer, untyped)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def confluent_group_metadata(bootstrap: str, group: str) -> tuple[Any, Any]:
    """A confluent-kafka consumer of ``group`` (close it) and its group metadata, for
    ``send_offsets_to_transaction`` (Any: librdkafka's untyped objects)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    return consumer, consumer.consumer_group_metadata()


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of ``topic``-0 as a read_committed librdkafka consumer asks for it
    (it waits while a transaction holds it), or -1 after ``CLIENT_TIMEOUT_S`` without one."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
            if found.offset >= 0 or time.monotonic() > deadline:
                return int(found.offset)
    finally:
        consumer.close()


def kafka_python_abort_then_commit(bootstrap: str, transactional_id: str, topic: str, group: str,
                                   source: str) -> None:
    """kafka-python's transactional producer: ``b"aborted"`` to ``topic`` in an aborted transaction,
    then ``b"committed"`` and ``group``'s offset 11 of ``source``-0 in a committed one."""
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"aborted")
        producer.flush(CLIENT_TIMEOUT_S)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"committed")
        producer.send_offsets_to_transaction({TopicPartition(source, 0): OffsetAndMetadata(11, "", -1)}, group)
        producer.commit_transaction()
    finally:
        producer.close(CLIENT_TIMEOUT_S)
