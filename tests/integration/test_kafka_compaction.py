"""Compacted Kafka-format topics with real clients (docs/protocol.md §16.6.1).

confluent-kafka's AdminClient creates a topic with ``cleanup.policy=compact``
and small segments; confluent-kafka and kafka-python produce keyed values and
tombstones; the broker's cleaner (short backoff, low dirty ratio) compacts it.
The test waits for a condition on the partition's files (no batch holds a
deleted key any more), then reads from the beginning with each client and
with kcat.
"""

from __future__ import annotations

import datetime
import glob
import os
import subprocess
import time
from typing import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, TopicPartition
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i64

from tests.helpers.kafka_clients import Seen, read_with_confluent, read_with_kafka_python
from tests.helpers.kafka_compaction import (CLEANED_TIMEOUT_S, DELETED, LIVE, ROUNDS, create_compacted,
                                            produce_history, stored_records, wait_until_cleaned)
from tests.helpers.kafka_wire import exchange
from trikafka.kafka.batch import is_padding, walk_headers
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

KCAT = "/usr/bin/kcat"


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, log_cleaner_backoff_ms=20, min_cleanable_dirty_ratio=0.01) as running:
        yield running


def check_seen(seen: list[Seen], stored: list[tuple[int, bytes | None, bytes | None]],
               latest: dict[bytes, bytes]) -> None:
    assert [(s.offset, s.key, s.value) for s in seen] == stored  # every retained record, as stored, in order
    offsets = [s.offset for s in seen]
    assert offsets == sorted(set(offsets)) and offsets[-1] + 1 > len(offsets)  # increasing, with gaps
    state: dict[bytes | None, bytes | None] = {}
    for s in seen:
        state[s.key] = s.value
    assert state == latest  # the latest value per key, and no deleted key


def test_a_compacted_topic_keeps_the_latest_values_for_every_client(kafka: RunningKafkaBroker) -> None:
    topic = "compacted"
    create_compacted(kafka.bootstrap, topic)
    latest = produce_history(kafka.bootstrap, topic)
    stored = wait_until_cleaned(kafka.log_dir, topic)
    produced = len(LIVE) + 2 * len(DELETED) + ROUNDS * len(LIVE)
    assert len(stored) < produced
    check_seen(read_with_confluent(kafka.bootstrap, topic, 1, len(stored)), stored, latest)
    check_seen(read_with_kafka_python(kafka.bootstrap, topic, 1, len(stored)), stored, latest)
    # Small fetches (each answer still holds a whole batch), and a start inside a padding run.
    small = read_from(kafka.bootstrap, topic, 0, len(stored), max_partition_fetch_bytes=150, fetch_max_bytes=150)
    assert [(s.offset, s.key, s.value) for s in small] == stored
    gap = next(o for o in range(stored[-1][0]) if o not in {offset for offset, _, _ in stored})
    after = [r for r in stored if r[0] > gap]
    assert [(s.offset, s.key, s.value) for s in read_from(kafka.bootstrap, topic, gap, len(after))] == after
    # Byte level: Fetch answers hold the retained batches as stored, never a padding batch.
    fetched, offset, high_watermark = [], 0, stored[-1][0] + 1
    while offset < high_watermark:
        records = raw_fetch(kafka.bootstrap, topic, offset, 1 << 20)
        headers = list(walk_headers(records))
        assert headers and sum(h.size for h in headers) == len(records)
        fetched += [records[h.position:h.end] for h in headers]
        offset = headers[-1].next_offset
    assert fetched == retained_batches(kafka.log_dir, topic)
    one = list(walk_headers(raw_fetch(kafka.bootstrap, topic, 0, 1)))  # the budget: still one whole batch
    assert len(one) == 1 and not is_padding(one[0])


def retained_batches(log_dir: str, topic: str) -> list[bytes]:
    """The bytes of every stored batch that is not padding, in order."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-0", "*.kafka"))):
        with open(path, "rb") as f:
            data = f.read()
        out += [data[h.position:h.end] for h in walk_headers(data) if not is_padding(h)]
    return out


def raw_fetch(bootstrap: str, topic: str, offset: int, max_bytes: int) -> bytes:
    """The records of one Fetch v12 of partition 0 at ``offset`` (no wait)."""
    response = exchange(bootstrap, 1, 12, FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=i32(0), max_bytes=i32(max_bytes), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=i32(0), fetch_offset=i64(offset), log_start_offset=i64(-1),
            partition_max_bytes=i32(max_bytes)),)),)))
    partition = response.responses[0].partitions[0]
    assert partition.error_code == 0, partition
    return bytes(partition.records or b"")


def test_kcat_reads_a_compacted_topic(kafka: RunningKafkaBroker) -> None:
    topic = "compacted-kcat"
    create_compacted(kafka.bootstrap, topic)
    produce_history(kafka.bootstrap, topic)
    stored = wait_until_cleaned(kafka.log_dir, topic)
    consumed = subprocess.run([KCAT, "-b", kafka.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                               "-f", "%o %k:%s\n"], capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{o} {k.decode()}:{v.decode()}" for o, k, v in stored]


def read_from(bootstrap: str, topic: str, offset: int, count: int, **settings: int) -> list[Seen]:
    """``count`` records from ``offset`` of partition 0 with kafka-python (assign and seek)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **settings)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, offset)
        seen: list[Seen] = []
        deadline = time.monotonic() + CLEANED_TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                seen += [Seen(r.partition, r.offset, r.key, r.value, (), r.timestamp) for r in batch]
        return seen
    finally:
        consumer.close()


def test_a_compacted_topic_refuses_a_record_without_a_key(kafka: RunningKafkaBroker) -> None:
    topic = "compacted-keys"
    create_compacted(kafka.bootstrap, topic)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "retries": 0})
    errors: list[object] = []
    producer.produce(topic, value=b"no key", on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(30) == 0  # alone in its batch: a batch is refused whole
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(30) == 0
    assert errors[1] is None and errors[0] is not None and "INVALID_RECORD" in str(errors[0])


def test_a_batch_with_keyless_records_names_them_and_the_others_fail_as_different_records(
        kafka: RunningKafkaBroker) -> None:
    """§16.4, KIP-467: the answer's record_errors name the keyless records of a batch; librdkafka fails
    those with INVALID_RECORD and the rest of the batch with _INVALID_DIFFERENT_RECORD."""
    topic = "compacted-record-errors"
    create_compacted(kafka.bootstrap, topic)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "retries": 0,
                                  "linger.ms": 1000})
    errors: dict[int, str] = {}
    for n in range(10):  # one batch: linger.ms holds them together
        key = None if n % 5 == 0 else f"k{n}".encode()
        producer.produce(topic, key=key, value=str(n).encode(), partition=0,
                         on_delivery=lambda err, _, n=n: errors.__setitem__(n, err.name() if err else ""))
    assert producer.flush(30) == 0
    assert {n for n, name in errors.items() if name == "INVALID_RECORD"} == {0, 5}
    assert {n for n, name in errors.items() if name == "_INVALID_DIFFERENT_RECORD"} == set(range(10)) - {0, 5}
    with pytest.raises(KafkaException, match="cleanup.policy"):
        create_compacted(kafka.bootstrap, "bad-policy", **{"cleanup.policy": "shred"})
