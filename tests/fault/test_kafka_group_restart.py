"""Fault model "the coordinator of a standalone broker is SIGKILLed" (docs/protocol.md §17.3).

A commit is answered only once its batch is committed (on a standalone broker:
flushed), and a restarted broker loads ``__consumer_offsets`` before it serves
the group: a consumer of the restarted broker reads every committed offset back.
"""

from __future__ import annotations

import functools
from pathlib import Path

import trio
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_compaction import fully_cleaned, stored_records
from tests.helpers.kafka_processes import kafka_serve
from trikafka.broker.kafka.groups.placement import group_partition
from trikafka.kafka.batch import is_padding, walk_headers
from trikafka.kafka.group_records import OFFSETS_TOPIC

TOPIC = "positions"
PARTITIONS = 4
GROUPS = ("alpha", "beta", "gamma")


def _commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in offsets])
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, f"at {o}", -1) for p, o in offsets.items()})
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> dict[int, int | None]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()


async def test_committed_offsets_survive_a_sigkill_of_the_broker(tmp_path):
    log_dir = tmp_path / "broker"
    expected: dict[str, dict[int, int | None]] = {}
    async with kafka_serve(log_dir, "--set", "offsets.topic.num.partitions=7") as broker:
        await trio.to_thread.run_sync(functools.partial(create_topic, broker.bootstrap, TOPIC, PARTITIONS))
        for n, group in enumerate(GROUPS):
            for round_ in range(3):  # later commits of a partition replace earlier ones
                offsets = {p: 100 * n + 10 * round_ + p for p in range(PARTITIONS) if (p + n) % 4 != 3}
                await trio.to_thread.run_sync(_commit, broker.bootstrap, group, offsets)
            expected[group] = {p: offsets.get(p) for p in range(PARTITIONS)}
        await broker.kill()
    async with kafka_serve(log_dir, "--set", "offsets.topic.num.partitions=7") as broker:
        for group in GROUPS:
            assert await trio.to_thread.run_sync(_committed, broker.bootstrap, group) == expected[group]


CLEANING = ("--set", "offsets.topic.num.partitions=7", "--set", "offsets.topic.segment.bytes=2048",
            "--set", "log.cleaner.backoff.ms=20", "--set", "min.cleanable.dirty.ratio=0.01")


async def test_committed_offsets_survive_compaction_of_consumer_offsets_and_a_sigkill(tmp_path):
    """§17.1, §16.6.1: ``__consumer_offsets`` compacts; superseded commits become padding, the latest
    commit of every partition stays, and a broker SIGKILLed after the cleaning loads it back."""
    log_dir = tmp_path / "broker"
    expected: dict[str, dict[int, int | None]] = {}
    async with kafka_serve(log_dir, *CLEANING) as broker:
        await trio.to_thread.run_sync(functools.partial(create_topic, broker.bootstrap, TOPIC, PARTITIONS))
        for round_ in range(12):  # each commit is one batch; later ones supersede earlier ones whole
            for n, group in enumerate(GROUPS):
                offsets = {p: 1000 * n + 10 * round_ + p for p in range(PARTITIONS)}
                await trio.to_thread.run_sync(_commit, broker.bootstrap, group, offsets)
                expected[group] = {p: offsets[p] for p in range(PARTITIONS)}
        partitions = {group_partition(group, 7) for group in GROUPS}
        with trio.fail_after(60):
            while not all(fully_cleaned(str(log_dir), OFFSETS_TOPIC, p) for p in partitions):
                await trio.sleep(0.05)  # polling the cleaner's checkpoint
        kept = {p: stored_records(str(log_dir), OFFSETS_TOPIC, p) for p in partitions}
        padding = [offset for p in partitions for offset in _padding_batches(log_dir, p)]
        assert sum(len(records) for records in kept.values()) < 12 * len(GROUPS) * PARTITIONS  # padding now
        assert padding  # the cleaner replaced superseded commits
        await broker.kill()
    async with kafka_serve(log_dir, *CLEANING) as broker:
        for group in GROUPS:
            assert await trio.to_thread.run_sync(_committed, broker.bootstrap, group) == expected[group]


def _padding_batches(log_dir: Path, partition: int) -> list[int]:
    """Base offsets of the padding batches of one ``__consumer_offsets`` partition (the cleaner's work)."""
    found = []
    for path in sorted((log_dir / f"{OFFSETS_TOPIC}-{partition}").glob("*.kafka")):
        data = path.read_bytes()
        found += [h.base_offset for h in walk_headers(data) if is_padding(h)]
    return found
