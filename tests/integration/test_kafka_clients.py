"""Other people's Kafka clients produce to and consume from trikafka's Kafka listener (docs/protocol.md §16).

One broker (``trikafka.testing.running_kafka_broker``, the fixture users get)
serves the module; each test uses its own topics.
"""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from tests.helpers.kafka_clients import create_topic, dense, learn_leaders, read_with_confluent, read_with_kafka_python
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trips_keys_values_headers_and_timestamps(kafka: RunningKafkaBroker, codec: str) -> None:
    topic = f"kp-{codec}"
    create_topic(kafka.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=5, acks=1)
    sent = []
    for i in range(200):
        key = f"k{i % 7}".encode()
        value = f"value-{i}".encode() * (1 + i % 3)
        headers = [("n", str(i).encode())]
        producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=1_700_000_000_000 + i)
        sent.append((key, value, (("n", str(i).encode()),), 1_700_000_000_000 + i))
    producer.flush()
    producer.close()
    seen = read_with_kafka_python(kafka.bootstrap, topic, 2, len(sent))
    assert sorted((s.key, s.value, s.headers, s.timestamp_ms) for s in seen) == sorted(sent)
    assert dense(seen, 0) and dense(seen, 1)


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trips_with_acks_all(kafka: RunningKafkaBroker, codec: str) -> None:
    topic = f"ck-{codec}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
        future.result(timeout=30)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 5,
                                  "compression.type": codec})
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: object, message: object) -> None:
        assert err is None, err
        delivered.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    for i in range(300):
        producer.produce(topic, key=f"key-{i % 11}".encode(), value=f"v{i}".encode(),
                         headers=[("h", b"x")], on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(delivered) == 300
    for partition in range(3):  # the offsets acknowledged are the dense logical offsets
        assert sorted(o for p, o in delivered if p == partition) == list(range(sum(p == partition for p, _ in delivered)))
    seen = read_with_confluent(kafka.bootstrap, topic, 3, 300)
    assert sorted(s.value for s in seen) == sorted(f"v{i}".encode() for i in range(300))
    assert all(dense(seen, p) for p in range(3))
    assert {(s.partition, s.offset) for s in seen} == set(delivered)


def test_aiokafka_round_trip(kafka: RunningKafkaBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "aio"
    create_topic(kafka.bootstrap, topic, partitions=1)

    async def run() -> list[tuple[int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type="gzip", linger_ms=5)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, f"m{i}".encode(), key=b"k")
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[tuple[int, bytes]] = []
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            while len(got) < 100:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batches.values():
                    got += [(r.offset, r.value) for r in records]
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert got == [(i, f"m{i}".encode()) for i in range(100)]


def test_offsets_by_time_and_ends(kafka: RunningKafkaBroker) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = "times"
    create_topic(kafka.bootstrap, topic, partitions=1)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=f"t{i}".encode(), timestamp=1_000_000 + 1000 * i)
        producer.flush(10)  # one batch per record: each has its own time
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused"})
    try:
        learn_leaders(consumer, topic)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 10)
        found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_000_000 + 4500)], timeout=10)
        assert found[0].offset == 5
        after = consumer.offsets_for_times([TopicPartition(topic, 0, 1_000_000 + 99_000)], timeout=10)
        assert after[0].offset == -1  # none so late: Kafka answers the end (-1 offset in librdkafka terms)
    finally:
        consumer.close()


def test_metadata_names_the_kafka_listener_and_topics(kafka: RunningKafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    create_topic(kafka.bootstrap, "meta", partitions=4)
    metadata = admin.list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", kafka.kafka_port)]
    assert sorted(metadata.topics["meta"].partitions) == [0, 1, 2, 3]
    assert metadata.cluster_id and len(metadata.cluster_id) == 22


def test_create_describe_partitions_and_delete_through_the_admin_api(kafka: RunningKafkaBroker) -> None:
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    created = admin.create_topics([NewTopic("admin-t", num_partitions=2, replication_factor=1,
                                            config={"retention.ms": "3600000", "segment.bytes": "1048576"})])
    created["admin-t"].result(timeout=30)
    refused = admin.create_topics([NewTopic("admin-bad", num_partitions=1, replication_factor=1,
                                            config={"no.such.key": "1"})])
    with pytest.raises(Exception, match="no.such.key"):
        refused["admin-bad"].result(timeout=30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin-t")])
    entries = list(described.values())[0].result(timeout=30)
    assert entries["retention.ms"].value == "3600000" and not entries["retention.ms"].is_default
    assert entries["segment.bytes"].value == "1048576"
    assert entries["cleanup.policy"].is_default
    admin.create_partitions([NewPartitions("admin-t", 4)])["admin-t"].result(timeout=30)
    assert sorted(admin.list_topics(timeout=10).topics["admin-t"].partitions) == [0, 1, 2, 3]
    lower = admin.create_partitions([NewPartitions("admin-t", 3)])
    with pytest.raises(Exception, match="only grow"):
        lower["admin-t"].result(timeout=30)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap})
    producer.produce("admin-t", value=b"before the delete", partition=3)
    assert producer.flush(10) == 0
    admin.delete_topics(["admin-t"])["admin-t"].result(timeout=30)
    assert "admin-t" not in admin.list_topics(timeout=10).topics
    import os

    assert not [d for d in os.listdir(kafka.log_dir) if d.startswith("admin-t-")]


def test_the_kafka_apis_have_latency_histograms_in_the_metrics(kafka: RunningKafkaBroker) -> None:
    import re

    def created() -> float:
        exposition = kafka.broker.metrics.exposition().decode()
        found = re.search(r'trikafka_kafka_request_duration_seconds_count\{api="CreateTopics"\} (\S+)', exposition)
        assert found, "no CreateTopics histogram"
        return float(found.group(1))

    before = created()
    create_topic(kafka.bootstrap, "measured")
    # The latency is observed once the answer is written: the client may read it a moment before.
    deadline = time.monotonic() + 10
    while created() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert created() == before + 1


def test_pipelined_acks_all_produces_are_answered_in_request_order(kafka: RunningKafkaBroker) -> None:
    """§16.2: acks -1 answers wait for the acknowledgement while later requests are handled; order holds."""
    import datetime

    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import i16, i32

    from tests.helpers.kafka_wire import pipeline
    from trikafka.kafka.records import build_batch

    create_topic(kafka.bootstrap, "pipelined")

    def produce(value: bytes) -> tuple[int, int, ProduceRequest]:
        return 0, 9, ProduceRequest(acks=i16(-1), timeout=datetime.timedelta(seconds=10), topic_data=(
            TopicProduceData(name="pipelined", partition_data=(
                PartitionProduceData(index=i32(0), records=build_batch([value, value])),)),))

    versions = (18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    answers = pipeline(kafka.bootstrap, [produce(b"a"), versions, produce(b"b"), produce(b"c")])
    assert [correlation for correlation, _ in answers] == [1, 2, 3, 4]
    offsets = [body.responses[0].partition_responses[0].base_offset for _, body in (answers[0], *answers[2:])]
    assert offsets == [0, 2, 4]
