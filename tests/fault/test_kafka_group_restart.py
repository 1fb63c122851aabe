"""Fault model "the coordinator of a standalone broker is SIGKILLed" (docs/protocol.md §17.3).

A commit is answered only once its batch is committed (on a standalone broker:
flushed), and a restarted broker loads ``__consumer_offsets`` before it serves
the group: a consumer of the restarted broker reads every committed offset back.
"""

from __future__ import annotations

import functools

import trio
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_processes import kafka_serve

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
