"""Kafka 4's consumer group protocol (KIP-848, docs/protocol.md §17.9) with confluent-kafka's consumer
(``group.protocol=consumer``): it joins and reads, shares the partitions with a second member, takes
over a killed member's partitions at its session timeout, and its commits survive a broker restart
(the group's records read back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_groups import produce
from trikafka.testing import running_kafka_broker

PARTITIONS = 4
PER_PARTITION = 10
WAIT_S = 60.0
SESSION_MS = 3000
SETTINGS = dict(num_partitions=1, offsets_topic_num_partitions=4, group_consumer_session_timeout_ms=SESSION_MS,
                group_consumer_heartbeat_interval_ms=300)
ROOT = Path(__file__).resolve().parents[2]

# A member in a child process: it prints its partitions whenever they change, polling until killed.
CHILD = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer"})
consumer.subscribe([sys.argv[3]])
last = None
while True:
    consumer.poll(0.1)
    now = sorted(p.partition for p in consumer.assignment())
    if now != last:
        print(" ".join(map(str, now)), flush=True)
        last = now
"""


def member(bootstrap: str, group: str, **settings: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **settings})


def poll_until(consumers: list[Consumer], done: Callable[[], bool], seen: list[tuple[int, int]] | None = None) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None and seen is not None:
                seen.append((message.partition(), message.offset()))
        if done():
            return True
    return False


def owned(consumer: Consumer) -> set[int]:
    return {p.partition for p in consumer.assignment()}


@pytest.fixture
def kafka():
    with running_kafka_broker(**SETTINGS) as running:
        yield running


def test_a_consumer_joins_reads_and_shares_with_a_second(kafka):
    create_topic(kafka.bootstrap, "kip848", partitions=PARTITIONS)
    produce(kafka.bootstrap, "kip848", PARTITIONS, PER_PARTITION)
    a = member(kafka.bootstrap, "g1")
    a.subscribe(["kip848"])
    seen: list[tuple[int, int]] = []
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert poll_until([a], lambda: set(seen) >= everything, seen)
    assert owned(a) == set(range(PARTITIONS))
    b = member(kafka.bootstrap, "g1")
    b.subscribe(["kip848"])
    try:
        assert poll_until([a, b], lambda: len(owned(a)) == len(owned(b)) == PARTITIONS // 2
                          and owned(a) | owned(b) == set(range(PARTITIONS)))
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        described = admin.describe_consumer_groups(["g1"])["g1"].result(30)
        assert len(described.members) == 2
        assert str(described.type).endswith("CONSUMER")
    finally:
        b.close()
        a.close()


def test_a_killed_member_s_partitions_go_to_the_other_after_its_session(kafka):
    create_topic(kafka.bootstrap, "kip848k", partitions=PARTITIONS)
    a = member(kafka.bootstrap, "g2")
    a.subscribe(["kip848k"])
    assert poll_until([a], lambda: owned(a) == set(range(PARTITIONS)))
    child = subprocess.Popen([sys.executable, "-c", CHILD, kafka.bootstrap, "g2", "kip848k"], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert poll_until([a], lambda: len(owned(a)) == PARTITIONS // 2)
        line = ""
        assert child.stdout is not None
        while len(line.split()) != PARTITIONS // 2:  # the child's share, once it has it
            line = child.stdout.readline()
            assert line, "the child member exited"
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        assert poll_until([a], lambda: owned(a) == set(range(PARTITIONS)))
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.8  # not before its session ended
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        a.close()


def test_commits_and_the_group_survive_a_restart():
    log_dir = tempfile.mkdtemp(prefix="trikafka-kip848-")
    with running_kafka_broker(log_dir, **SETTINGS) as kafka:
        create_topic(kafka.bootstrap, "kip848c", partitions=PARTITIONS)
        produce(kafka.bootstrap, "kip848c", PARTITIONS, PER_PARTITION)
        a = member(kafka.bootstrap, "g3")
        a.subscribe(["kip848c"])
        seen: list[tuple[int, int]] = []
        assert poll_until([a], lambda: len(seen) == PARTITIONS * PER_PARTITION, seen)
        a.commit(asynchronous=False)
        committed = a.committed([TopicPartition("kip848c", p) for p in range(PARTITIONS)], timeout=30)
        assert [p.offset for p in committed] == [PER_PARTITION] * PARTITIONS
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept: a collected client never answers
        assert len(admin.describe_consumer_groups(["g3"])["g3"].result(30).members) == 1
        a.close()
    with running_kafka_broker(log_dir, **SETTINGS) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        reloaded = admin.describe_consumer_groups(["g3"])["g3"].result(30)  # from the records read back
        assert str(reloaded.type).endswith("CONSUMER") and str(reloaded.state).endswith("EMPTY")
        b = member(kafka.bootstrap, "g3")
        try:
            committed = b.committed([TopicPartition("kip848c", p) for p in range(PARTITIONS)], timeout=30)
            assert [p.offset for p in committed] == [PER_PARTITION] * PARTITIONS
            b.subscribe(["kip848c"])
            assert poll_until([b], lambda: owned(b) == set(range(PARTITIONS)))
            assert b.position([TopicPartition("kip848c", p) for p in range(PARTITIONS)]) is not None
        finally:
            b.close()


def test_a_static_member_comes_back_to_its_partitions(kafka):
    create_topic(kafka.bootstrap, "kip848s", partitions=PARTITIONS)
    a = member(kafka.bootstrap, "g4", **{"group.instance.id": "ia"})
    b = member(kafka.bootstrap, "g4", **{"group.instance.id": "ib"})
    revoked_b: list[int] = []
    a.subscribe(["kip848s"])
    b.subscribe(["kip848s"], on_revoke=lambda _c, partitions: revoked_b.extend(p.partition for p in partitions))
    try:
        assert poll_until([a, b], lambda: len(owned(a)) == len(owned(b)) == PARTITIONS // 2)
        mine = owned(a)
        revoked_b.clear()  # what the first balancing took from b
        a.close()  # a static member's leave (epoch -2): it keeps its partitions until its session ends
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        described = admin.describe_consumer_groups(["g4"])["g4"].result(30)
        assert sorted(m.group_instance_id for m in described.members) == ["ia", "ib"]
        again = member(kafka.bootstrap, "g4", **{"group.instance.id": "ia"})
        again.subscribe(["kip848s"])
        try:
            assert poll_until([again, b], lambda: owned(again) == mine)
            assert owned(b) == set(range(PARTITIONS)) - mine and revoked_b == []
        finally:
            again.close()
    finally:
        b.close()


def test_a_regex_subscription_is_resolved_by_the_coordinator(kafka):
    for name, partitions in (("rx-a", 2), ("rx-b", 1), ("other", 1)):
        create_topic(kafka.bootstrap, name, partitions=partitions)
    consumer = member(kafka.bootstrap, "g5")
    consumer.subscribe(["^rx-.*"])  # sent as subscribed_topic_regex (§17.9)
    try:
        assert poll_until([consumer], lambda: {(p.topic, p.partition) for p in consumer.assignment()}
                          == {("rx-a", 0), ("rx-a", 1), ("rx-b", 0)})
    finally:
        consumer.close()
