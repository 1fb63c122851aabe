"""Transactional clients nobody here wrote, driven through their own transaction managers
(docs/protocol.md §19.5), and where a cluster placed coordinators and leaders (§19.5.1, §17.1):
shared steps of the transaction tests."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S
from tests.helpers.kafka_wire import find_coordinator, retry_while_retriable

GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types
CANDIDATES = 40  # names tried until the placement wanted turns up (3 brokers: a few suffice)


def confluent_transactional_producer(bootstrap: str, transactional_id: str, **settings: Any) -> Any:
    """A confluent-kafka producer of ``transactional_id`` (and librdkafka ``settings``: a secured listener's),
    its transactions initialised (Any: librdkafka's Producer, untyped)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000, **settings})
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


def coordinator_node(bootstrap: str, key: str, key_type: int) -> tuple[int, str]:
    """The node id and Kafka address of ``key``'s coordinator (FindCoordinator, retried while it is made)."""
    first = bootstrap.split(",")[0]
    error, node, port = retry_while_retriable(lambda: find_coordinator(first, key, key_type=key_type))
    assert error == ErrorCode.none, (key, error)
    return node, f"127.0.0.1:{port}"


def partition_leaders(bootstrap: str, topic: str, **settings: Any) -> dict[int, int]:
    """Each partition's leader, once every partition has one (librdkafka ``settings``: a secured listener's)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        described = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
        leaders = {p: int(meta.leader) for p, meta in described.partitions.items()}
        if leaders and min(leaders.values()) >= 0 or time.monotonic() > deadline:
            return leaders


def key_coordinated_outside(bootstrap: str, prefix: str, key_type: int, avoid: set[int]) -> tuple[str, int, str]:
    """A key ``prefix-N`` whose coordinator is not in ``avoid``: (key, node id, address)."""
    for n in range(CANDIDATES):
        key = f"{prefix}-{n}"
        node, address = coordinator_node(bootstrap, key, key_type)
        if node not in avoid:
            return key, node, address
    raise AssertionError(f"no {prefix}-N of {CANDIDATES} is coordinated outside {avoid}")
