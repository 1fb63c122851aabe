"""``KafkaAdmin``'s group calls against scripted answers of each broker (docs/protocol.md §17.8)."""

from __future__ import annotations

import datetime

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from trikafka.client.kafka import KafkaAdmin, KafkaClient, KafkaResponseError, schema
from trikafka.client.kafka import admin as admin_module
from trikafka.client.kafka import coordinators as coordinators_module
from trikafka.client.kafka.client import BrokerNode, ClusterMetadata
from trikafka.client.kafka.connection import UnsupportedApi
from trikafka.client.kafka.group_offsets import TopicPartition
from trikafka.kafka.consumer_protocol import Assignment, encode_assignment

VERSIONS = {"FIND_COORDINATOR": (10, 4), "LIST_GROUPS": (16, 4), "DESCRIBE_GROUPS": (15, 5),
            "OFFSET_FETCH": (9, 8), "DELETE_GROUPS": (42, 2)}


class ScriptedBroker:
    """One broker's connection: answers by api name from ``answers`` (values, or a function of the request)."""

    def __init__(self, node_id: int, answers: dict[str, object]):
        self.node_id = node_id
        self.answers = answers
        self.asked: list[tuple[str, dict]] = []
        self.closed = False

    async def request(self, api: str, *, extra_wait_s: float = 0.0, **values: object) -> object:
        self.asked.append((api, values))
        if api not in VERSIONS:  # as a connection to a broker that does not serve the api
            raise UnsupportedApi(api)
        key, version = VERSIONS[api]
        found = self.answers[api]
        body = found(values) if callable(found) else found
        return schema.entity(load_response_schema(key, version), throttle_time=datetime.timedelta(0), **body)


@pytest.fixture
def brokers(monkeypatch: pytest.MonkeyPatch) -> dict[int, ScriptedBroker]:
    """Brokers 1 and 2; broker 2 coordinates every group."""
    coordinator = {"coordinators": [{"key": "g", "node_id": 2, "host": "b2", "port": 2, "error_code": 0,
                                     "error_message": None}]}
    scripted = {1: ScriptedBroker(1, {"FIND_COORDINATOR": coordinator}),
                2: ScriptedBroker(2, {"FIND_COORDINATOR": coordinator})}
    for module in (admin_module, coordinators_module):  # the scripted brokers answer by api name
        monkeypatch.setattr(module, "group_api", lambda name: name)

    async def refresh(self: KafkaClient, topics: object = ()) -> ClusterMetadata:
        self.metadata = ClusterMetadata("c", 1, {1: BrokerNode(1, "b1", 1), 2: BrokerNode(2, "b2", 2)}, {})
        return self.metadata

    async def any_connection(self: KafkaClient) -> ScriptedBroker:
        return scripted[1]

    async def node_connection(self: KafkaClient, node_id: int, lane: str = "") -> ScriptedBroker:
        return scripted[node_id]

    async def connection_to(self: KafkaClient, host: str, port: int, lane: str = "") -> ScriptedBroker:
        return scripted[port]
    monkeypatch.setattr(KafkaClient, "refresh_metadata", refresh)
    monkeypatch.setattr(KafkaClient, "any_connection", any_connection)
    monkeypatch.setattr(KafkaClient, "node_connection", node_connection)
    monkeypatch.setattr(KafkaClient, "connection_to", connection_to)
    return scripted


def _listed(*groups: tuple[str, str]) -> dict:
    return {"error_code": 0, "groups": [{"group_id": g, "protocol_type": "consumer", "group_state": s}
                                        for g, s in groups]}


async def test_list_groups_asks_every_broker(brokers: dict[int, ScriptedBroker]) -> None:
    brokers[1].answers["LIST_GROUPS"] = _listed(("b", "Stable"))
    brokers[2].answers["LIST_GROUPS"] = _listed(("a", "Empty"))
    listed = await KafkaAdmin(KafkaClient("h:1")).list_groups()
    assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [("a", "consumer", "Empty"),
                                                                        ("b", "consumer", "Stable")]


async def test_describe_groups_decodes_consumer_assignments_at_the_coordinator(
        brokers: dict[int, ScriptedBroker]) -> None:
    member = {"member_id": "m-1", "group_instance_id": "i-1", "client_id": "app", "client_host": "/10.0.0.1",
              "member_metadata": b"", "member_assignment": encode_assignment(Assignment({"t": (0, 2)}))}
    broken = {**member, "member_id": "m-2", "group_instance_id": None, "member_assignment": b"\x00\x01\x00"}
    brokers[2].answers["DESCRIBE_GROUPS"] = {"groups": [{
        "error_code": 0, "group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
        "protocol_data": "range", "members": [member, broken], "authorized_operations": -2147483648}]}
    described = (await KafkaAdmin(KafkaClient("h:1")).describe_groups(["g"]))["g"]
    assert (described.state, described.protocol_type, described.protocol) == ("Stable", "consumer", "range")
    first, second = described.members
    assert (first.member_id, first.group_instance_id, first.client_id, first.client_host) == (
        "m-1", "i-1", "app", "/10.0.0.1")
    assert first.assignment == Assignment({"t": (0, 2)})
    assert second.assignment is None  # bytes that do not decode
    assert [api for api, _ in brokers[1].asked] == ["FIND_COORDINATOR"]


async def test_describe_groups_raises_the_groups_error(brokers: dict[int, ScriptedBroker]) -> None:
    brokers[2].answers["DESCRIBE_GROUPS"] = {"groups": [{
        "error_code": ErrorCode.group_authorization_failed, "group_id": "g", "group_state": "",
        "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": 0}]}
    with pytest.raises(KafkaResponseError) as raised:
        await KafkaAdmin(KafkaClient("h:1")).describe_groups(["g"])
    assert raised.value.error_code == ErrorCode.group_authorization_failed


async def test_list_group_offsets_reads_the_v8_group_layout(brokers: dict[int, ScriptedBroker]) -> None:
    brokers[2].answers["OFFSET_FETCH"] = {"groups": [{"group_id": "g", "error_code": 0, "topics": [{
        "name": "t", "partitions": [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                                     "metadata": "", "error_code": 0} for p, o in ((0, 7), (1, -1))]}]}]}
    offsets = await KafkaAdmin(KafkaClient("h:1")).list_group_offsets("g")
    assert offsets == {TopicPartition("t", 0): 7, TopicPartition("t", 1): -1}
    (api, values), = brokers[2].asked
    assert api == "OFFSET_FETCH" and values["groups"] == [{"group_id": "g", "topics": None}]


async def test_delete_groups_answers_per_group(brokers: dict[int, ScriptedBroker]) -> None:
    brokers[2].answers["DELETE_GROUPS"] = lambda values: {"results": [
        {"group_id": g, "error_code": ErrorCode.non_empty_group if g == "busy" else 0}
        for g in values["groups_names"]]}
    results = await KafkaAdmin(KafkaClient("h:1")).delete_groups(["idle", "busy"])
    assert results["idle"] is None
    assert results["busy"] is not None and results["busy"].error_code == ErrorCode.non_empty_group


async def test_a_coordinator_not_available_is_asked_again(brokers: dict[int, ScriptedBroker]) -> None:
    answers = iter([ErrorCode.coordinator_not_available, ErrorCode.none])
    brokers[1].answers["FIND_COORDINATOR"] = lambda values: {"coordinators": [{
        "key": "g", "node_id": 2, "host": "b2", "port": 2, "error_code": next(answers), "error_message": None}]}
    brokers[2].answers["OFFSET_FETCH"] = {"groups": [{"group_id": "g", "error_code": 0, "topics": []}]}
    client = KafkaClient("h:1", retry_backoff_s=0.0)
    assert await KafkaAdmin(client).list_group_offsets("g") == {}
    assert [api for api, _ in brokers[1].asked] == ["FIND_COORDINATOR", "FIND_COORDINATOR"]
