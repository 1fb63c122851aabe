"""``trikafka produce --zookeeper``: stdin lines through the Producer, brokers found in ZooKeeper."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.broker_testing import child_process, make_config
from trikafka.broker import serve
from trikafka.client import connect
from trikafka.wire import iter_messages
from trikafka.zk import KazooZooKeeperClient

pytestmark = pytest.mark.zookeeper


async def test_produce_with_zookeeper_discovery_and_acks(nursery, tmp_path, zk_chroot):
    broker = await nursery.start(serve, make_config(tmp_path, broker_id=4, num_partitions=1))
    async with KazooZooKeeperClient(zk_chroot) as session:
        await session.create("/brokers/ids/4", f"127.0.0.1-1:127.0.0.1:{broker.port}".encode(),
                             ephemeral=True, makepath=True)
        async with child_process("produce", "lines", "--zookeeper", zk_chroot, "--acks", "-1",
                                 stdin=subprocess.PIPE) as child:
            await child.send_stdin(b"".join(b"line %d\n" % i for i in range(500)))
            assert await child.wait() == 0
            assert b"sent 500 messages" in child.stderr
    async with await connect("127.0.0.1", broker.port) as conn:
        fetched = await conn.fetch("lines", 0, 0, 1 << 20)
    assert [m.payload for m in iter_messages(fetched.data)] == [b"line %d" % i for i in range(500)]


async def test_produce_with_zookeeper_and_no_broker_fails_clearly(tmp_path, zk_chroot):
    async with child_process("produce", "lines", "--zookeeper", zk_chroot, "--acks", "1",
                             stdin=subprocess.PIPE) as child:
        await child.send_stdin(b"a\nb\n")
        assert await child.wait() == 1
    assert b"2 message(s) not delivered" in child.stderr
    assert b"no live broker is known for 'lines'" in child.stderr
