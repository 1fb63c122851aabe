"""``trikafka topics create|describe|alter|reassign`` and ``trikafka cluster`` as processes on the real
ZooKeeper (docs/protocol.md §12.12); the brokers here are registrations only (no broker reads them)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import cli
from trikafka.zk import KazooZooKeeperClient
from trikafka.zk.replication_store import read_assignment, read_state, write_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment
from trikafka.zk.topic_config_store import read_topic_settings

pytestmark = pytest.mark.zookeeper


async def register(zk, *broker_ids: int) -> None:
    for broker_id in broker_ids:
        await zk.create(f"/brokers/ids/{broker_id}", f"h-1:127.0.0.1:{9000 + broker_id}".encode(),
                        ephemeral=True, makepath=True)


async def test_create_describe_alter_and_refusals(zk_chroot, no_kazoo_thread_leaks):
    zk_flag = ("--zookeeper", zk_chroot)
    async with KazooZooKeeperClient(zk_chroot) as zk:
        await register(zk, 3, 1, 2)
        await zk.create("/trikafka/controller_epoch", b"7", makepath=True)
        status, out, err = await cli("topics", "create", "orders", "--partitions", "3", "--replication-factor", "2",
                                     "--config", "min.insync.replicas=2", *zk_flag)
        assert status == 0, err
        assert "created with 3 partitions, replication factor 2" in out
        assignment = await read_assignment(zk, "orders")
        assert assignment == TopicAssignment(((1, 2), (2, 3), (3, 1)), {"min.insync.replicas": "2"})
        assert (await read_state(zk, "orders", 2)).state == PartitionState(3, 0, (3, 1), 7)
        assert not await zk.exists("/brokers/topics/orders")  # 0.7 clients never see it

        status, out, err = await cli("topics", "describe", "orders", "--json", *zk_flag)
        assert status == 0, err
        assert json.loads(out) == {"topic": "orders", "partitions": [
            {"partition": 0, "leader": 1, "leader_epoch": 0, "replicas": [1, 2], "isr": [1, 2]},
            {"partition": 1, "leader": 2, "leader_epoch": 0, "replicas": [2, 3], "isr": [2, 3]},
            {"partition": 2, "leader": 3, "leader_epoch": 0, "replicas": [3, 1], "isr": [3, 1]}]}

        # the same create again is fine; another shape is not
        assert (await cli("topics", "create", "orders", "--partitions", "3", "--replication-factor", "2",
                          "--config", "min.insync.replicas=2", *zk_flag))[0] == 0
        for args, status_wanted, message in [
            (("--partitions", "3", "--replication-factor", "3"), 1, "exists with another shape"),
            (("--partitions", "1", "--replication-factor", "4"), 2, "needs 4 live brokers, but 3 are registered"),
            (("--partitions", "1", "--replication-factor", "1", "--config", "colour=blue"), 2,
             "unknown topic config key 'colour'"),
            (("--partitions", "1", "--config", "min.insync.replicas=2"), 2, "replicated topics only"),
            # Through one broker (CREATE_TOPIC carries the settings): checked before any connection.
            (("--partitions", "1", "--config", "colour=blue", "--broker", "127.0.0.1:1"), 2,
             "unknown topic config key 'colour'"),
        ]:
            name = "orders" if "exists" in message else "fresh"
            zk_args = () if "--broker" in args else zk_flag
            status, out, err = await cli("topics", "create", name, *args, *zk_args)
            assert (status, err.count("\n")) == (status_wanted, 1), err
            assert message in err
        assert not await zk.exists("/trikafka/topics/fresh")
        # ZooKeeper's actions name their ZooKeeper: a broker address is refused at once, not ignored.
        for action in (("alter", "orders", "--config", "retention.ms=1"), ("describe", "orders"),
                       ("reassign", "orders", "--partition", "0", "--replicas", "1,2")):
            status, out, err = await cli("topics", *action, "--broker", "127.0.0.1:1")
            assert (status, err.count("\n")) == (2, 1), err
            assert "give --zookeeper HOST:PORT" in err
        status, _out, err = await cli("topics", "create", "orders", "--partitions", "3", "--config",
                                      "cleanup.policy=compact", *zk_flag)
        assert status == 1 and "is a replicated topic" in err
        assert not await zk.exists("/trikafka/config/topics/orders")

        # unclean election: allowed, loudly
        status, out, err = await cli("topics", "create", "risky", "--partitions", "1", "--replication-factor", "1",
                                     "--config", "unclean.leader.election.enable=true", *zk_flag)
        assert status == 0 and "committed (acknowledged) messages may be LOST" in err

        # alter: versioned, checked, warned
        status, out, err = await cli("topics", "alter", "orders", "--config", "min.insync.replicas=1",
                                     "--config", "cleanup.policy=compact", *zk_flag)
        assert status == 0, err
        assert (await read_assignment(zk, "orders")).config == {"min.insync.replicas": "1",
                                                                "cleanup.policy": "compact"}
        status, out, err = await cli("topics", "alter", "orders", "--delete-config", "cleanup.policy",
                                     "--config", "unclean.leader.election.enable=true", *zk_flag)
        assert status == 0 and "LOST" in err
        assert (await read_assignment(zk, "orders")).config == {"min.insync.replicas": "1",
                                                                "unclean.leader.election.enable": "true"}
        status, _out, err = await cli("topics", "alter", "orders", "--config", "min.insync.replicas=zero", *zk_flag)
        assert status == 2 and err.count("\n") == 1
        # a plain topic's settings: created on alter, refused replication keys
        assert (await cli("topics", "alter", "plain", "--config", "retention.ms=60000", *zk_flag))[0] == 0
        assert (await read_topic_settings(zk, "plain")).config == {"retention.ms": "60000"}
        status, _out, err = await cli("topics", "alter", "plain", "--config", "min.insync.replicas=2", *zk_flag)
        assert status == 2 and "replicated topics only" in err
        status, out, _err = await cli("topics", "describe", "plain", "--json", *zk_flag)
        assert json.loads(out) == {"topic": "plain", "replicated": False, "config": {"retention.ms": "60000"}}
        status, _out, err = await cli("topics", "describe", "nothing", *zk_flag)
        assert status == 1 and "no topic 'nothing'" in err


async def test_reassign_and_the_cluster_view(zk_chroot, no_kazoo_thread_leaks):
    zk_flag = ("--zookeeper", zk_chroot)
    async with KazooZooKeeperClient(zk_chroot) as zk:
        await register(zk, 1, 2, 3, 4)
        assert (await cli("topics", "create", "t", "--partitions", "2", "--replication-factor", "3", *zk_flag))[0] == 0
        status, out, err = await cli("topics", "reassign", "t", "--partition", "0", "--replicas", "2,3,4", *zk_flag)
        assert status == 0, err
        assert "moving from 1,2,3 to 2,3,4" in out
        assignment = await read_assignment(zk, "t")
        assert assignment.replicas[0] == (1, 2, 3, 4) and assignment.targets == {0: (2, 3, 4)}
        status, _out, err = await cli("topics", "reassign", "t", "--partition", "0", "--replicas", "1,2", *zk_flag)
        assert status == 2 and "already moving to 2,3,4" in err
        status, _out, err = await cli("topics", "reassign", "t", "--partition", "1", "--replicas", "1,9", *zk_flag)
        assert status == 2 and "9 not registered" in err
        _status, out, _err = await cli("topics", "describe", "t", *zk_flag)
        assert "reassigning to 2,3,4" in out
        assert "2 partitions, replication factor 3\n" in out  # the move's target counts, not old and new together

        # one partition loses an in-sync replica, the other its leader
        state = await read_state(zk, "t", 0)
        await write_state(zk, "t", 0, PartitionState(1, 1, (1, 2), 0), state.version)
        state = await read_state(zk, "t", 1)
        await write_state(zk, "t", 1, PartitionState(-1, 1, (2,), 0), state.version)
        await zk.create("/trikafka/brokers/2", b'{"version":1,"host":"h","port":1,"tail_intact":false}',
                        ephemeral=True, makepath=True)
        await zk.create("/trikafka/controller", b'{"version":1,"broker_id":3,"controller_epoch":5}', ephemeral=True)
        status, out, err = await cli("cluster", "--json", *zk_flag)
        assert status == 0, err
        view = json.loads(out)
        assert [b["id"] for b in view["brokers"]] == [1, 2, 3, 4]
        assert view["brokers"][1] == {"id": 2, "host": "127.0.0.1", "port": 9002, "tail_intact": False}
        assert view["brokers"][0]["tail_intact"] is None
        assert view["controller"] == {"broker_id": 3, "controller_epoch": 5}
        assert view["under_replicated"] == [{"topic": "t", "partition": 0, "replicas": [1, 2, 3, 4], "isr": [1, 2]}]
        assert view["offline"] == [{"topic": "t", "partition": 1, "replicas": [2, 3, 4], "isr": [2]}]
        status, out, _err = await cli("cluster", *zk_flag)
        assert status == 0 and "controller: broker 3, epoch 5" in out and "t-1\treplicas 2,3,4\tisr 2" in out
        assert (await cli("topics", "create", "u", "--partitions", "2", "--replication-factor", "3", *zk_flag))[0] == 0
        assert (await cli("topics", "reassign", "u", "--partition", "1", "--replicas", "1,2", *zk_flag))[0] == 0
        _status, out, _err = await cli("topics", "describe", "u", *zk_flag)
        assert "2 partitions, replication factors 2 to 3\n" in out
