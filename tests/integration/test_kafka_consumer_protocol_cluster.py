"""Kafka 4's consumer group across a coordinator move (docs/protocol.md §17.3, §17.9): three
``trikafka serve --zookeeper`` processes; a confluent-kafka consumer with ``group.protocol=consumer``
keeps its member id, epoch and partitions when the coordinator's broker is SIGKILLed, because the
new coordinator loads the group from its records in ``__consumer_offsets``."""

from __future__ import annotations

import functools
import time

import trio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange

TOPIC = "kip848-moved"
GROUP = "moved"
PARTITIONS = 4
WAIT_S = 60.0
FLAGS = ("--set", "offsets.topic.num.partitions=3", "--set", "group.consumer.heartbeat.interval.ms=300",
         "--set", "group.consumer.session.timeout.ms=30000")


def _coordinator(broker: str) -> int:
    """The group's coordinator as ``broker`` (one host:port) answers FindCoordinator; -1 for none yet."""
    found = exchange(broker, 10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(GROUP,)))
    (coordinator,) = found.coordinators
    return coordinator.node_id if coordinator.error_code == ErrorCode.none else -1


def _described(admin: AdminClient) -> tuple[str, int, list[str]]:
    """(state, the members' ids) of the group, by ConsumerGroupDescribe through librdkafka."""
    group = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
    return str(group.state), len(group.members), sorted(m.member_id for m in group.members)


def _poll_until(consumer: Consumer, done, wait_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        consumer.poll(0.1)
        if done():
            return True
    return False


async def test_the_group_survives_its_coordinator_s_sigkill(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 3, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, PARTITIONS,
                                                        replication_factor=3))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest"})
        revoked: list[object] = []
        consumer.subscribe([TOPIC], on_revoke=lambda _c, partitions: revoked.extend(partitions))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            owned = lambda: {p.partition for p in consumer.assignment()}  # noqa: E731
            assert await trio.to_thread.run_sync(_poll_until, consumer, lambda: owned() == set(range(PARTITIONS)))
            before = await trio.to_thread.run_sync(_described, admin)
            assert before[1] == 1
            coordinator = await trio.to_thread.run_sync(_coordinator, cluster.brokers[1].bootstrap)
            assert coordinator in cluster.brokers
            await cluster.brokers[coordinator].kill()
            others = cluster.bootstrap(without=(coordinator,))
            survivor = cluster.brokers[next(b for b in cluster.brokers if b != coordinator)].bootstrap

            def moved() -> bool:
                return _coordinator(survivor) not in (-1, coordinator)

            assert await trio.to_thread.run_sync(_poll_until, consumer, moved)
            # The member heartbeats to the new coordinator, which loaded it: same member, no revocation.
            admin_others = AdminClient({"bootstrap.servers": others})

            def described_again() -> bool:
                try:
                    return _described(admin_others)[2] == before[2]
                except Exception:  # the new coordinator is still loading, or the client still looking
                    return False

            assert await trio.to_thread.run_sync(_poll_until, consumer, described_again)
            assert await trio.to_thread.run_sync(_poll_until, consumer, lambda: False, 3.0) is False
            assert owned() == set(range(PARTITIONS)) and revoked == []
        finally:
            await trio.to_thread.run_sync(consumer.close)
