"""Fetch honours ``max_bytes`` and ``partition_max_bytes`` as KIP-74 says (docs/protocol.md §16.4): the raw
answer's size bound, and librdkafka's 0082_fetch_max_bytes (a consumer whose fetch.max.bytes is far below
what its partitions hold reads everything) over the sendfile path and over TLS."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i64

from tests.helpers.kafka_batches import make_batch
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, assign_with_leaders
from tests.helpers.kafka_wire import exchange, produce_records
from trikafka.kafka.records import decode_batches
from trikafka.testing import running_kafka_broker, running_tls_kafka_broker

BATCH_VALUE_BYTES = 100_000
BATCHES = 4  # per partition


def _create(bootstrap: str, topic: str, partitions: int, settings: dict[str, Any]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(
        timeout=CLIENT_TIMEOUT_S)


def _fetch(bootstrap: str, topic: str, partitions: int, max_bytes: int, partition_max_bytes: int) -> list[int]:
    """Fetch v12 of every partition from offset 0: the number of whole batches each answer holds."""
    answer = exchange(bootstrap, 1, 12, FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=i32(0), max_bytes=i32(max_bytes), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic=topic, partitions=tuple(FetchPartition(
            partition=i32(p), fetch_offset=i64(0), log_start_offset=i64(-1),
            partition_max_bytes=i32(partition_max_bytes)) for p in range(partitions))),)))
    found = {int(p.partition_index): bytes(p.records or b"") for p in answer.responses[0].partitions}
    return [len(list(decode_batches(found[p]))) for p in range(partitions)]


def test_the_answer_is_bounded_by_max_bytes_except_the_first_batch() -> None:
    with running_kafka_broker() as kafka:
        _create(kafka.bootstrap, "sized", 3, {})
        for p in range(3):
            for n in range(BATCHES):
                assert produce_records(kafka.bootstrap, "sized", p, make_batch([bytes([n]) * BATCH_VALUE_BYTES]))[
                    0] == 0
        big = 10 * BATCH_VALUE_BYTES * BATCHES
        assert _fetch(kafka.bootstrap, "sized", 3, big, big) == [BATCHES] * 3
        # The request's bound: 2.5 batches' worth, all from the first partition.
        assert _fetch(kafka.bootstrap, "sized", 3, 5 * BATCH_VALUE_BYTES // 2, big) == [2, 0, 0]
        # 1.5 batches: one from the first partition, none fits what is left for the others.
        assert _fetch(kafka.bootstrap, "sized", 3, 3 * BATCH_VALUE_BYTES // 2, big) == [1, 0, 0]
        # Smaller than one batch: the first partition's first batch still goes, whole.
        assert _fetch(kafka.bootstrap, "sized", 3, 1000, big) == [1, 0, 0]
        # The partitions' bound: 1.5 batches each, the whole answer below max_bytes.
        assert _fetch(kafka.bootstrap, "sized", 3, big, 3 * BATCH_VALUE_BYTES // 2) == [1, 1, 1]
        # Smaller than one batch per partition: only the first non-empty partition gets one.
        assert _fetch(kafka.bootstrap, "sized", 3, big, 1000) == [1, 0, 0]


@pytest.mark.parametrize("tls", [False, True], ids=["sendfile", "tls"])
def test_librdkafka_with_a_small_fetch_max_bytes_reads_several_megabytes(tls: bool) -> None:
    """librdkafka's 0082_fetch_max_bytes: an answer above receive.message.max.bytes drops the connection."""
    partitions, per_partition, value_bytes = 3, 8, 300_000
    with (running_tls_kafka_broker() if tls else _plain()) as started:
        kafka, settings = (started[0], {"security.protocol": "SSL", "ssl.ca.location": started[1].ca_path}) \
            if tls else (started, {})
        _create(kafka.bootstrap, "big", partitions, settings)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 50, **settings})
        for p in range(partitions):
            for n in range(per_partition):
                producer.produce("big", value=bytes([n]) * value_bytes, partition=p)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused-assign-only",
                             "enable.auto.commit": False, "fetch.max.bytes": 1_000_000,
                             "max.partition.fetch.bytes": 20_000_000, "receive.message.max.bytes": 1_000_512,
                             **settings})
        try:
            assign_with_leaders(consumer, [TopicPartition("big", p, 0) for p in range(partitions)])
            seen = 0
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while seen < partitions * per_partition and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    seen += 1
            assert seen == partitions * per_partition
        finally:
            consumer.close()


def _plain() -> Any:
    return running_kafka_broker()
