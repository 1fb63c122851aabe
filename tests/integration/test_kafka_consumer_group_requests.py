"""Kafka 4's consumer groups request by request (docs/protocol.md §17.9): topic ids, commits and
fetches checked against the member epoch, classic and consumer groups refusing each other, and the
records Kafka 4 writes in ``__consumer_offsets``."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Iterator

import pytest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v9.request import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                                 OffsetCommitRequestTopic)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tests.helpers.kafka_clients import create_topic, high_watermarks, read_with_kafka_python
from tests.helpers.kafka_wire import exchange
from trikafka.broker.kafka.groups.placement import group_partition
from trikafka.kafka.group_records import OFFSETS_TOPIC, ConsumerKey, ConsumerRecord, decode_record
from trikafka.kafka.topic_ids import topic_id
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

OFFSETS_PARTITIONS = 3
TOPIC = "kip848r"


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=OFFSETS_PARTITIONS) as running:
        create_topic(running.bootstrap, TOPIC, partitions=2)
        found = exchange(running.bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("r1",)))
        assert found.coordinators[0].error_code == ErrorCode.none  # __consumer_offsets is made (§17.1)
        yield running


def _heartbeat(bootstrap: str, group: str, member_id: str, epoch: int, **fields: Any) -> Any:
    return exchange(bootstrap, 68, 1, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=i32(epoch), instance_id=None, rack_id=None,
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=fields.get("topics"), subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=None))


def _commit(bootstrap: str, group: str, member_id: str, epoch: int, version: int = 9) -> ErrorCode:
    response = exchange(bootstrap, 8, version, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=i32(epoch), member_id=member_id, group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(OffsetCommitRequestPartition(
            partition_index=i32(0), committed_offset=i64(5), committed_leader_epoch=i32(-1),
            committed_metadata=None),)),)))
    return response.topics[0].partitions[0].error_code


def _fetch(bootstrap: str, group: str, member_id: str | None, epoch: int) -> tuple[ErrorCode, int | None]:
    response = exchange(bootstrap, 9, 9, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
        group_id=group, member_id=member_id, member_epoch=i32(epoch),
        topics=(OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(i32(0),)),)),), require_stable=False))
    (answer,) = response.groups
    offsets = [p.committed_offset for t in answer.topics for p in t.partitions]
    return answer.error_code, offsets[0] if offsets else None


def test_the_assignment_names_the_topic_ids_metadata_answers(kafka):
    answer = _heartbeat(kafka.bootstrap, "r1", "m1", 0, topics=(TOPIC,))
    assert answer.error_code == ErrorCode.none and answer.member_epoch == 1
    (assigned,) = answer.assignment.topic_partitions
    assert assigned.topic_id == topic_id(TOPIC) and sorted(assigned.partitions) == [0, 1]
    by_name = exchange(kafka.bootstrap, 3, 12, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert by_name.topics[0].topic_id == topic_id(TOPIC)
    unknown = uuid.uuid4()
    by_id = exchange(kafka.bootstrap, 3, 12, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=assigned.topic_id, name=None),
                MetadataRequestTopic(topic_id=unknown, name=None)),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in by_id.topics] == [(TOPIC, ErrorCode.none),
                                                              (None, ErrorCode.unknown_topic_id)]


def test_commits_and_fetches_check_the_member_epoch(kafka):
    assert _heartbeat(kafka.bootstrap, "r2", "m1", 0, topics=(TOPIC,)).member_epoch == 1
    assert _commit(kafka.bootstrap, "r2", "m1", 0) == ErrorCode.stale_member_epoch
    assert _commit(kafka.bootstrap, "r2", "m1", 2) == ErrorCode.stale_member_epoch  # Kafka 4: any other epoch
    assert _commit(kafka.bootstrap, "r2", "m1", 1, version=8) == ErrorCode.unsupported_version
    assert _commit(kafka.bootstrap, "r2", "nobody", 1) == ErrorCode.unknown_member_id
    assert _commit(kafka.bootstrap, "r2", "", -1) == ErrorCode.unknown_member_id  # the group has members
    assert _commit(kafka.bootstrap, "r2", "m1", 1) == ErrorCode.none
    assert _fetch(kafka.bootstrap, "r2", "m1", 1) == (ErrorCode.none, 5)
    assert _fetch(kafka.bootstrap, "r2", "m1", 0)[0] == ErrorCode.stale_member_epoch
    assert _fetch(kafka.bootstrap, "r2", None, -1) == (ErrorCode.none, 5)  # no member named: not checked


def test_classic_and_consumer_groups_refuse_each_other(kafka):
    assert _heartbeat(kafka.bootstrap, "r3", "m1", 0, topics=(TOPIC,)).error_code == ErrorCode.none
    joined = exchange(kafka.bootstrap, 11, 3, JoinGroupRequest(
        group_id="r3", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="",
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
    assert joined.error_code == ErrorCode.inconsistent_group_protocol
    classic = exchange(kafka.bootstrap, 11, 3, JoinGroupRequest(
        group_id="r4", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="",
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
    assert classic.error_code == ErrorCode.none
    refused = _heartbeat(kafka.bootstrap, "r4", "m1", 0, topics=(TOPIC,))
    assert refused.error_code == ErrorCode.group_id_not_found
    assert refused.error_message == "Group r4 is not a consumer group."


def test_the_group_is_kafka_4s_records_in_the_offsets_topic(kafka):
    assert _heartbeat(kafka.bootstrap, "r5", "m1", 0, topics=(TOPIC,)).error_code == ErrorCode.none
    assert _heartbeat(kafka.bootstrap, "r5", "m1", -1).member_epoch == -1
    partition = group_partition("r5", OFFSETS_PARTITIONS)
    stored = sum(high_watermarks(kafka.bootstrap, OFFSETS_TOPIC, OFFSETS_PARTITIONS))
    records = [s for s in read_with_kafka_python(kafka.bootstrap, OFFSETS_TOPIC, OFFSETS_PARTITIONS, stored)
               if s.partition == partition]
    decoded = [decode_record(s.key, s.value) for s in records]
    kinds = [(k.kind, v is None) for k, v in decoded if isinstance(k, ConsumerKey) and k.group == "r5"]
    assert (ConsumerRecord.MEMBER_METADATA, False) in kinds and (ConsumerRecord.CURRENT_ASSIGNMENT, False) in kinds
    assert kinds[-4:] == [(ConsumerRecord.CURRENT_ASSIGNMENT, True), (ConsumerRecord.TARGET_MEMBER, True),
                          (ConsumerRecord.MEMBER_METADATA, True), (ConsumerRecord.GROUP_METADATA, False)]


def test_list_groups_tells_the_types_apart_and_delete_groups_needs_an_empty_group(kafka):
    assert _heartbeat(kafka.bootstrap, "r6", "m1", 0, topics=(TOPIC,)).error_code == ErrorCode.none

    def listed(*types: str) -> dict[str, tuple[str, str, str]]:
        response = exchange(kafka.bootstrap, 16, 5, ListGroupsRequest(states_filter=(), types_filter=types))
        return {g.group_id: (g.group_type, g.protocol_type, g.group_state) for g in response.groups}

    assert listed("consumer")["r6"] == ("consumer", "consumer", "Stable")
    assert "r6" not in listed("classic") and "r6" in listed()
    delete = DeleteGroupsRequest(groups_names=("r6",))
    assert exchange(kafka.bootstrap, 42, 2, delete).results[0].error_code == ErrorCode.non_empty_group
    assert _heartbeat(kafka.bootstrap, "r6", "m1", -1).error_code == ErrorCode.none
    assert listed("consumer")["r6"][2] == "Empty"
    assert exchange(kafka.bootstrap, 42, 2, delete).results[0].error_code == ErrorCode.none
    assert "r6" not in listed()
