"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (docs/protocol.md §17.5, §17.6), through
kafka-python's admin client and raw requests, on a group of librdkafka consumers."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (OffsetDeleteRequest, OffsetDeleteRequestPartition,
                                                 OffsetDeleteRequestTopic)
from kio.static.primitive import i32

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_groups import ConfluentGroup, committed, produce
from tests.helpers.kafka_wire import exchange
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

PARTITIONS = 4
TIMEOUT_S = 30


def _listed(admin: AdminClient) -> dict[str, str]:
    found = admin.list_consumer_groups().result(TIMEOUT_S)
    return {g.group_id: g.state.name for g in found.valid}


def _describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)


def _delete_error(admin: AdminClient, group: str) -> int:
    try:
        admin.delete_consumer_groups([group])[group].result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=3) as running:
        create_topic(running.bootstrap, "watched", partitions=PARTITIONS)
        create_topic(running.bootstrap, "other", partitions=1)
        produce(running.bootstrap, "watched", PARTITIONS, 10)
        yield running


def _offset_delete(bootstrap: str, group: str, topic: str, partitions: range) -> tuple[ErrorCode, dict[int, ErrorCode]]:
    response = exchange(bootstrap, 47, 0, OffsetDeleteRequest(group_id=group, topics=(OffsetDeleteRequestTopic(
        name=topic, partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in partitions)),)))
    return response.error_code, {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def test_a_live_group_is_listed_described_and_protected(kafka):
    group = ConfluentGroup(kafka.bootstrap, "admin-live", "watched")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    try:
        for name in ("a", "b"):
            group.add(name)
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 2) and len(group.delivered()) == 40)
        for name in ("a", "b"):
            group.commit(name)
        assert _listed(admin)["admin-live"] == "STABLE"
        described = _describe(admin, "admin-live")
        assert described.state.name == "STABLE" and described.partition_assignor == "range"
        assert len(described.members) == 2
        assert {m.host for m in described.members} == {"/127.0.0.1"}
        assert sorted(tp.partition for m in described.members
                      for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
        assert _delete_error(admin, "admin-live") == ErrorCode.non_empty_group
        error, parts = _offset_delete(kafka.bootstrap, "admin-live", "watched", range(2))
        assert error == ErrorCode.none and set(parts.values()) == {ErrorCode.group_subscribed_to_topic}
    finally:
        group.close_all()
    assert committed(kafka.bootstrap, "admin-live", "watched", PARTITIONS) == {p: 10 for p in range(PARTITIONS)}


def test_an_empty_groups_offsets_and_the_group_can_be_deleted(kafka):
    group = ConfluentGroup(kafka.bootstrap, "admin-gone", "watched")
    group.add("a")
    try:
        assert group.poll_until(lambda: len(group.delivered()) == 40)
    finally:
        group.close_all()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    described = _describe(admin, "admin-gone")
    assert described.state.name == "EMPTY" and not described.members
    error, parts = _offset_delete(kafka.bootstrap, "admin-gone", "watched", range(2))
    assert error == ErrorCode.none and set(parts.values()) == {ErrorCode.none}
    assert committed(kafka.bootstrap, "admin-gone", "watched", PARTITIONS) == {0: -1001, 1: -1001, 2: 10, 3: 10}
    assert _delete_error(admin, "admin-gone") == 0
    assert "admin-gone" not in _listed(admin)
    assert _describe(admin, "admin-gone").state.name == "DEAD"
    assert _delete_error(admin, "admin-gone") == ErrorCode.group_id_not_found
    assert _offset_delete(kafka.bootstrap, "never-was", "watched", range(1))[0] == ErrorCode.group_id_not_found


def test_list_groups_v5_filters_by_group_type(kafka):
    """§17.6: every group here is classic; confluent-kafka and kafka-python send ListGroups v5 for a types filter."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from kafka.admin import KafkaAdminClient

    group = ConfluentGroup(kafka.bootstrap, "admin-typed", "other")
    group.add("a")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    python_admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        assert group.poll_until(lambda: group.balanced(1, 1))

        def listed(**filters):
            return {g.group_id: g.type for g in admin.list_consumer_groups(**filters).result(TIMEOUT_S).valid}

        assert listed(types={ConsumerGroupType.CLASSIC})["admin-typed"] == ConsumerGroupType.CLASSIC
        assert listed(types={ConsumerGroupType.CONSUMER}) == {}
        assert "admin-typed" in listed(types={ConsumerGroupType.CLASSIC}, states={ConsumerGroupState.STABLE})
        assert "admin-typed" not in listed(types={ConsumerGroupType.CLASSIC}, states={ConsumerGroupState.EMPTY})
        typed = {g["group_id"]: g["group_type"] for g in python_admin.list_groups(types_filter=["Classic"])}
        assert typed["admin-typed"] == "classic"
        assert python_admin.list_groups(types_filter=["consumer"]) == []
    finally:
        python_admin.close()
        group.close_all()
