"""commitToGroup's fenced commit against a real ZooKeeper: a load never overwrites a live member's offset.

A group member owns a partition through the ephemeral node
``/consumers/<g>/owners/<topic>/<broker>-<partition>`` (spec §8.3), created
here by a second session exactly as a member's rebalance creates it.
"""

from __future__ import annotations

import logging

import pytest
from kazoo.client import KazooClient

from trikafka.spark.cluster import ZooKeeperCluster
from trikafka.spark.offsets import PartitionKey

pytestmark = [pytest.mark.zookeeper]


@pytest.fixture
def member(zk_chroot):  # type: ignore[no-untyped-def]
    """A second ZooKeeper session standing for a live group member."""
    client = KazooClient(hosts=zk_chroot, timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_a_load_commit_skips_a_partition_a_live_member_owns(zk_chroot, member, caplog):
    owned, free = PartitionKey("t", 0, 0), PartitionKey("t", 0, 1)
    member.create("/consumers/g/owners/t/0-0", b"g_member-0", ephemeral=True, makepath=True)
    member.create("/consumers/g/offsets/t/0-0", b"5", makepath=True)

    with caplog.at_level(logging.WARNING, logger="trikafka.spark.cluster"):
        with ZooKeeperCluster(zk_chroot, timeout_s=10.0) as cluster:
            refused = cluster.commit_group_offsets("g", {owned: 99, free: 42})

    assert refused == [owned]
    assert member.get("/consumers/g/offsets/t/0-0")[0] == b"5"  # the member's commit stands
    assert member.get("/consumers/g/offsets/t/0-1")[0] == b"42"  # nobody owns it: committed
    assert member.get("/consumers/g/owners/t/0-0")[0] == b"g_member-0"  # ownership untouched
    assert member.exists("/consumers/g/owners/t/0-1") is None  # the load's claim did not linger
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["commitToGroup g: t/0-0 is owned by a live group member; its offset was not overwritten"]


def test_a_load_commit_overwrites_once_the_member_is_gone(zk_chroot, member):
    key = PartitionKey("t", 1, 0)
    member.create("/consumers/g/owners/t/1-0", b"g_member-0", ephemeral=True, makepath=True)
    with ZooKeeperCluster(zk_chroot, timeout_s=10.0) as cluster:
        assert cluster.commit_group_offsets("g", {key: 7}) == [key]
        member.delete("/consumers/g/owners/t/1-0")  # the member released it (or its session ended)
        assert cluster.commit_group_offsets("g", {key: 7}) == []
        assert cluster.commit_group_offsets("g", {key: 8}) == []  # an existing offsets node is set
    assert member.get("/consumers/g/offsets/t/1-0")[0] == b"8"
