"""Replicated topics served by the real broker: three in-process brokers on one fake ZooKeeper.

Promise checked (docs/protocol.md §12): a message acknowledged with acks -1 is
on every ISR replica at the same byte offset, consumers of any replica see
only committed bytes, and after the leader goes the partition keeps its
acknowledged messages and takes writes again under a new leader epoch.
"""

from __future__ import annotations

import trio

from trikafka.client import connect
from trikafka.testing import open_cluster
from trikafka.wire import ACKS_APPENDED, ACKS_FLUSHED, ErrorCode, RequestType
from trikafka.wire.messageset import build_message_set
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

TOPIC = "orders"
WAIT_S = 60.0


async def _create(zk, replicas=((0, 1, 2),), config=None) -> None:
    config = {"min.insync.replicas": "2", **(config or {})}
    await create_topic(zk, TOPIC, TopicAssignment(tuple(replicas), config),
                       [PartitionState(r[0], 0, tuple(r), 0) for r in replicas])


async def _wait_leading(cluster, partition: int = 0, epoch_above: int = -1):
    """The broker leading ``partition`` in an epoch above ``epoch_above``, once it acts as leader."""
    with trio.fail_after(WAIT_S):
        while True:
            for member in cluster.brokers:
                replicas = member.broker.replicas
                hosted = replicas.hosted.get((TOPIC, partition)) if replicas else None
                if hosted is not None and hosted.leader is not None and hosted.leader_epoch > epoch_above \
                        and not member.broker.shutting_down:
                    return member, hosted
            await trio.sleep(0.05)


async def _produce(cluster, member, payloads, acks=ACKS_FLUSHED):
    async with await connect(member.host, member.port, open_stream=cluster.open_stream) as conn:
        return await conn.produce_acked([(TOPIC, 0, build_message_set(payloads))], acks=acks, timeout_ms=5000)


async def _replicated(cluster, end: int, members) -> None:
    with trio.fail_after(WAIT_S):
        while not all(m.broker.replicas.hosted[(TOPIC, 0)].log.end_offset >= end for m in members):
            await trio.sleep(0.05)


async def test_acks_all_is_acknowledged_once_every_isr_replica_has_the_bytes(autojump_clock):
    async with open_cluster(3) as cluster, cluster.coordinator() as zk:
        await _create(zk)
        leader, hosted = await _wait_leading(cluster)
        [result] = await _produce(cluster, leader, [b"a", b"bb", b"ccc"])
        assert result.error == ErrorCode.NO_ERROR
        assert hosted.high_watermark >= result.next_offset
        await _replicated(cluster, result.next_offset, cluster.brokers)
        stored = {m.broker.config.broker_id: m.stored(TOPIC, 0)[:result.next_offset] for m in cluster.brokers}
        assert len(set(stored.values())) == 1  # byte-identical replicas

        # Any replica serves consumers up to the HW; a follower refuses writes.
        follower = next(m for m in cluster.brokers if m is not leader)
        async with await connect(follower.host, follower.port, open_stream=cluster.open_stream) as conn:
            with trio.fail_after(WAIT_S):
                while (fetched := await conn.fetch(TOPIC, 0, 0, 1 << 16)).error == ErrorCode.NO_ERROR \
                        and len(fetched.data) < result.next_offset:
                    await trio.sleep(0.05)
            assert bytes(fetched.data) == stored[leader.broker.config.broker_id]
            [refused] = await conn.produce_acked([(TOPIC, 0, build_message_set([b"x"]))], acks=ACKS_APPENDED)
            assert refused.error == ErrorCode.NOT_LEADER_FOR_PARTITION
        metadata = await _metadata(cluster, follower)
        [part] = metadata.topics[0].partitions
        assert (part.leader, part.replicas) == (leader.broker.config.broker_id, (0, 1, 2))
        scraped = leader.broker.metrics.exposition().decode()
        assert 'trikafka_replicas{role="leader"} 1.0' in scraped
        assert "trikafka_under_replicated_partitions 0.0" in scraped


async def _metadata(cluster, member):
    async with await connect(member.host, member.port, open_stream=cluster.open_stream) as conn:
        return await conn.metadata([TOPIC])


async def test_a_new_leader_keeps_every_acknowledged_message_and_takes_writes(autojump_clock):
    async with open_cluster(3) as cluster, cluster.coordinator() as zk:
        await _create(zk)
        leader, hosted = await _wait_leading(cluster)
        acked = []
        for n in range(5):
            [result] = await _produce(cluster, leader, [b"before %d" % n])
            assert result.error == ErrorCode.NO_ERROR
            acked.append(result)
        epoch = hosted.leader_epoch
        leader.broker.shutdown()  # controlled: leadership moves first
        new_leader, new_hosted = await _wait_leading(cluster, epoch_above=epoch)
        assert new_leader is not leader
        assert new_hosted.log.end_offset >= acked[-1].next_offset
        [after] = await _produce(cluster, new_leader, [b"after"])
        assert after.error == ErrorCode.NO_ERROR and after.base_offset == acked[-1].next_offset
        state = (await read_state(zk, TOPIC, 0)).state
        assert state.leader == new_leader.broker.config.broker_id and state.leader_epoch > epoch


async def test_acks_all_is_refused_when_the_isr_is_below_the_minimum(autojump_clock):
    async with open_cluster(2) as cluster, cluster.coordinator() as zk:
        await _create(zk, replicas=((0, 1),), config={"replica.lag.time.max.ms": "500"})
        leader, hosted = await _wait_leading(cluster)
        released = trio.Event()

        async def stall_followers(request):
            if request.type == RequestType.REPLICA_FETCH:
                await released.wait()

        # The follower's fetches stall on the way to the leader: it lags, the ISR shrinks.
        cluster.network.before_request[leader.address] = stall_followers
        with trio.fail_after(WAIT_S):
            while hosted.leader.isr != (leader.broker.config.broker_id,):
                await trio.sleep(0.1)
        [result] = await _produce(cluster, leader, [b"lonely"])
        assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS
        [appended] = await _produce(cluster, leader, [b"acks one"], acks=ACKS_APPENDED)
        assert appended.error == ErrorCode.NO_ERROR
        del cluster.network.before_request[leader.address]
        released.set()  # it catches up and rejoins
        with trio.fail_after(WAIT_S):
            while len(hosted.leader.isr) != 2:
                await trio.sleep(0.1)
        [result] = await _produce(cluster, leader, [b"together"])
        assert result.error == ErrorCode.NO_ERROR


async def test_a_returning_leader_truncates_its_unreplicated_tail_by_epoch(autojump_clock):
    """KIP-101: the old leader's unreplicated tail goes; it then holds exactly the new leader's bytes."""
    async with open_cluster(2) as cluster, cluster.coordinator() as zk:
        await _create(zk, replicas=((0, 1),), config={"min.insync.replicas": "1"})
        old, hosted = await _wait_leading(cluster)
        [committed] = await _produce(cluster, old, [b"committed"])
        assert committed.error == ErrorCode.NO_ERROR
        released, stalled = trio.Event(), trio.Event()

        async def stall_followers(request):
            if request.type == RequestType.REPLICA_FETCH:
                stalled.set()
                await released.wait()

        cluster.network.before_request[old.address] = stall_followers
        await stalled.wait()  # the follower's next fetch is held: its long poll in flight has ended
        [tail] = await _produce(cluster, old, [b"only on the old leader"], acks=ACKS_APPENDED)
        assert tail.error == ErrorCode.NO_ERROR and tail.base_offset == committed.next_offset
        epoch = hosted.leader_epoch
        index = cluster.brokers.index(old)
        await cluster.stop(index)  # the follower (still in the ISR) takes over without the tail
        new, _ = await _wait_leading(cluster, epoch_above=epoch)
        [after] = await _produce(cluster, new, [b"the new leader's", b"own bytes"])
        assert after.error == ErrorCode.NO_ERROR and after.base_offset == committed.next_offset
        back = await cluster.restart(index)
        with trio.fail_after(WAIT_S):
            while back.stored(TOPIC, 0) != new.stored(TOPIC, 0):
                await trio.sleep(0.05)
        assert b"only on the old leader" not in back.stored(TOPIC, 0)


async def test_replica_ack_fsync_acknowledges_only_what_every_isr_replica_fsynced(autojump_clock):
    """§12.6: with replica.ack.fsync, "has it" means fsynced, so an acknowledged set is on every disk."""
    async with open_cluster(3, log_flush_interval=10_000, log_default_flush_interval_ms=60_000) as cluster, \
            cluster.coordinator() as zk:
        await _create(zk, config={"replica.ack.fsync": "true"})
        leader, _ = await _wait_leading(cluster)
        [result] = await _produce(cluster, leader, [b"durable %d" % n for n in range(10)])
        assert result.error == ErrorCode.NO_ERROR
        # Checked at the moment of the acknowledgement: no waiting, the promise is immediate.
        for member in cluster.brokers:
            assert member.broker.replicas.hosted[(TOPIC, 0)].log.visible_end >= result.next_offset
            assert member.fs.durable_size(f"/data/{TOPIC}-0/{0:020d}.kafka") >= result.next_offset


async def _tail_intact_of(zk, broker_id: int) -> bool:
    import json

    from trikafka.zk import paths

    with trio.fail_after(WAIT_S):
        while True:
            try:
                data, _stat = await zk.get(paths.replication_broker(broker_id))
                return json.loads(data)["tail_intact"]
            except Exception:  # not registered yet (the old session's node expired)
                await trio.sleep(0.05)


async def test_a_power_cut_loses_the_unflushed_tail_and_a_kill_keeps_it(autojump_clock):
    """``InProcessCluster.crash``: a plain kill keeps every byte and the broker says its tail is intact;
    after a power cut (the fake disk crashes, the machine reboots) it says its tail may be gone, and
    its replica becomes the leader's bytes again."""
    async with open_cluster(2, log_flush_interval=10_000, log_default_flush_interval_ms=3_600_000) as cluster, \
            cluster.coordinator() as zk:
        await _create(zk, replicas=((0, 1),), config={"min.insync.replicas": "1"})
        leader, _ = await _wait_leading(cluster)
        [acked] = await _produce(cluster, leader, [b"unflushed"], acks=ACKS_APPENDED)
        assert acked.error == ErrorCode.NO_ERROR
        index = cluster.brokers.index(leader)
        await cluster.crash(index, power_cut=False)
        back = await cluster.restart(index)
        assert b"unflushed" in back.stored(TOPIC, 0)
        assert await _tail_intact_of(zk, index) is True
        crashes = cluster.brokers[index].fs.crash_count
        await cluster.crash(index, power_cut=True)
        assert cluster.brokers[index].fs.crash_count == crashes + 1  # what was not fsynced may be gone
        other = cluster.brokers[1 - index]
        released = trio.Event()

        async def hold_copies(request):
            if request.type == RequestType.REPLICA_FETCH:
                await released.wait()

        # Its copying again is held until its word is read: once caught up it says "intact" again,
        # and a start that takes longer (a Kafka listener's) would otherwise be caught up already.
        cluster.network.before_request[other.address] = hold_copies
        back = await cluster.restart(index)
        assert await _tail_intact_of(zk, index) is False
        del cluster.network.before_request[other.address]
        released.set()
        with trio.fail_after(WAIT_S):  # whatever the cut left, the replica copies the leader again
            while back.stored(TOPIC, 0) != other.stored(TOPIC, 0):
                await trio.sleep(0.05)


async def test_an_acks_all_write_is_visible_at_the_leader_when_acknowledged(autojump_clock):
    """§12.6: acks -1 answers once committed and made visible by the leader's flush, which the
    append requests at once: no wait for the flush timer (an hour here) before consumers see it."""
    async with open_cluster(3, log_flush_interval=1_000_000, log_default_flush_interval_ms=3_600_000) as cluster, \
            cluster.coordinator() as zk:
        await _create(zk)
        leader, hosted = await _wait_leading(cluster)
        started = trio.current_time()
        [result] = await _produce(cluster, leader, [b"seen", b"at once"])
        assert result.error == ErrorCode.NO_ERROR and trio.current_time() - started < 60
        assert hosted.consumer_end() >= result.next_offset
        async with await connect(leader.host, leader.port, open_stream=cluster.open_stream) as conn:
            fetched = await conn.fetch(TOPIC, 0, 0, 1 << 16)
        assert len(fetched.data) == result.next_offset


async def test_a_kafka_fetch_waiting_on_a_leader_alone_in_its_isr_wakes_when_a_write_commits(autojump_clock):
    # With the leader alone in the ISR an append commits at once: its high watermark moves there, and
    # that wakes the fetch long-polling at the end (the append itself wakes no reader of a replicated
    # partition, and a flush, which would, is 20 s away here).
    from trikafka.client.kafka import LATEST, KafkaAdmin, KafkaProducer, NewTopic, PartitionConsumer

    quiet_flusher = {"log_flush_interval": 100_000, "log_default_flush_interval_ms": 20_000}
    async with open_cluster(1, loopback=False, **quiet_flusher) as cluster, cluster.kafka_client() as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("alone", 1, 1)]) == {"alone": None}
        consumer = PartitionConsumer(client, "alone", 0, LATEST, max_wait_s=30.0)
        await consumer.seek(LATEST)
        got = []
        async with trio.open_nursery() as nursery:
            async def fetch() -> None:
                got.extend(await consumer.fetch())

            nursery.start_soon(fetch)
            await trio.sleep(1)
            sent_at = trio.current_time()
            async with KafkaProducer.open(client, acks=1) as producer:
                await producer.send("alone", b"awaited", partition=0)
        assert [r.value for r in got] == [b"awaited"]
        assert trio.current_time() - sent_at < 1
