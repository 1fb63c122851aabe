"""Kafka's default partitioner in trikafka's Trio client: keys land where Java, librdkafka and kafka-python put them."""

from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from trikafka.client.kafka.partitioner import DefaultPartitioner, key_partition, murmur2


def test_murmur2_matches_kafka_python_on_every_tail_length() -> None:
    rng = random.Random(7)
    for length in list(range(0, 17)) + [100, 1000]:
        for _ in range(50):
            data = rng.randbytes(length)
            assert murmur2(data) == kafka_python_murmur2(data) & 0xFFFFFFFF, data


def test_key_partition_is_the_positive_hash_modulo_the_partitions() -> None:
    for key in (b"", b"a", b"user-17", "ключ".encode()):
        assert key_partition(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


def test_keyless_records_take_the_partitions_in_turn_per_topic() -> None:
    partitioner = DefaultPartitioner()
    assert [partitioner.partition("a", None, 3) for _ in range(4)] == [0, 1, 2, 0]
    assert partitioner.partition("b", None, 3) == 0
    assert partitioner.partition("a", b"k", 3) == key_partition(b"k", 3)
