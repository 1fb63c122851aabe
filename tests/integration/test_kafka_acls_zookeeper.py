"""ACLs in a ZooKeeper cluster (docs/protocol.md §18.3): one ``trikafka acls --zookeeper`` reaches every broker.

Two real ``trikafka serve --zookeeper --set authorizer=acl`` processes; the
clients are ``User:ANONYMOUS``.  DescribeCluster (Describe on the Cluster) is
asked of each broker directly, so each broker's own decision is seen.
"""

from __future__ import annotations

import functools

import trio
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode

from tests.helpers.cli import cli
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange

WAIT_S = 60.0
DESCRIBE_CLUSTER = 60


def describe_cluster_error(bootstrap: str) -> ErrorCode:
    response = exchange(bootstrap, DESCRIBE_CLUSTER, 0,
                        DescribeClusterRequest(include_cluster_authorized_operations=False))
    return ErrorCode(response.error_code)


async def wait_for_answer(bootstrap: str, expected: ErrorCode) -> None:
    """Return once the broker at ``bootstrap`` answers DescribeCluster with ``expected`` (its watch fired)."""
    with trio.fail_after(WAIT_S):
        while await trio.to_thread.run_sync(describe_cluster_error, bootstrap) != expected:
            await trio.sleep(0.05)


async def test_an_acl_added_through_zookeeper_reaches_every_broker(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 2, "--set", "authorizer=acl") as cluster:
        for broker in cluster.brokers.values():
            assert await trio.to_thread.run_sync(describe_cluster_error, broker.bootstrap) == \
                ErrorCode.cluster_authorization_failed
        flags = ("--principal", "User:ANONYMOUS", "--operation", "Describe", "--cluster", "--zookeeper", zk_chroot)
        status, out, err = await cli("acls", "add", *flags)
        assert status == 0, err
        for broker in cluster.brokers.values():
            await wait_for_answer(broker.bootstrap, ErrorCode.none)
        status, out, err = await cli("acls", "list", "--zookeeper", zk_chroot)
        assert status == 0 and "User:ANONYMOUS\tAllow\tDescribe\tCluster" in out, (out, err)
        status, _, err = await cli("acls", "remove", *flags)
        assert status == 0, err
        for broker in cluster.brokers.values():
            await wait_for_answer(broker.bootstrap, ErrorCode.cluster_authorization_failed)
