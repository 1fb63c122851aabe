"""ZooKeeper discovery (spec §8.2, §8.5) on FakeZooKeeperClient, and routing through it."""

from __future__ import annotations

import random

import pytest
import trio

from trikafka.producer import BrokerPartition, Producer, ZooKeeperDiscovery
from trikafka.producer.discovery import StaticDiscovery
from trikafka.producer.partitioner import hash_index, java_hash
from trikafka.testing import FakeZooKeeperClient, FakeZooKeeper, open_cluster
from trikafka.zk import CreateOp, DeleteOp

BP = BrokerPartition


async def register_broker(zk, broker_id: int, host: str, port: int) -> None:
    # §8.2: ephemeral, "<creatorId>:<host>:<port>" with creatorId = "<host>-<millis>"
    await zk.create(f"/brokers/ids/{broker_id}", f"{host}-1349990000123:{host}:{port}".encode(),
                    ephemeral=True, makepath=True)


async def register_topic(zk, topic: str, broker_id: int, partitions: int) -> None:
    # §8.2: ephemeral, the partition count in decimal
    await zk.create(f"/brokers/topics/{topic}/{broker_id}", str(partitions).encode(),
                    ephemeral=True, makepath=True)


async def until(predicate, timeout_s: float = 5.0) -> None:
    """Wait (virtual time) until ``predicate()`` holds; a bounded wait, never a sync tool."""
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


@pytest.fixture
async def zk():
    async with FakeZooKeeperClient(FakeZooKeeper()) as coordinator:
        yield coordinator


@pytest.fixture
async def discovery(zk, nursery):
    found = ZooKeeperDiscovery(zk)
    await nursery.start(found.run)
    return found


async def test_an_unregistered_topic_is_partition_0_of_every_live_broker(zk, nursery, autojump_clock):
    await register_broker(zk, 10, "h10", 9092)
    await register_broker(zk, 2, "h2", 9093)
    found = ZooKeeperDiscovery(zk)
    await nursery.start(found.run)
    assert found.view.brokers == {10: ("h10", 9092), 2: ("h2", 9093)}
    await found.ensure_topic("fresh")
    assert found.partitions("fresh") == [BP(2, 0), BP(10, 0)]  # numeric order, not "10" < "2"


async def test_registered_counts_give_every_partition_in_numeric_order(zk, discovery, autojump_clock):
    for broker_id in (2, 10, 3):
        await register_broker(zk, broker_id, f"h{broker_id}", 9092)
    await register_topic(zk, "t", 10, 2)
    await register_topic(zk, "t", 2, 3)
    await until(lambda: len(discovery.view.brokers) == 3)
    await discovery.ensure_topic("t")
    assert discovery.partitions("t") == [BP(2, 0), BP(2, 1), BP(2, 2), BP(10, 0), BP(10, 1)]


async def test_brokers_joining_and_leaving_are_followed(zk, discovery, autojump_clock):
    await register_broker(zk, 1, "h1", 9092)
    await register_topic(zk, "t", 1, 2)
    await discovery.ensure_topic("t")
    await until(lambda: discovery.partitions("t") == [BP(1, 0), BP(1, 1)])
    # a new broker that has not seen the topic yet gets nothing of it (0.7 behaviour)
    await register_broker(zk, 4, "h4", 9092)
    await until(lambda: 4 in discovery.view.brokers)
    assert discovery.partitions("t") == [BP(1, 0), BP(1, 1)]
    await register_topic(zk, "t", 4, 1)
    await until(lambda: discovery.partitions("t") == [BP(1, 0), BP(1, 1), BP(4, 0)])
    # broker 1 leaves: its id and topic nodes vanish
    await zk.delete("/brokers/topics/t/1")
    await zk.delete("/brokers/ids/1")
    await until(lambda: discovery.partitions("t") == [BP(4, 0)])
    assert discovery.view.brokers == {4: ("h4", 9092)}


async def test_a_topic_registration_of_a_dead_broker_is_not_a_target(zk, discovery, autojump_clock):
    await register_broker(zk, 1, "h1", 9092)
    await register_topic(zk, "t", 1, 1)
    await register_topic(zk, "t", 7, 5)  # broker 7 has no /brokers/ids node
    await until(lambda: 1 in discovery.view.brokers)
    await discovery.ensure_topic("t")
    assert discovery.partitions("t") == [BP(1, 0)]


async def test_a_session_expiry_of_the_broker_removes_it(discovery, autojump_clock):
    server = discovery._zk.server
    async with FakeZooKeeperClient(server) as broker_session:
        await register_broker(broker_session, 5, "h5", 9092)
        await register_topic(broker_session, "t", 5, 2)
        await until(lambda: 5 in discovery.view.brokers)
        await discovery.ensure_topic("t")
        await until(lambda: discovery.partitions("t") == [BP(5, 0), BP(5, 1)])
    await until(lambda: discovery.view.brokers == {})
    assert discovery.partitions("t") == []


async def test_a_broker_re_registered_elsewhere_is_followed(zk, discovery, autojump_clock):
    await register_broker(zk, 1, "old-host", 9092)
    await register_topic(zk, "t", 1, 1)
    await discovery.ensure_topic("t")
    await until(lambda: discovery.view.brokers.get(1) == ("old-host", 9092))
    # A restart seen as one atomic change: the child lists are the same before and
    # after, so only the re-created nodes (new czxid) tell.
    await zk.multi([
        DeleteOp("/brokers/topics/t/1"), DeleteOp("/brokers/ids/1"),
        CreateOp("/brokers/ids/1", b"new-host-1:new-host:9999", ephemeral=True),
        CreateOp("/brokers/topics/t/1", b"3", ephemeral=True),
    ])
    await until(lambda: discovery.view.brokers.get(1) == ("new-host", 9999))
    await until(lambda: discovery.partitions("t") == [BP(1, 0), BP(1, 1), BP(1, 2)])


async def test_malformed_registrations_are_ignored(zk, discovery, autojump_clock):
    await zk.create("/brokers/ids/1", b"no-colons-here", ephemeral=True, makepath=True)
    await register_broker(zk, 2, "h2", 9092)
    await zk.create("/brokers/ids/not-a-number", b"x:h:1", ephemeral=True)
    await register_topic(zk, "t", 2, 2)
    await zk.create("/brokers/topics/t/1", b"many", ephemeral=True)
    await until(lambda: 2 in discovery.view.brokers)
    await discovery.ensure_topic("t")
    assert discovery.view.brokers == {2: ("h2", 9092)}
    assert discovery.partitions("t") == [BP(2, 0), BP(2, 1)]


def test_static_discovery_without_counts_lets_the_broker_choose():
    static = StaticDiscovery(((3, "a", 1), (1, "b", 2)), lambda topic: None)
    trio.run(static.ensure_topic, "t")
    assert static.partitions("t") == [BP(1, -1), BP(3, -1)]
    counted = StaticDiscovery(((3, "a", 1), (1, "b", 2)), lambda topic: 2)
    trio.run(counted.ensure_topic, "t")
    assert counted.partitions("t") == [BP(1, 0), BP(1, 1), BP(3, 0), BP(3, 1)]


async def test_the_producer_routes_by_the_zookeeper_view(autojump_clock):
    async with open_cluster(2, num_partitions=2) as cluster, cluster.coordinator() as zk:
        async with Producer(coordinator=zk, acks=1, connector=cluster.connector,
                            rng=random.Random(2)) as producer:
            # nobody registered "t": partition 0 of each live broker (§8.5)
            first = await producer.send_batch("t", [b"%d" % i for i in range(40)])
            assert {(r.broker_id, r.partition) for r in first} == {(0, 0), (1, 0)}
            # each broker registered "t" with its 2 partitions on its first append (§8.2)
            await until(lambda: len(producer.discovery.partitions("t")) == 4)
            keyed = await (await producer.send("t", b"k", key="member-17"))
            index = hash_index(java_hash("member-17"), 4)
            assert (keyed.broker_id, keyed.partition) == ([0, 0, 1, 1][index], [0, 1, 0, 1][index])
        for member in cluster.brokers:
            assert member.broker.log_manager.get("t", 0).end_offset > 0
