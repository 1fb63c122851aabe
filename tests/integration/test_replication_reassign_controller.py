"""The controller's part of a reassignment (docs/protocol.md §12.12.3) on the fake and the real ZooKeeper:
it announces the longer replica list with a new epoch, waits for the new replicas to be in sync, then
moves leadership off a removed leader, drops the removed replicas and writes the target list."""

from __future__ import annotations

import trio

from tests.helpers.registry import register_broker, wait_for_state
from trikafka.broker.replication.assignment import plan_reassignment
from trikafka.broker.replication.controller import Controller
from trikafka.zk.replication_store import (
    create_topic, read_assignment, read_assignment_versioned, read_state, write_assignment, write_state,
)
from trikafka.zk.replication_values import PartitionState, TopicAssignment


async def test_a_reassignment_is_announced_then_finished_once_in_sync(zk_harness, zk_clock):
    async with zk_harness.client() as admin, zk_harness.client() as brokers:
        for broker_id in (1, 2, 3, 4):
            await register_broker(brokers, broker_id)
        await create_topic(admin, "orders", TopicAssignment(((1, 2, 3),), {}), [PartitionState(1, 0, (1, 2, 3), 0)])
        async with trio.open_nursery() as nursery:
            controller = Controller(brokers, 4, reconcile_interval_s=0.2)
            await nursery.start(controller.run)
            assignment, version = await read_assignment_versioned(admin, "orders")
            await write_assignment(admin, "orders", plan_reassignment(assignment, 0, (4, 2, 3), {1, 2, 3, 4}), version)

            announced = await wait_for_state(admin, lambda s: s.leader_epoch == 1)
            assert announced == PartitionState(1, 1, (1, 2, 3), controller.stats.epoch)  # same leader and ISR
            with trio.fail_after(20):  # a few passes later nothing more happened: 4 is not in sync yet
                start = controller.stats.passes
                while controller.stats.passes < start + 3:
                    await controller.reconciled.wait()
            assert (await read_state(admin, "orders", 0)).state == announced

            # the leader admits 4 into the ISR (what the replica manager does once 4 caught up)
            current = await read_state(admin, "orders", 0)
            await write_state(admin, "orders", 0, PartitionState(1, 1, (1, 2, 3, 4), announced.controller_epoch),
                              current.version)
            final = await wait_for_state(admin, lambda s: s.leader_epoch >= 2)
            assert final == PartitionState(4, 2, (2, 3, 4), controller.stats.epoch)  # 1 left: the first target leads
            with trio.fail_after(20):
                while (await read_assignment(admin, "orders")).targets:
                    await controller.reconciled.wait()
            assert await read_assignment(admin, "orders") == TopicAssignment(((4, 2, 3),), {})
            nursery.cancel_scope.cancel()


async def test_a_state_naming_a_removed_replica_is_pruned(zk_harness, zk_clock):
    async with zk_harness.client() as admin, zk_harness.client() as brokers:
        for broker_id in (1, 2, 3):
            await register_broker(brokers, broker_id)
        # a crash between the two writes of a finish, and a leader that re-admitted removed replica 1
        await create_topic(admin, "orders", TopicAssignment(((2, 3),), {}), [PartitionState(1, 4, (1, 2, 3), 0)])
        async with trio.open_nursery() as nursery:
            controller = Controller(brokers, 3, reconcile_interval_s=0.2)
            await nursery.start(controller.run)
            state = await wait_for_state(admin, lambda s: s.leader_epoch > 4)
            assert state == PartitionState(2, 5, (2, 3), controller.stats.epoch)
            nursery.cancel_scope.cancel()
