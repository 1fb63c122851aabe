"""A compacted Kafka-format topic on three ZooKeeper brokers (docs/protocol.md §16.6.1, §12.9a).

Brokers 1 and 2 clean their replicas; broker 3 does not clean and is down
while the records are produced.  Once the leader has cleaned everything it
may, broker 3 comes back and copies the leader's bytes, padding batches
included: its partition is byte-identical to the leader's.  The two cleaning
replicas hold the same bytes wherever both retained a batch.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import trio
from confluent_kafka.admin import AdminClient

from tests.helpers.kafka_processes import KafkaCluster
from tests.helpers.kafka_compaction import (CLEANED_TIMEOUT_S, DELETED, create_compacted, fully_cleaned,
                                            produce_history, stored_records)
from trikafka.kafka.batch import is_padding, walk_headers

TOPIC = "compacted-replicated"
CLEANING = ("--set", "log.cleaner.backoff.ms=20", "--set", "min.cleanable.dirty.ratio=0.01")
NOT_CLEANING = ("--set", "log.cleaner.enable=false")


def partition_bytes(log_dir: Path) -> bytes:
    """Every segment of the topic's partition 0, in byte order (blocking)."""
    directory = log_dir / f"{TOPIC}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


def retained(data: bytes) -> dict[int, bytes]:
    """Byte position -> bytes of every batch that is not padding."""
    return {h.position: data[h.position:h.end] for h in walk_headers(data) if not is_padding(h)}


async def partition_state(bootstrap: str) -> tuple[int, list[int]]:
    """(leader, ISR) of partition 0 once it has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with trio.fail_after(CLEANED_TIMEOUT_S):
        while True:
            metadata = await trio.to_thread.run_sync(functools.partial(admin.list_topics, timeout=10))
            found = metadata.topics.get(TOPIC)
            partition = found.partitions.get(0) if found is not None else None
            if partition is not None and partition.leader >= 0:
                return int(partition.leader), sorted(partition.isrs)
            await trio.sleep(0.1)


async def test_a_returning_follower_copies_the_leaders_cleaned_bytes(zk_chroot, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        cluster = KafkaCluster(tmp_path, zk_chroot, stack)
        for broker_id, flags in ((1, CLEANING), (2, CLEANING), (3, NOT_CLEANING)):
            await cluster.start(broker_id, *flags)
        await trio.to_thread.run_sync(functools.partial(create_compacted, cluster.bootstrap(), TOPIC,
                                                        replication_factor=3))
        with trio.fail_after(CLEANED_TIMEOUT_S):
            while (await partition_state(cluster.bootstrap()))[1] != [1, 2, 3]:
                await trio.sleep(0.1)
        await cluster.brokers[3].kill()
        survivors = cluster.bootstrap(without=(3,))
        with trio.fail_after(CLEANED_TIMEOUT_S):  # the leader is 1 or 2 before anything is produced
            while (leader := (await partition_state(survivors))[0]) == 3:
                await trio.sleep(0.1)
        await trio.to_thread.run_sync(produce_history, survivors, TOPIC)
        leader_dir = tmp_path / f"broker-{leader}"
        with trio.fail_after(CLEANED_TIMEOUT_S):
            while not (fully_cleaned(str(leader_dir), TOPIC)
                       and not any(k in DELETED for _, k, _ in stored_records(str(leader_dir), TOPIC))):
                await trio.sleep(0.05)
        cleaned = await trio.to_thread.run_sync(partition_bytes, leader_dir)
        assert any(is_padding(h) for h in walk_headers(cleaned))

        await cluster.start(3, *NOT_CLEANING)
        with trio.fail_after(CLEANED_TIMEOUT_S):
            while await trio.to_thread.run_sync(partition_bytes, tmp_path / "broker-3") != cleaned:
                await trio.sleep(0.1)  # polling a condition: the deadline fails the test
        assert os.path.exists(tmp_path / "broker-3" / f"{TOPIC}-0" / ".trikafka-format")

        other = 3 - leader  # the other cleaning replica: the same bytes wherever both kept a batch
        theirs = retained(await trio.to_thread.run_sync(partition_bytes, tmp_path / f"broker-{other}"))
        ours = retained(cleaned)
        common = theirs.keys() & ours.keys()
        assert common and all(theirs[p] == ours[p] for p in common)
