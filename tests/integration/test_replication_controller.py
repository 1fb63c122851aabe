"""The controller on the fake and the real ZooKeeper: one winner, failover, elections from the ISR."""

from __future__ import annotations

import functools

import pytest
import trio

from tests.helpers.registry import WAIT_S, register_broker, wait_for_state
from trikafka.broker.replication.controller import Controller
from trikafka.broker.replication.membership import register_membership
from trikafka.zk import paths
from trikafka.zk.replication_store import create_topic, read_state, write_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment


async def test_leader_failover_elects_from_the_isr_and_bumps_the_epoch(zk_harness, zk_clock):
    async with zk_harness.client() as admin, zk_harness.client() as b2, zk_harness.client() as b3:
        await register_broker(b2, 2)
        await register_broker(b3, 3)
        async with trio.open_nursery() as nursery:
            async with zk_harness.client() as b1:
                await register_broker(b1, 1)  # brokers register before topics are created on them
                await create_topic(admin, "orders", TopicAssignment(((1, 2, 3),), {"min.insync.replicas": "2"}),
                                   [PartitionState(1, 0, (1, 2, 3), 0)])
                controller = Controller(b3, 3, reconcile_interval_s=0.2)
                await nursery.start(controller.run)
                other = Controller(b2, 2, reconcile_interval_s=0.2)
                await nursery.start(other.run)
                with trio.fail_after(WAIT_S):
                    while controller.stats.passes == 0:
                        await controller.reconciled.wait()
                assert other.stats.epoch is None  # one controller
                assert (await read_state(admin, "orders", 0)).state.leader == 1  # stable: nothing to do
            # broker 1's session is gone
            state = await wait_for_state(admin, lambda s: s.leader != 1)
            assert state == PartitionState(2, 1, (2, 3), controller.stats.epoch)
            nursery.cancel_scope.cancel()


async def test_controller_failover_and_offline_without_an_isr_candidate(zk_harness, zk_clock):
    async with zk_harness.client() as admin, zk_harness.client() as b2:
        await register_broker(b2, 2)
        async with trio.open_nursery() as nursery:
            async with zk_harness.client() as b1:
                await register_broker(b1, 1)
                await create_topic(admin, "orders", TopicAssignment(((1, 2),), {}), [PartitionState(1, 3, (1,), 0)])
                first = Controller(b1, 1, reconcile_interval_s=0.2)
                await nursery.start(first.run)
                with trio.fail_after(WAIT_S):
                    while first.stats.passes == 0:
                        await first.reconciled.wait()
                second = Controller(b2, 2, reconcile_interval_s=0.2)
                await nursery.start(second.run)
            # broker 1 (leader, sole ISR member, controller) is gone: 2 takes over as controller
            state = await wait_for_state(admin, lambda s: s.leader_epoch > 3)
            assert second.stats.epoch is not None and second.stats.epoch > first.stats.epoch
            assert state == PartitionState(-1, 4, (1,), second.stats.epoch)  # 2 is not in the ISR: offline
            nursery.cancel_scope.cancel()


async def test_a_leader_that_registered_after_its_state_was_written_is_elected_again(zk_harness, zk_clock):
    """A new controller that never saw the leader's old registration still sees it restarted: its
    registration is newer than the state's last write (it lost its in-memory leadership)."""
    async with zk_harness.client() as admin, zk_harness.client() as b2:
        await register_broker(b2, 2)
        async with zk_harness.client() as old_session:
            await register_broker(old_session, 1)
            await create_topic(admin, "orders", TopicAssignment(((1, 2),), {}), [PartitionState(1, 0, (1, 2), 0)])
        async with zk_harness.client() as b1, trio.open_nursery() as nursery:
            await register_broker(b1, 1)  # broker 1 came back with a new session before any controller looked
            controller = Controller(b2, 2, reconcile_interval_s=0.2)
            await nursery.start(controller.run)
            state = await wait_for_state(admin, lambda s: s.leader_epoch > 0)
            assert state == PartitionState(1, 1, (1, 2), controller.stats.epoch)  # the same broker, a new epoch
            nursery.cancel_scope.cancel()


async def test_a_broker_is_not_elected_before_it_says_whether_its_tail_survived(zk_harness, zk_clock):
    """``/brokers/ids/<id>`` comes a moment before ``/trikafka/brokers/<id>``: in that gap the broker
    may be one back from a reboot that lost its tail, so it is not elected until it says (§12.7)."""
    async with zk_harness.client() as admin, zk_harness.client() as b2:
        await register_broker(b2, 2)
        async with trio.open_nursery() as nursery:
            async with zk_harness.client() as b1:
                await register_broker(b1, 1)
                await create_topic(admin, "orders", TopicAssignment(((1, 3),), {}), [PartitionState(1, 0, (1, 3), 0)])
                controller = Controller(b2, 2, reconcile_interval_s=0.2)
                await nursery.start(controller.run)
            async with zk_harness.client() as b3:
                await b3.create("/brokers/ids/3", b"127.0.0.1-1:127.0.0.1:9003", ephemeral=True, makepath=True)
                offline = await wait_for_state(admin, lambda s: s.leader_epoch > 0)
                assert offline.leader == -1  # 3 is live and in the ISR, but has not said
                await register_membership(b3, 3, "127.0.0.1", 9003, intact=True)
                state = await wait_for_state(admin, lambda s: s.leader == 3)
                assert state.isr == (3,) and state.leader_epoch == offline.leader_epoch + 1
            nursery.cancel_scope.cancel()


async def test_an_unclean_election_asked_for_elects_a_replica_outside_the_isr_and_is_answered(zk_harness, zk_clock):
    """ElectLeaders' unclean request (§12.7): the controller elects as if the topic allowed it, once,
    and deletes the request; a partition that is not offline is left alone."""
    async with zk_harness.client() as admin, zk_harness.client() as b2, trio.open_nursery() as nursery:
        await register_broker(b2, 2)
        await create_topic(admin, "orders", TopicAssignment(((1, 2), (2, 1)), {}),
                           [PartitionState(-1, 4, (1,), 0), PartitionState(2, 0, (2,), 0)])
        controller = Controller(b2, 2, reconcile_interval_s=0.2)
        await nursery.start(controller.run)
        with trio.fail_after(WAIT_S):
            while controller.stats.passes == 0:
                await controller.reconciled.wait()
        assert (await read_state(admin, "orders", 0)).state.leader == -1  # unclean election is off
        for partition in (0, 1):
            await admin.create(paths.unclean_election("orders", partition), b"", makepath=True)
        state = await wait_for_state(admin, lambda s: s.leader != -1)
        assert state == PartitionState(2, 5, (2,), controller.stats.epoch)
        assert (await read_state(admin, "orders", 1)).state == PartitionState(2, 0, (2,), 0)  # it had a leader
        with trio.fail_after(WAIT_S):
            while await admin.children(paths.UNCLEAN_ELECTIONS):
                await controller.reconciled.wait()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("zk_backend", ["fake"], indirect=True)  # counts the fake server's reads: the fake only
async def test_a_pass_reads_no_state_or_topic_that_did_not_change(zk_harness, zk_clock):
    """The controller keeps the states and topic znodes current by watching them: a pass re-reads
    only the brokers (their registrations' czxids, which a watch may coalesce), not every partition."""
    reads: list[str] = []
    server_get = zk_harness.server.get

    def get(session_id, path, watch):
        reads.append(path)
        return server_get(session_id, path, watch)

    zk_harness.server.get = get
    async with zk_harness.client() as admin, zk_harness.client() as b1, trio.open_nursery() as nursery:
        await register_broker(b1, 1)
        await create_topic(admin, "orders", TopicAssignment(((1,), (1,), (1,)), {}),
                           [PartitionState(1, 0, (1,), 0)] * 3)
        controller = Controller(b1, 1, reconcile_interval_s=0.2)
        await nursery.start(controller.run)
        with trio.fail_after(WAIT_S):
            while controller.stats.passes < 2:
                await controller.reconciled.wait()
        reads.clear()
        with trio.fail_after(WAIT_S):
            while controller.stats.passes < 7:
                await controller.reconciled.wait()
        assert [path for path in reads if "/trikafka/topics" in path] == []
        nursery.cancel_scope.cancel()


async def test_the_controller_decides_from_a_state_a_leader_wrote_after_its_last_pass(zk_harness, zk_clock):
    """A leader shrank the ISR after the controller's last pass; when the leader goes, the controller
    elects from the ISR the leader wrote (broker 3), not the one it read before (broker 2 first)."""
    async with zk_harness.client() as admin, zk_harness.client() as b2, zk_harness.client() as b3:
        await register_broker(b2, 2)
        await register_broker(b3, 3)
        async with trio.open_nursery() as nursery:
            async with zk_harness.client() as b1:
                await register_broker(b1, 1)
                await create_topic(admin, "orders", TopicAssignment(((1, 2, 3),), {}),
                                   [PartitionState(1, 0, (1, 2, 3), 0)])
                controller = Controller(b3, 3, reconcile_interval_s=0.2)
                await nursery.start(controller.run)
                with trio.fail_after(WAIT_S):
                    while controller.stats.passes == 0:
                        await controller.reconciled.wait()
                current = await read_state(admin, "orders", 0)
                await write_state(b1, "orders", 0, PartitionState(1, 0, (1, 3), current.state.controller_epoch),
                                  current.version)
                with trio.fail_after(WAIT_S):  # a pass after the write, on the timer or a watch
                    passes = controller.stats.passes
                    while controller.stats.passes == passes:
                        await controller.reconciled.wait()
            state = await wait_for_state(admin, lambda s: s.leader != 1)
            assert state == PartitionState(3, 1, (3,), controller.stats.epoch)
            nursery.cancel_scope.cancel()
