"""Clients follow leaders of replicated partitions through a failover (docs/protocol.md §12).

Three in-process brokers on one fake ZooKeeper; a replicated topic is created
through the ZooKeeper store; the leader of partition 0 is stopped (a
controlled shutdown, or a crash: cut off the network and its session expired)
while a producer writes with acks -1.  Every acknowledged message must then
be readable at its offset by a simple consumer and by a group consumer, and
nothing read may vanish.
"""

from __future__ import annotations

import pytest
import trio

from trikafka.client import LeaderDirectory, SimpleConsumer
from trikafka.group import GroupConfig, GroupConsumer
from trikafka.group.inspect import describe_group
from trikafka.producer import Producer
from trikafka.testing import open_cluster
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

TOPIC = "orders"
WAIT_S = 60.0


async def _create(cluster, partitions: int = 2) -> None:
    replicas = tuple(tuple((p + i) % 3 for i in range(3)) for p in range(partitions))
    async with cluster.coordinator() as zk:
        await create_topic(zk, TOPIC, TopicAssignment(replicas, {"min.insync.replicas": "2"}),
                           [PartitionState(r[0], 0, r, 0) for r in replicas])


async def _wait_leader(cluster, partition: int, predicate) -> PartitionState:
    async with cluster.coordinator() as zk:
        with trio.fail_after(WAIT_S):
            async for value in zk.watch_data(f"/trikafka/topics/{TOPIC}/partitions/{partition}/state"):
                if value is not None:
                    state = PartitionState.decode(value[0])
                    if predicate(state):
                        return state
    raise AssertionError("the state watch ended")


def _directory(cluster) -> LeaderDirectory:
    return LeaderDirectory([b.address for b in cluster.brokers], connector=cluster.connector)


async def _read_all(cluster, partition: int, until_offset: int) -> dict[int, bytes]:
    """Every message of ``partition`` below ``until_offset``, by offset, read following the leader."""
    found: dict[int, bytes] = {}
    alive = [b for b in cluster.brokers if b.address not in cluster.network.down]
    async with SimpleConsumer(alive[0].address, TOPIC, partition, leaders=_directory(cluster),
                              connect_kwargs=cluster.network.connect_kwargs(), max_wait_ms=100) as consumer:
        with trio.fail_after(WAIT_S):
            async for message in consumer.messages(0):
                found[message.offset] = message.payload
                if message.next_offset >= until_offset:
                    break
    return found


async def _produce_through(cluster, stop_leader, *, count: int = 40) -> dict[tuple[int, int], bytes]:
    """Send ``count`` keyed messages with acks -1, stopping partition 0's leader halfway.

    Every one must be acknowledged; partition 0's acknowledgements come from the
    old leader before the stop and from another broker after it.
    """
    acked: dict[tuple[int, int], bytes] = {}
    acked_by: list[tuple[int, int]] = []
    async with cluster.coordinator() as zk:
        async with Producer(coordinator=zk, connector=cluster.connector, acks=-1, ack_timeout_s=2.0,
                            leader_wait_s=WAIT_S) as producer:
            for i in range(count):
                if i == count // 2:
                    await stop_leader()
                value = f"m{i}".encode()
                delivery = await producer.send(TOPIC, value, key=f"k{i % 4}")
                result = await delivery.result()
                acked[(result.partition, result.offset)] = value
                acked_by.append((i, result.broker_id if result.partition == 0 else None))
    before = {b for i, b in acked_by if i < count // 2 and b is not None}
    after = {b for i, b in acked_by if i >= count // 2 and b is not None}
    assert len(before) == 1 and after and not before & after, acked_by
    return acked


@pytest.mark.parametrize("how", ["controlled", "crash"])
async def test_producer_and_simple_consumer_keep_going_through_a_failover(autojump_clock, how):
    async with open_cluster(3) as cluster:
        await _create(cluster)
        first = await _wait_leader(cluster, 0, lambda s: s.leader >= 0 and len(s.isr) == 3)
        old_leader = cluster.brokers[first.leader]

        async def stop_leader() -> None:
            if how == "controlled":
                old_leader.broker.shutdown()
            else:  # cut off, its session gone, and it never comes back
                await cluster.kill(first.leader)
                old_leader.broker.zookeeper.coordinator.expire()
                old_leader.broker.shutdown()
            await _wait_leader(cluster, 0, lambda s: s.leader not in (-1, first.leader))

        acked = await _produce_through(cluster, stop_leader)
        assert len(acked) == 40
        for partition in (0, 1):
            mine = {offset: value for (p, offset), value in acked.items() if p == partition}
            if not mine:
                continue
            end = max(mine) + 1
            found = await _read_all(cluster, partition, end)
            for offset, value in mine.items():
                assert found.get(offset) == value, f"acknowledged message lost at {partition}/{offset}"
        new = await _wait_leader(cluster, 0, lambda s: s.leader >= 0)
        assert new.leader != first.leader and new.leader_epoch > first.leader_epoch


async def test_group_consumer_reads_a_replicated_topic_from_the_leaders(autojump_clock):
    async with open_cluster(3) as cluster:
        await _create(cluster)
        first = await _wait_leader(cluster, 0, lambda s: s.leader >= 0 and len(s.isr) == 3)
        await _wait_leader(cluster, 1, lambda s: s.leader >= 0 and len(s.isr) == 3)

        async def stop_leader() -> None:
            cluster.brokers[first.leader].broker.shutdown()
            await _wait_leader(cluster, 0, lambda s: s.leader not in (-1, first.leader))

        acked = await _produce_through(cluster, stop_leader, count=20)
        config = GroupConfig(autooffset_reset="smallest", fetch_wait_max_ms=100)
        seen: dict[tuple[int, int], bytes] = {}
        async with cluster.coordinator() as zk:
            async with GroupConsumer(zk, "g", {TOPIC: 1}, config=config,
                                     open_stream=cluster.network.open_stream) as consumer:
                with trio.fail_after(WAIT_S):
                    async for message in consumer:
                        assert message.partition in ("0", "1")  # §12.9 names
                        assert message.broker_id is None
                        seen[(message.part, message.offset)] = message.payload
                        if all(key in seen for key in acked):
                            break
                assert await consumer.commit()
            offsets = sorted(c for c in await zk.children(f"/consumers/g/offsets/{TOPIC}"))
            described = await describe_group(zk, "g")
        assert [(s.topic, s.partition) for s in described.partitions] == [(TOPIC, "0"), (TOPIC, "1")]
        assert all(s.committed is not None for s in described.partitions if s.partition in offsets)
        assert set(offsets) == {str(p) for p, _ in acked}
        for key, value in acked.items():
            assert seen[key] == value
        state = await read_state_any(cluster)
        assert state.leader != first.leader


async def read_state_any(cluster) -> PartitionState:
    async with cluster.coordinator() as zk:
        return (await read_state(zk, TOPIC, 0)).state


async def test_a_static_broker_list_producer_learns_leaders_from_a_not_leader_answer(autojump_clock):
    async with open_cluster(3) as cluster:
        await _create(cluster, partitions=3)
        for p in range(3):
            await _wait_leader(cluster, p, lambda s: s.leader >= 0 and len(s.isr) == 3)
        brokers = [(i, *b.address) for i, b in enumerate(cluster.brokers)]
        async with Producer(brokers=brokers, connector=cluster.connector, acks=1) as producer:
            results = [await (await producer.send(TOPIC, f"m{i}".encode(), key=f"k{i}")).result()
                       for i in range(12)]
        async with cluster.coordinator() as zk:
            leaders = {p: (await read_state(zk, TOPIC, p)).state.leader for p in range(3)}
        assert all(r.error is None and 0 <= r.partition < 3 for r in results)
        assert all(r.broker_id == leaders[r.partition] for r in results)  # every one acknowledged by its leader


async def test_clients_follow_the_leader_back_to_a_restarted_broker(autojump_clock):
    async with open_cluster(3) as cluster:
        await _create(cluster, partitions=1)
        first = await _wait_leader(cluster, 0, lambda s: s.leader >= 0 and len(s.isr) == 3)
        acked: dict[int, bytes] = {}
        async with cluster.coordinator() as zk:
            async with Producer(coordinator=zk, connector=cluster.connector, acks=-1, ack_timeout_s=2.0,
                                leader_wait_s=WAIT_S) as producer:
                for i in range(30):
                    if i == 10:
                        await cluster.stop(first.leader)
                        await _wait_leader(cluster, 0, lambda s: s.leader not in (-1, first.leader))
                    if i == 20:  # back on the same disk, a new port: the preferred leader again
                        await cluster.restart(first.leader)
                        await _wait_leader(cluster, 0, lambda s: s.leader == first.leader and len(s.isr) == 3)
                    result = await (await producer.send(TOPIC, f"m{i}".encode())).result()
                    acked[result.offset] = f"m{i}".encode()
                    if i >= 20:
                        assert result.broker_id == first.leader
        found = await _read_all(cluster, 0, max(acked) + 1)
        assert {offset: found.get(offset) for offset in acked} == acked


async def test_a_group_consumer_keeps_reading_while_the_leader_stops(autojump_clock):
    async with open_cluster(3) as cluster:
        await _create(cluster, partitions=1)
        first = await _wait_leader(cluster, 0, lambda s: s.leader >= 0 and len(s.isr) == 3)
        config = GroupConfig(autooffset_reset="smallest", fetch_wait_max_ms=100)
        seen: dict[int, bytes] = {}
        acked: dict[int, bytes] = {}
        async with cluster.coordinator() as zk:
            async with Producer(coordinator=zk, connector=cluster.connector, acks=-1, ack_timeout_s=2.0,
                                leader_wait_s=WAIT_S) as producer, \
                    GroupConsumer(zk, "g", {TOPIC: 1}, config=config,
                                  open_stream=cluster.network.open_stream) as consumer:
                messages = consumer.__aiter__()
                for i in range(20):
                    if i == 10:  # the consumer is fetching from the leader now
                        await cluster.stop(first.leader)
                        await _wait_leader(cluster, 0, lambda s: s.leader not in (-1, first.leader))
                    result = await (await producer.send(TOPIC, f"m{i}".encode())).result()
                    acked[result.offset] = f"m{i}".encode()
                    with trio.fail_after(WAIT_S):
                        while result.offset not in seen:
                            message = await messages.__anext__()
                            seen[message.offset] = message.payload
        assert seen == acked  # everything acknowledged, nothing else, each at its offset
