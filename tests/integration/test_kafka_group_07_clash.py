"""A group id used by 0.7 consumers and by Kafka-protocol consumers (docs/protocol.md §17.7): in
ZooKeeper mode the coordinator refuses JoinGroup for a group with 0.7 consumers registered."""

from __future__ import annotations

import datetime
import functools
import time

import trio
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.static.primitive import i8

from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange

WAIT_S = 60.0


def _join(bootstrap: str, group: str) -> tuple[ErrorCode, str | None]:
    """JoinGroup v4+ with an empty member id, to the coordinator (one broker: itself); its error and
    member id, once the coordinator has loaded the group's partition."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        response = exchange(bootstrap, 11, 7, JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
        if response.error_code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available):
            return response.error_code, response.member_id
    raise AssertionError(f"the coordinator of {group!r} did not load within {WAIT_S} s")


async def test_join_group_of_a_group_with_07_consumers_is_refused(zk_chroot, zk_admin, tmp_path):
    chroot = "/" + zk_chroot.split("/", 1)[1]
    zk_admin.create(f"{chroot}/consumers/shared/ids/old-consumer-1", b'{"clicks": 1}', makepath=True)
    flags = ("--set", "offsets.topic.num.partitions=1")
    async with kafka_cluster(tmp_path, zk_chroot, 1, *flags) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(
            exchange, bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("shared",))))
        assert await trio.to_thread.run_sync(_join, bootstrap, "shared") == (ErrorCode.inconsistent_group_protocol,
                                                                            "")
        error, member_id = await trio.to_thread.run_sync(_join, bootstrap, "kafka-only")
        assert error == ErrorCode.member_id_required and member_id
