"""One set of values per group request builds and encodes at every version a broker may pick (§17.8).

The client sends the version its connection negotiates, so the values of
``GroupMembership``, ``group_offsets`` and ``KafkaAdmin`` must fill each
version's ``kio`` class.  OffsetCommit and OffsetFetch stop at v9: v10 names
topics by id, which this client does not.
"""

from __future__ import annotations

import io

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer

from trikafka.client.kafka import schema
from trikafka.client.kafka.group_offsets import TopicPartition, commit_values, fetch_values
from trikafka.client.kafka.membership import GroupMembership, Phase, find_coordinator_values
from trikafka.kafka.consumer_protocol import Assignment, Subscription, encode_subscription


def _membership_values(phase: Phase) -> dict[str, object]:
    membership = GroupMembership("g", [("range", encode_subscription(Subscription(("t",))))],
                                 group_instance_id="i-1", member_id="m-1", generation_id=3, protocol_name="range")
    membership.phase = phase
    if phase is Phase.SYNC:
        membership.phase = Phase.ASSIGN
        membership.assign({"m-1": Assignment({"t": (0,)})})
    request = membership.poll(0.0)
    assert request is not None
    return dict(request.values)


CASES = {  # api key, its versions, the values the client sends
    "FindCoordinator": (10, range(0, 7), find_coordinator_values("g")),
    "JoinGroup": (11, range(0, 10), _membership_values(Phase.JOIN)),
    "SyncGroup": (14, range(0, 6), _membership_values(Phase.SYNC)),
    "Heartbeat": (12, range(0, 5), _membership_values(Phase.STABLE)),
    "LeaveGroup": (13, range(0, 6), _membership_values(Phase.LEAVE)),
    "OffsetCommit": (8, range(2, 10), commit_values("g", 3, "m-1", "i-1", {TopicPartition("t", 0): 5})),
    "OffsetFetch": (9, range(1, 10), fetch_values("g", [TopicPartition("t", 0)])),
    "OffsetFetch all": (9, range(2, 10), fetch_values("g", None)),
    "ListGroups": (16, range(0, 6), {"states_filter": (), "types_filter": ()}),
    "DescribeGroups": (15, range(0, 7), {"groups": ("g",), "include_authorized_operations": False}),
    "DeleteGroups": (42, range(0, 3), {"groups_names": ("g",)}),
}


@pytest.mark.parametrize(("api_key", "version", "values"), [
    pytest.param(key, version, values, id=f"{name}-v{version}")
    for name, (key, versions, values) in CASES.items() for version in versions])
def test_values_build_and_encode(api_key: int, version: int, values: dict[str, object]) -> None:
    cls = load_request_schema(api_key, version)
    body = schema.entity(cls, **values)
    entity_writer(cls)(io.BytesIO(), body)
