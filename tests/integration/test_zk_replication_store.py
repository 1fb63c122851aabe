"""The replication znodes on the fake and the real ZooKeeper: create, read, fenced writes, controller."""

from __future__ import annotations

import json

import pytest

from trikafka.zk import BadVersionError
from trikafka.zk.replication_store import (
    TopicExistsError, claim_controller, create_topic, read_assignment, read_state, replicated_topics, write_state,
)
from trikafka.zk.replication_values import PartitionState, TopicAssignment

ASSIGNMENT = TopicAssignment(((1, 2, 3), (2, 3, 1)), {"min.insync.replicas": "2"})
STATES = [PartitionState(1, 0, (1, 2, 3), 1), PartitionState(2, 0, (2, 3, 1), 1)]


async def test_create_read_and_refuse_a_second_create(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        assert await replicated_topics(zk) == []
        await create_topic(zk, "orders", ASSIGNMENT, STATES)
        assert await replicated_topics(zk) == ["orders"]
        assert await read_assignment(zk, "orders") == ASSIGNMENT
        assert await read_assignment(zk, "plain") is None
        assert (await read_state(zk, "orders", 1)).state == STATES[1]
        raw, _ = await zk.get("/trikafka/topics/orders/partitions/0/state")
        assert json.loads(raw) == {"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1, 2, 3],
                                   "controller_epoch": 1}
        with pytest.raises(TopicExistsError):
            await create_topic(zk, "orders", ASSIGNMENT, STATES)
        assert not await zk.exists("/brokers/topics/orders")  # 0.7 clients never see it


async def test_state_writes_are_fenced_by_version(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await create_topic(zk, "orders", ASSIGNMENT, STATES)
        read = await read_state(zk, "orders", 0)
        shrunk = PartitionState(1, 0, (1, 2), 1)
        new_version = await write_state(zk, "orders", 0, shrunk, read.version)
        assert new_version == read.version + 1
        with pytest.raises(BadVersionError):  # a stale leader's write loses
            await write_state(zk, "orders", 0, PartitionState(1, 0, (1,), 1), read.version)
        assert (await read_state(zk, "orders", 0)).state == shrunk


async def test_one_controller_and_its_epoch_grows(zk_harness, zk_clock):
    async with zk_harness.client() as first, zk_harness.client() as second:
        assert await claim_controller(first, 1) == 1
        assert await claim_controller(second, 2) is None
        raw, stat = await second.get("/trikafka/controller")
        assert json.loads(raw) == {"version": 1, "broker_id": 1, "controller_epoch": 1}
        assert stat.ephemeral_owner == first.session_id
    async with zk_harness.client() as third:
        assert await claim_controller(third, 3) == 2  # the first session ended; the epoch moved on
        assert (await third.get("/trikafka/controller_epoch"))[0] == b"2"
