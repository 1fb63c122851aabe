"""ListOffsets by timestamp answers the first record at or after the target, not its batch's base offset
(docs/protocol.md §16.4): CreateTime stamps out of order within and across batches, asked by real clients."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as PythonPartition

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_wire import fetch_once
from trikafka.kafka.records import decode_batches
from trikafka.testing import running_kafka_broker

# Two batches of three records: offsets 0-2, then 3-5.
STAMPS_MS = [[1000, 5000, 2000], [3000, 7000, 4000]]


def test_the_first_record_at_or_after_the_target_in_the_first_batch_that_reaches_it() -> None:
    with running_kafka_broker() as kafka:
        create_topic(kafka.bootstrap, "times")
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5000, "compression.type": "lz4"})
        for stamps in STAMPS_MS:
            for stamp in stamps:
                producer.produce("times", value=str(stamp).encode(), partition=0, timestamp=stamp)
            assert producer.flush(10) == 0  # one batch per flush
        _error, _hw, records = fetch_once(kafka.bootstrap, "times", 0, 0)
        assert [[r.timestamp_ms for r in rs] for _h, rs in decode_batches(records)] == STAMPS_MS
        expected = {1500: 1, 4000: 1, 5000: 1, 5500: 4, 7000: 4, 500: 0, 7001: -1}
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused"})
        try:
            for target, offset in expected.items():
                found = consumer.offsets_for_times([TopicPartition("times", 0, target)], timeout=10)
                assert (target, found[0].offset) == (target, offset)
        finally:
            consumer.close()
        python = KafkaConsumer(bootstrap_servers=kafka.bootstrap)
        try:
            found = python.offsets_for_times({PythonPartition("times", 0): 1500})[PythonPartition("times", 0)]
            assert (found.offset, found.timestamp) == (1, 5000)  # the record's own stamp, not the batch's
            found = python.offsets_for_times({PythonPartition("times", 0): 5500})[PythonPartition("times", 0)]
            assert (found.offset, found.timestamp) == (4, 7000)
        finally:
            python.close()
