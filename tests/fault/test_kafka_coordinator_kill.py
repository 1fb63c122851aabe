"""Fault model "the group coordinator is SIGKILLed while a group of three consumes"
(docs/protocol.md §17.3, §12.6).

Three ``trikafka serve --zookeeper`` processes; ``__consumer_offsets`` has
replication factor 3 and ``min.insync.replicas`` 2.  A librdkafka group of
three consumes a six-partition topic and commits everything it read; then the
broker that coordinates the group is SIGKILLed.  Another replica of the
group's ``__consumer_offsets`` partition becomes its leader, loads it, and
serves the group: the members find it, go on consuming what is produced
after the kill, and commit.  The promise: no committed offset goes back, and
every record is delivered (at least once).
"""

from __future__ import annotations

import functools
import logging
import time

import trio
from confluent_kafka.admin import AdminClient
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_groups import ConfluentGroup, committed, produce
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange
from trikafka.kafka.group_records import OFFSETS_TOPIC

logger = logging.getLogger(__name__)

TOPIC = "coordinated"
GROUP = "survivors"
PARTITIONS = 6
BEFORE, AFTER = 40, 20
FLAGS = ("--set", "offsets.topic.num.partitions=3", "--set", "group.initial.rebalance.delay.ms=0")
WAIT_S = 120.0


def _coordinator(bootstrap: str) -> int:
    response = exchange(bootstrap.split(",")[0], 10, 4, FindCoordinatorRequest(key_type=i8(0),
                                                                               coordinator_keys=(GROUP,)))
    (found,) = response.coordinators
    assert found.error_code == 0, found
    return int(found.node_id)


async def test_a_sigkilled_coordinator_loses_no_commit_and_the_group_goes_on(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 3, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, PARTITIONS,
                                                        {"min.insync.replicas": "2"}, replication_factor=3))
        await trio.to_thread.run_sync(produce, bootstrap, TOPIC, PARTITIONS, BEFORE)
        group = ConfluentGroup(bootstrap, GROUP, TOPIC)
        first = {(p, o) for p in range(PARTITIONS) for o in range(BEFORE)}

        def consume_and_commit() -> bool:
            for name in ("a", "b", "c"):
                group.add(name)
            done = group.poll_until(lambda: group.balanced(PARTITIONS, 3) and group.delivered() >= first, WAIT_S)
            for name in ("a", "b", "c"):
                group.commit(name)
            return done

        try:
            assert await trio.to_thread.run_sync(consume_and_commit)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            offsets_topic = (await trio.to_thread.run_sync(functools.partial(
                admin.list_topics, OFFSETS_TOPIC, timeout=30))).topics[OFFSETS_TOPIC]
            assert [len(p.replicas) for p in offsets_topic.partitions.values()] == [3, 3, 3]
            before = await trio.to_thread.run_sync(committed, bootstrap, GROUP, TOPIC, PARTITIONS)
            assert before == {p: BEFORE for p in range(PARTITIONS)}
            victim = await trio.to_thread.run_sync(_coordinator, bootstrap)
            await cluster.brokers[victim].kill()
            killed_at = time.monotonic()
            survivors = cluster.bootstrap(without=(victim,))
            # A new coordinator answers OffsetFetch with every commit (librdkafka retries meanwhile).
            assert await trio.to_thread.run_sync(committed, survivors, GROUP, TOPIC, PARTITIONS) == before
            logger.info("the new coordinator served the commits %.2f s after the kill", time.monotonic() - killed_at)
            await trio.to_thread.run_sync(produce, survivors, TOPIC, PARTITIONS, AFTER, BEFORE)
            everything = {(p, o) for p in range(PARTITIONS) for o in range(BEFORE + AFTER)}

            def go_on() -> bool:
                def caught_up() -> bool:
                    if not (group.balanced(PARTITIONS, 3) and group.delivered() >= everything):
                        return False
                    for name in ("a", "b", "c"):
                        group.commit(name)
                    return True
                return group.poll_until(caught_up, WAIT_S)

            assert await trio.to_thread.run_sync(go_on)
            logger.info("the group consumed what was produced after the kill and committed it %.2f s after the "
                        "kill (the producer waits for the partitions' new leaders)", time.monotonic() - killed_at)
            assert await trio.to_thread.run_sync(_coordinator, survivors) != victim
            after = await trio.to_thread.run_sync(committed, survivors, GROUP, TOPIC, PARTITIONS)
            assert after == {p: BEFORE + AFTER for p in range(PARTITIONS)}
        finally:
            await trio.to_thread.run_sync(group.close_all)
