"""Compacted Kafka-format topics driven by real clients (docs/protocol.md §16.6.1): shared test steps.

A topic is created compacted with small segments and an immediate tombstone
horizon; a history of keyed values and tombstones is produced; the
partition's files tell when the cleaner is done (its checkpoint reached the
active segment) and what they retain.
"""

from __future__ import annotations

import glob
import os
import time

from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from trikafka.kafka.batch import is_padding, walk_headers
from trikafka.kafka.records import decode_batches

CLEANED_TIMEOUT_S = 60.0
LIVE = [b"k%d" % k for k in range(8)]
DELETED = [b"k8", b"k9"]
ROUNDS = 12


def create_compacted(bootstrap: str, topic: str, replication_factor: int = 1, **configs: str) -> None:
    """CreateTopics through confluent-kafka's AdminClient: one partition, ``cleanup.policy=compact``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0",
                "min.compaction.lag.ms": "0", **configs}
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=replication_factor,
                                                config=settings)]).values():
        future.result(timeout=30)


def stored_records(log_dir: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of every record in the partition's retained batches, read from its files."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.kafka"))):
        with open(path, "rb") as f:
            data = f.read()
        for header in walk_headers(data):
            if not is_padding(header):
                batch = data[header.position:header.end]
                out += [(r.offset, r.key, r.value) for r in next(decode_batches(batch))[1]]
    return out


def fully_cleaned(log_dir: str, topic: str, partition: int = 0) -> bool:
    """Whether the cleaner's checkpoint (§11.4.1) reached the active segment: nothing is left to clean,
    so the partition's files no longer change while nothing is produced."""
    directory = os.path.join(log_dir, f"{topic}-{partition}")
    segments = sorted(glob.glob(os.path.join(directory, "*.kafka")))
    try:
        with open(os.path.join(directory, "cleaner-checkpoint")) as f:
            checkpoint = f.read().strip()
    except FileNotFoundError:
        return False
    return checkpoint.isdigit() and int(checkpoint) == int(os.path.basename(segments[-1]).split(".")[0])


def produce_history(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """The deleted keys' values and tombstones, then every live key once (confluent-kafka), then
    ``ROUNDS`` rounds of new values of the live keys (kafka-python); the latest value of each live key.

    Each record is its own batch (a batch is kept whole while any record in it is live, §16.6.1),
    and live batches follow the deleted keys' in the first segment, so no deleted key's value is
    the last batch of a segment (always kept, which would keep its tombstone too).
    """
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for key, value in [(k, b"first-" + k) for k in DELETED] + [(k, None) for k in DELETED] + [
            (k, b"first-" + k) for k in LIVE]:
        producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0
    latest = {}
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    for r in range(ROUNDS):
        for key in LIVE:
            value = b"round-%d-" % r + key + b"-" + b"x" * 40
            kp.send(topic, key=key, value=value).get(timeout=30)
            latest[key] = value
    kp.close()
    return latest


def wait_until_cleaned(log_dir: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """The stored records once the cleaner has cleaned everything it may and no deleted key is left."""
    deadline = time.monotonic() + CLEANED_TIMEOUT_S
    while True:
        if fully_cleaned(log_dir, topic):
            records = stored_records(log_dir, topic)
            if not any(key in DELETED for _, key, _ in records):
                return records
        assert time.monotonic() < deadline, f"the cleaner never removed {DELETED}"
        time.sleep(0.05)  # polling a condition: the assertion above is about the condition, not the sleep
