"""A group id used by 0.7 consumers and by Kafka-protocol consumers (docs/protocol.md §17.7): in
ZooKeeper mode the coordinator refuses JoinGroup for a group with 0.7 consumers registered, and
trikafka's 0.7 group consumer refuses a group that has Kafka members, told by the coordinator's
ephemeral ``/trikafka/kafka-groups/<g>``."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import trio
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.static.primitive import i8, i32, i32Timedelta

import pytest
from kazoo.client import KazooClient

from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange
from trikafka.group import GroupConsumer, KafkaGroupClash
from trikafka.zk import KazooZooKeeperClient

WAIT_S = 60.0
SESSION_S = 6  # group.min.session.timeout.ms: the member below expires this long after its join


def _wait_mark(zk_admin: KazooClient, path: str, present: bool) -> bytes | None:
    """Block until ``path`` exists (``present``) or not, woken by a ZooKeeper watch; its value."""
    changed = threading.Event()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        changed.clear()
        stat = zk_admin.exists(path, watch=lambda _event: changed.set())
        if (stat is not None) == present:
            return zk_admin.get(path)[0] if present else None
        changed.wait(deadline - time.monotonic())
    raise AssertionError(f"{path} still {'absent' if present else 'present'} after {WAIT_S} s")


def _find_coordinator(bootstrap: str, group: str) -> None:
    """FindCoordinator: the first one creates ``__consumer_offsets`` (§17.1)."""
    exchange(bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))


def _join(bootstrap: str, group: str, member_id: str = "") -> tuple[ErrorCode, str | None]:
    """JoinGroup v7 as ``member_id`` (empty: a new member), to the coordinator (one broker: itself);
    its error and member id, once the coordinator has loaded the group's partition."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        response = exchange(bootstrap, 11, 7, JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=SESSION_S),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
        # Until the new __consumer_offsets partition has its leader, this broker is not yet its coordinator.
        if response.error_code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                       ErrorCode.not_coordinator):
            return response.error_code, response.member_id
    raise AssertionError(f"the coordinator of {group!r} did not load within {WAIT_S} s")


def _consumer_join(bootstrap: str, group: str) -> Any:
    """A ConsumerGroupHeartbeat join (epoch 0, §17.9) to the coordinator; its answer."""
    return exchange(bootstrap, 68, 1, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="m1", member_epoch=i32(0), instance_id=None, rack_id=None,
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), subscribed_topic_names=("t",),
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=None))


async def test_join_group_of_a_group_with_07_consumers_is_refused(zk_chroot, zk_admin, tmp_path):
    chroot = "/" + zk_chroot.split("/", 1)[1]
    zk_admin.create(f"{chroot}/consumers/shared/ids/old-consumer-1", b'{"clicks": 1}', makepath=True)
    flags = ("--set", "offsets.topic.num.partitions=1")
    async with kafka_cluster(tmp_path, zk_chroot, 1, *flags) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(_find_coordinator, bootstrap, "shared")
        assert await trio.to_thread.run_sync(_join, bootstrap, "shared") == (ErrorCode.inconsistent_group_protocol,
                                                                            "")
        error, member_id = await trio.to_thread.run_sync(_join, bootstrap, "kafka-only")
        assert error == ErrorCode.member_id_required and member_id
        # Kafka 4's consumer protocol (§17.9) is refused the same way.
        refused = await trio.to_thread.run_sync(_consumer_join, bootstrap, "shared")
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.inconsistent_group_protocol, "group shared has 0.7 consumers registered in ZooKeeper")


async def test_07_consumer_refuses_a_group_with_kafka_members(zk_chroot, zk_admin, tmp_path):
    chroot = "/" + zk_chroot.split("/", 1)[1]
    mark = f"{chroot}/trikafka/kafka-groups/held"
    flags = ("--set", "offsets.topic.num.partitions=1", "--set", "group.initial.rebalance.delay.ms=0")
    async with kafka_cluster(tmp_path, zk_chroot, 1, *flags) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(_find_coordinator, bootstrap, "held")
        error, member_id = await trio.to_thread.run_sync(_join, bootstrap, "held")
        assert error == ErrorCode.member_id_required and member_id
        assert await trio.to_thread.run_sync(_join, bootstrap, "held", member_id) == (ErrorCode.none, member_id)
        value = await trio.to_thread.run_sync(_wait_mark, zk_admin, mark, True)
        assert value == b'{"broker_id":1,"version":1}'

        async with KazooZooKeeperClient(zk_chroot) as zk:
            with pytest.raises(KafkaGroupClash, match="group held is a Kafka consumer group coordinated by broker "
                                                      "1; a 0.7 consumer cannot join it"):
                async with GroupConsumer(zk, "held", {"t": 1}):
                    pass
            assert not zk_admin.exists(f"{chroot}/consumers/held/ids") or not zk_admin.get_children(
                f"{chroot}/consumers/held/ids")

            # The member sends no heartbeat: its session ends, the group is empty, the mark goes.
            await trio.to_thread.run_sync(_wait_mark, zk_admin, mark, False)
            async with GroupConsumer(zk, "held", {"t": 1}) as consumer:
                assert zk_admin.get_children(f"{chroot}/consumers/held/ids") == [consumer.consumer_id]
