"""The producer with real ZooKeeper discovery and real brokers joining and leaving.

The brokers here run standalone; each test registers them itself, one
ZooKeeper session per broker, with the bytes of spec §8.2, so closing a
broker's session removes its ephemerals exactly as a broker dying would.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import trio

from tests.helpers.broker_testing import make_config
from trikafka.broker import serve
from trikafka.client import connect
from trikafka.producer import Producer
from trikafka.wire import iter_messages
from trikafka.zk import KazooZooKeeperClient

pytestmark = pytest.mark.zookeeper

WAIT_S = 20.0  # bound on waiting for a watch to deliver; a hang fails instead of stalling


class RunningBroker:
    """An in-process broker plus the ZooKeeper session that registers it."""

    def __init__(self, broker_id: int, config, broker, session: KazooZooKeeperClient, scope: trio.CancelScope):
        self.broker_id, self.config, self.broker, self.session, self.scope = broker_id, config, broker, session, scope

    async def register(self, topic: str, partitions: int) -> None:
        await self.session.create(f"/brokers/topics/{topic}/{self.broker_id}", str(partitions).encode(),
                                  ephemeral=True, makepath=True)


async def start_broker(nursery, tmp_path, zk_connect: str, broker_id: int, partitions: int = 2) -> RunningBroker:
    config = make_config(tmp_path / f"broker{broker_id}", broker_id=broker_id, num_partitions=partitions)
    scope = trio.CancelScope()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        with scope:
            await serve(config, task_status=task_status)

    broker = await nursery.start(run)
    session = KazooZooKeeperClient(zk_connect)
    await session.start()
    value = f"127.0.0.1-1349990000123:127.0.0.1:{broker.port}".encode()  # §8.2
    await session.create(f"/brokers/ids/{broker_id}", value, ephemeral=True, makepath=True)
    return RunningBroker(broker_id, config, broker, session, scope)


async def read_all(nursery, running: RunningBroker, topic: str, partition: int) -> bytes:
    """Every byte of a partition's log; a stopped broker is restarted on its log dir to read it."""
    broker = running.broker
    restarted = running.scope.cancel_called
    if restarted:
        broker = await nursery.start(serve, dataclasses.replace(running.config, port=0))
    try:
        await broker.flush_all()
        async with await connect("127.0.0.1", broker.port) as conn:
            result = await conn.fetch(topic, partition, 0, 64 * 1024 * 1024)
            return result.data
    finally:
        if restarted:
            broker.shutdown()


async def wait_until(predicate) -> None:
    with trio.fail_after(WAIT_S):
        while not predicate():
            await trio.sleep(0.01)


async def test_unregistered_topics_use_partition_0_until_brokers_register_them(nursery, tmp_path, zk_chroot):
    b1 = await start_broker(nursery, tmp_path, zk_chroot, 1, partitions=3)
    b2 = await start_broker(nursery, tmp_path, zk_chroot, 2, partitions=3)
    try:
        async with Producer(zk_connect=zk_chroot, acks=1, rng=random.Random(4)) as producer:
            first = await producer.send_batch("t", [b"%d" % i for i in range(30)])
            assert {(r.broker_id, r.partition) for r in first} == {(1, 0), (2, 0)}
            await b1.register("t", 3)
            await b2.register("t", 3)
            await wait_until(lambda: len(producer.discovery.partitions("t")) == 6)
            later = await producer.send_batch("t", [b"%d" % i for i in range(200)])
            assert {(r.broker_id, r.partition) for r in later} == {(b, p) for b in (1, 2) for p in range(3)}
    finally:
        for b in (b1, b2):
            await b.session.aclose()


async def test_brokers_join_and_leave_while_sending_and_nothing_acked_is_lost(nursery, tmp_path, zk_chroot):
    b1 = await start_broker(nursery, tmp_path, zk_chroot, 1)
    b2 = await start_broker(nursery, tmp_path, zk_chroot, 2)
    await b1.register("t", 2)
    await b2.register("t", 2)
    running = {1: b1, 2: b2}
    deliveries = []
    after_leave_index = None
    try:
        async with Producer(zk_connect=zk_chroot, producer_type="async", acks=1, batch_size=50,
                            queue_time_s=0.02, num_retries=6, retry_backoff_s=0.05,
                            rng=random.Random(9)) as producer:
            view = producer.discovery.view
            for i in range(3000):
                deliveries.append(await producer.send("t", b"m%05d" % i, key=None if i % 3 else f"k{i % 17}"))
                if i % 50 == 0:
                    await trio.sleep(0.002)
                if i == 1000:  # broker 3 joins
                    running[3] = await start_broker(nursery, tmp_path, zk_chroot, 3)
                    await running[3].register("t", 2)
                    await wait_until(lambda: len(producer.discovery.partitions("t")) == 6)
                if i == 2000:  # broker 1 dies: its socket first, its session a moment later
                    b1.scope.cancel()
                    await trio.sleep(0.1)
                    await b1.session.aclose()
                    await wait_until(lambda: 1 not in view.brokers)
                    after_leave_index = i + 1
        results = [await d.wait() for d in deliveries]
    finally:
        for b in running.values():
            await b.session.aclose()
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert {r.broker_id for r in results[1100:2000]} == {1, 2, 3}  # the newcomer took its share
    assert {r.broker_id for r in results[after_leave_index:]} == {2, 3}
    # Every message reported delivered is in the log named by its result, at its offset.
    logs = {}
    for broker_id, b in running.items():
        for partition in range(2):
            logs[(broker_id, partition)] = await read_all(nursery, b, "t", partition)
    for i, r in enumerate(results):
        log = logs[(r.broker_id, r.partition)]
        [message] = list(iter_messages(log[r.offset:r.next_offset], r.offset))
        assert message.payload == b"m%05d" % i
