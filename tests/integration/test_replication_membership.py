"""Controlled shutdown and the membership value, with a running controller, on both ZooKeepers."""

from __future__ import annotations

import json

import trio

from trikafka.broker.replication.controller import Controller
from trikafka.broker.replication.membership import (
    controlled_shutdown, partitions_led_by, register_membership, tail_intact,
)
from trikafka.log.fs import read_boot_id
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

from tests.helpers.registry import register_broker


async def test_controlled_shutdown_moves_leadership_before_the_broker_stops(zk_harness, zk_clock):
    async with zk_harness.client() as b1, zk_harness.client() as b2:
        await register_broker(b1, 1)
        await register_broker(b2, 2)
        await create_topic(b1, "orders", TopicAssignment(((1, 2), (2, 1)), {}),
                           [PartitionState(1, 0, (1, 2), 0), PartitionState(2, 0, (2, 1), 0)])
        async with trio.open_nursery() as nursery:
            await nursery.start(Controller(b2, 2, reconcile_interval_s=0.2).run)
            assert await partitions_led_by(b1, 1) == [("orders", 0)]
            with trio.fail_after(20):
                assert await controlled_shutdown(b1, 1, timeout_s=15)
            state = (await read_state(b1, "orders", 0)).state
            assert (state.leader, state.leader_epoch, state.isr) == (2, 1, (2,))  # 1 stops fetching: out of the ISR
            assert await partitions_led_by(b1, 1) == []
            nursery.cancel_scope.cancel()


async def test_controlled_shutdown_gives_up_without_a_controller(zk_harness, zk_clock):
    async with zk_harness.client() as b1:
        await create_topic(b1, "orders", TopicAssignment(((1, 2),), {}), [PartitionState(1, 0, (1, 2), 0)])
        assert not await controlled_shutdown(b1, 1, timeout_s=0.5)


async def test_membership_value(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await register_membership(zk, 4, "h", 9092, intact=False)
        await register_membership(zk, 4, "h", 9092, intact=True)
        raw, stat = await zk.get("/trikafka/brokers/4")
        assert json.loads(raw) == {"version": 1, "host": "h", "port": 9092, "tail_intact": True}
        assert stat.ephemeral_owner == zk.session_id


def test_tail_intact_rules(tmp_path):
    assert tail_intact(clean_shutdown=True, boot_id_now=None, boot_id_at_last_start=None)
    assert tail_intact(clean_shutdown=False, boot_id_now="b1", boot_id_at_last_start="b1")  # process crash
    assert not tail_intact(clean_shutdown=False, boot_id_now="b2", boot_id_at_last_start="b1")  # reboot
    assert not tail_intact(clean_shutdown=False, boot_id_now=None, boot_id_at_last_start=None)
    boot = tmp_path / "boot_id"
    boot.write_text("abc-123\n")
    assert read_boot_id(str(boot)) == "abc-123"
    assert read_boot_id(str(tmp_path / "missing")) is None


async def test_a_membership_left_by_the_previous_session_is_replaced_not_written_over(zk_harness, zk_clock):
    """Written over, the old session's node would vanish when that session expires."""
    async with zk_harness.client() as now:
        async with zk_harness.client() as before:
            await register_membership(before, 4, "h", 9092, intact=True)
            await register_membership(now, 4, "h", 9092, intact=False)
            raw, stat = await now.get("/trikafka/brokers/4")
            assert stat.ephemeral_owner == now.session_id and json.loads(raw)["tail_intact"] is False
        raw, _stat = await now.get("/trikafka/brokers/4")  # the previous session ended: still there
        assert json.loads(raw)["tail_intact"] is False
