"""``trikafka produce`` / ``consume`` pointed at a follower of a replicated partition reach its leader.

Three real brokers on a real ZooKeeper serve a replicated topic (docs/protocol.md
§12); the CLI is given a broker that does not lead the partition and must find
the leader through METADATA (§12.13).
"""

from __future__ import annotations

import subprocess

import pytest
import trio

from tests.helpers.broker_testing import child_process, make_config
from trikafka.broker import serve
from trikafka.zk import KazooZooKeeperClient
from trikafka.zk.replication_store import create_topic
from trikafka.zk.replication_values import PartitionState, TopicAssignment

pytestmark = pytest.mark.zookeeper

WAIT_S = 30.0


async def test_cli_produce_and_consume_at_followers_reach_the_leader(nursery, tmp_path, zk_chroot):
    brokers = [await nursery.start(serve, make_config(tmp_path / f"b{i}", broker_id=i, enable_zookeeper=True,
                                                      zk_connect=zk_chroot)) for i in range(3)]
    async with KazooZooKeeperClient(zk_chroot) as zk:
        await create_topic(zk, "rt", TopicAssignment(((0, 1, 2),), {"min.insync.replicas": "2"}),
                           [PartitionState(0, 0, (0, 1, 2), 0)])
        with trio.fail_after(WAIT_S):
            async for value in zk.watch_data("/trikafka/topics/rt/partitions/0/state"):
                if value is not None and len(PartitionState.decode(value[0]).isr) == 3:
                    break
    lines = [b"line %d" % i for i in range(50)]
    async with child_process("produce", "rt", "--broker", f"127.0.0.1:{brokers[1].port}", "--acks", "-1",
                             "--batch", "7", stdin=subprocess.PIPE) as child:
        await child.send_stdin(b"".join(line + b"\n" for line in lines))
        with trio.fail_after(WAIT_S):
            assert await child.wait() == 0, child.stderr
    assert b"sent 50 messages" in child.stderr
    async with child_process("consume", "rt", "--broker", f"127.0.0.1:{brokers[2].port}", "--max-messages", "50",
                             stdout=subprocess.PIPE) as child:
        with trio.fail_after(WAIT_S):
            assert await child.wait() == 0, child.stderr
    assert child.stdout.splitlines() == lines
    # A group's committed offset of the replicated partition "0" (§12.9), and its lag at the leader.
    async with KazooZooKeeperClient(zk_chroot) as zk:
        await zk.create("/consumers/g/offsets/rt/0", b"100", makepath=True)
    async with child_process("groups", "g", "--zookeeper", zk_chroot, stdout=subprocess.PIPE) as child:
        with trio.fail_after(WAIT_S):
            assert await child.wait() == 0, child.stderr
    end = sum(len(line) + 10 for line in lines)  # each entry: 4-byte size, magic, attributes, crc, payload
    assert f"rt\t0\t-\t100\t{end}\t{end - 100}".encode() in child.stdout.splitlines(), child.stdout
    # The ZooKeeper listing shows the replicated partition once, at its leader.
    async with child_process("topics", "--zookeeper", zk_chroot, stdout=subprocess.PIPE) as child:
        with trio.fail_after(WAIT_S):
            assert await child.wait() == 0, child.stderr
    assert f"rt\t0\t0:127.0.0.1:{brokers[0].port}\t0\t{end}\t{end}".encode() in child.stdout.splitlines(), child.stdout
