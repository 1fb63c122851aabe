"""``trikafka topics reassign`` against three real ``trikafka serve`` processes (docs/protocol.md §12.12.3):
the new replica copies the partition and joins the ISR, then the old replica, the leader, is dropped
and leadership moves to the new one."""

from __future__ import annotations

import json
import os

import pytest
import trio

from tests.helpers.broker_testing import READY_MARKER, child_process
from tests.helpers.cli import cli, lines, produce
from trikafka.zk import KazooZooKeeperClient
from trikafka.cli.serve import read_ready_file

pytestmark = pytest.mark.zookeeper

WAIT_S = 60.0


async def describe(zk_chroot: str) -> dict:
    status, out, err = await cli("topics", "describe", "moving", "--json", "--zookeeper", zk_chroot)
    assert status == 0, err
    return json.loads(out)["partitions"][0]


async def wait_for(zk, predicate) -> None:
    """Until ``predicate()`` (async) holds, re-checked on every change of the partition's state."""
    with trio.fail_after(WAIT_S):
        async for _ in zk.watch_data("/trikafka/topics/moving/partitions/0/state"):
            if await predicate():
                return


async def test_a_partition_moves_to_a_new_replica_and_leaves_the_old_one(zk_chroot, tmp_path, no_kazoo_thread_leaks):
    def serve(broker_id: int):
        return child_process("serve", "--zookeeper", zk_chroot, "--broker-id", str(broker_id), "--port", "0",
                             "--log-dir", str(tmp_path / f"data-{broker_id}"),
                             "--ready-file", str(tmp_path / f"port-{broker_id}"),
                             "--set", "log.default.flush.scheduler.interval.ms=20")

    async with serve(1) as b1, serve(2) as b2, serve(3) as b3, KazooZooKeeperClient(zk_chroot) as zk:
        for broker in (b1, b2, b3):
            await broker.wait_for_stderr(READY_MARKER)
        ports = {i: read_ready_file(str(tmp_path / f"port-{i}"))[0] for i in (1, 2, 3)}
        # round robin from the lowest id: the partition lives on 1 and 2
        status, _out, err = await cli("topics", "create", "moving", "--partitions", "1", "--replication-factor", "2",
                                      "--zookeeper", zk_chroot)
        assert status == 0, err
        first = await describe(zk_chroot)
        assert (first["replicas"], first["leader"]) == ([1, 2], 1)
        await b1.wait_for_stderr(b"broker 1: partitions it now leads: 1 (moving 1)")  # it acts on its state
        await produce(ports[1], "moving", lines(*(f"message {i}" for i in range(100))), "--acks", "-1")

        status, out, err = await cli("topics", "reassign", "moving", "--partition", "0", "--replicas", "3,2",
                                     "--zookeeper", zk_chroot)
        assert status == 0, err

        async def moved() -> bool:
            # The leader may re-admit broker 1 to the ISR between the controller's two finishing
            # writes (state, then topic); a later pass prunes it (docs/protocol.md §12.12.3, step 4).
            now = await describe(zk_chroot)
            return (now["replicas"] == [3, 2] and set(now["isr"]) <= {2, 3}
                    and not (await zk.get("/trikafka/topics/moving"))[0].count(b"targets"))

        await wait_for(zk, moved)
        final = await describe(zk_chroot)
        assert final["leader"] == 3 and set(final["isr"]) <= {2, 3} and final["leader_epoch"] > 0
        # the new replica holds the same bytes as the one that stayed
        segment = os.path.join("moving-0", "00000000000000000000.kafka")
        with trio.fail_after(WAIT_S):
            while True:
                copies = [(tmp_path / f"data-{i}" / segment).read_bytes()
                          if (tmp_path / f"data-{i}" / segment).exists() else b"" for i in (2, 3)]
                if copies[0] and copies[0] == copies[1]:
                    break
                await trio.sleep(0.05)  # polling files another process writes (no event to wait on)
        assert copies[0].count(b"message ") == 100
        status, out, err = await cli("cluster", "--json", "--zookeeper", zk_chroot)
        assert status == 0 and json.loads(out)["under_replicated"] == []
        await b3.wait_for_stderr(b"broker 3: partitions it now leads: 1 (moving 1)")
        await produce(ports[3], "moving", lines("after the move"), "--acks", "-1")  # the new leader takes writes
