"""ElectLeaders and Alter/ListPartitionReassignments (docs/protocol.md §16.4) on ZooKeeper brokers, through
kafka-python (which has all three) and confluent-kafka (which has ElectLeaders); while a broker is stopped,
the wire, sent to one broker that serves."""

from __future__ import annotations

import contextlib
import functools
import signal
from datetime import timedelta
from typing import Any

import trio
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError
from kio.schema.alter_partition_reassignments.v0 import request as alter
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as listing
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic
from tests.helpers.kafka_processes import KafkaCluster
from tests.helpers.kafka_wire import exchange
from trikafka.testing import running_kafka_broker

WAIT_S = 60.0
POLL_S = 0.1


async def _partition(bootstrap: str, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, ISR) of the topic's partition 0, as Metadata names them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = await trio.to_thread.run_sync(functools.partial(admin.list_topics, topic, timeout=10))
    found = metadata.topics[topic].partitions[0]
    return int(found.leader), list(found.replicas), sorted(found.isrs)


async def _until(bootstrap: str, topic: str, done: Any) -> tuple[int, list[int], list[int]]:
    with trio.fail_after(WAIT_S):
        while not done(seen := await _partition(bootstrap, topic)):
            await trio.sleep(POLL_S)  # polling a condition: the deadline fails the test
    return seen


def _python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))


def _alter_on(at: str, topic: str, replicas: list[int] | None) -> ErrorCode:
    """AlterPartitionReassignments of partition 0 sent to the broker at ``at`` (the wire: a client would
    refresh its metadata from any broker, the stopped one too)."""
    answer = exchange(at, 45, 0, alter.AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(timedelta(seconds=10)), topics=(alter.ReassignableTopic(
            name=TopicName(topic), partitions=(alter.ReassignablePartition(
                partition_index=i32(0), replicas=None if replicas is None else tuple(map(BrokerId, replicas))),)),)))
    assert answer.error_code == ErrorCode.none
    return answer.responses[0].partitions[0].error_code


def _listed_on(at: str) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments of every topic, from the broker at ``at``: (replicas, adding, removing)."""
    answer = exchange(at, 46, 0, listing.ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(timedelta(seconds=10)), topics=None))
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


async def test_a_reassignment_shows_its_progress_is_cancelled_and_finishes(zk_chroot, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        cluster = KafkaCluster(tmp_path, zk_chroot, stack)
        for broker_id in (1, 2, 3):
            await cluster.start(broker_id)
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "moved", replication_factor=2))
        _leader, old, _isr = await _until(bootstrap, "moved", lambda p: len(p[2]) == 2)
        (new,) = {1, 2, 3} - set(old)
        target = [old[1], new]
        at = cluster.brokers[old[0]].bootstrap
        # The new replica is stopped, so the move waits for it. Its registration outlives the stop by the
        # session timeout (1.5 s), and the move is asked at once: the new replica is accepted as live.
        cluster.brokers[new].child.signal(signal.SIGSTOP)
        try:
            assert await trio.to_thread.run_sync(_alter_on, at, "moved", target) == ErrorCode.none
            with trio.fail_after(WAIT_S):
                while not (listed := await trio.to_thread.run_sync(_listed_on, at)):
                    await trio.sleep(POLL_S)  # the answering broker's watch brings the znode
            assert listed == {("moved", 0): ([*old, new], [new], [old[0]])}
            assert await trio.to_thread.run_sync(_alter_on, at, "moved", None) == ErrorCode.none  # cancel
            await _until(cluster.bootstrap(without=(new,)), "moved", lambda p: p[1] == old)  # the list from before
            with trio.fail_after(WAIT_S):
                while await trio.to_thread.run_sync(_listed_on, at):
                    await trio.sleep(POLL_S)
            assert await trio.to_thread.run_sync(_alter_on, at, "moved", None) == ErrorCode.no_reassignment_in_progress
        finally:
            cluster.brokers[new].child.signal(signal.SIGCONT)

        admin = await trio.to_thread.run_sync(_python_admin, at)
        try:
            refused = await trio.to_thread.run_sync(admin.alter_partition_reassignments,
                                                    {TopicPartition("moved", 0): [new, new]})
            assert refused == {TopicPartition("moved", 0): InvalidReplicationAssignmentError}
            with trio.fail_after(WAIT_S):  # refused until the resumed broker registered again (a new session)
                while (started := await trio.to_thread.run_sync(admin.alter_partition_reassignments, {
                        TopicPartition("moved", 0): target})) != {TopicPartition("moved", 0): None}:
                    assert started == {TopicPartition("moved", 0): InvalidReplicationAssignmentError}
                    await trio.sleep(POLL_S)
            await _until(bootstrap, "moved", lambda p: sorted(p[1]) == sorted(target) and sorted(p[2]) == sorted(target))
            with trio.fail_after(WAIT_S):
                while listed := await trio.to_thread.run_sync(admin.list_partition_reassignments):
                    assert list(listed) == [TopicPartition("moved", 0)]  # until the controller finished
                    await trio.sleep(POLL_S)
            again = await trio.to_thread.run_sync(admin.alter_partition_reassignments,
                                                  {TopicPartition("moved", 0): None})
            assert again == {TopicPartition("moved", 0): NoReassignmentInProgressError}
        finally:
            admin.close()


async def test_elections_preferred_and_unclean(zk_chroot, tmp_path):
    """Preferred: not needed while the preferred replica leads.  Unclean: a partition whose only ISR member
    is gone gets the live replica outside the ISR as its leader, though the topic does not allow it."""
    async with contextlib.AsyncExitStack() as stack:
        cluster = KafkaCluster(tmp_path, zk_chroot, stack)
        for broker_id in (1, 2):
            await cluster.start(broker_id)
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(
            create_topic, bootstrap, "elected", replication_factor=2))
        leader, replicas, _isr = await _until(bootstrap, "elected", lambda p: len(p[2]) == 2 and p[0] >= 0)
        assert leader == replicas[0]
        confluent = AdminClient({"bootstrap.servers": bootstrap})
        future = confluent.elect_leaders(ElectionType.PREFERRED, [ConfluentPartition("elected", 0)])
        answered = await trio.to_thread.run_sync(future.result, CLIENT_TIMEOUT_S)
        assert "ELECTION_NOT_NEEDED" in str(answered[ConfluentPartition("elected", 0)])

        follower = replicas[1]
        await cluster.brokers[follower].kill()
        # The leader shrinks the ISR to itself (replica.lag.time.max.ms), then goes too: offline.
        await _until(cluster.bootstrap(without=(follower,)), "elected", lambda p: p[2] == [leader])
        await cluster.brokers[leader].kill()
        async with trio.open_nursery() as nursery:
            await cluster.restart_in(nursery, follower)
            at = cluster.brokers[follower].bootstrap
            assert (await _until(at, "elected", lambda p: p[0] == -1))[2] == [leader]  # clean rules: offline
            admin = await trio.to_thread.run_sync(_python_admin, at)
            try:
                with trio.fail_after(WAIT_S):
                    answer = await trio.to_thread.run_sync(functools.partial(
                        admin.elect_leaders, 1, {"elected": [0]}, timeout_ms=int(WAIT_S * 1000)))
            finally:
                admin.close()
            (result,) = answer.replica_election_results
            assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 0)]
            assert await _partition(at, "elected") == (follower, replicas, [follower])
            nursery.cancel_scope.cancel()


def test_a_standalone_brokers_partitions_need_no_election_and_do_not_move():
    with running_kafka_broker(num_partitions=1) as kafka:
        create_topic(kafka.bootstrap, "alone")
        admin = _python_admin(kafka.bootstrap)
        try:
            answer = admin.elect_leaders(0, {"alone": [0, 5]}, raise_errors=False)
            (result,) = answer.replica_election_results
            assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
                (0, ErrorCode.election_not_needed), (5, ErrorCode.unknown_topic_or_partition)]
            assert _alter_on(kafka.bootstrap, "alone", [0]) == ErrorCode.invalid_request
            assert admin.list_partition_reassignments() == {}
        finally:
            admin.close()
