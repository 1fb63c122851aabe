"""Committed offsets over the Kafka protocol (docs/protocol.md §17.1, §17.3, §17.5): FindCoordinator,
OffsetCommit and OffsetFetch against one broker, with real clients and raw requests."""

from __future__ import annotations

import datetime
from typing import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                                 OffsetCommitRequestTopic)
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i8, i16, i32, i64

from tests.helpers.kafka_clients import create_topic, high_watermarks, read_with_kafka_python
from tests.helpers.kafka_wire import exchange
from trikafka.broker.kafka.groups.placement import group_partition
from trikafka.kafka.group_records import OFFSETS_TOPIC, GroupKey, OffsetKey, decode_record
from trikafka.kafka.records import build_batch
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

OFFSETS_PARTITIONS = 5


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=OFFSETS_PARTITIONS) as running:
        create_topic(running.bootstrap, "orders", partitions=3)
        yield running


def _commit(bootstrap: str, group: str, offsets: dict[int, int], topic: str = "orders", *, member_id: str = "",
            generation: int = -1) -> dict[int, ErrorCode]:
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=i32(generation), member_id=member_id,
                                  group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=tuple(
                                      OffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(o),
                                                                   committed_leader_epoch=i32(-1),
                                                                   committed_metadata=f"m{o}")
                                      for p, o in offsets.items())),))
    response = exchange(bootstrap, 8, 8, request)
    return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def _fetch(bootstrap: str, *groups: str, topics: tuple[str, ...] | None = ("orders",)) -> dict[str, object]:
    request = OffsetFetchRequest(groups=tuple(OffsetFetchRequestGroup(
        group_id=g, topics=None if topics is None else tuple(
            OffsetFetchRequestTopics(name=t, partition_indexes=(i32(0), i32(1), i32(2))) for t in topics))
        for g in groups), require_stable=True)
    response = exchange(bootstrap, 9, 8, request)
    return {g.group_id: (g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                        for t in g.topics for p in t.partitions}) for g in response.groups}


def test_kafka_python_commits_and_a_new_consumer_reads_the_commit(kafka):
    first = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="kp-simple", enable_auto_commit=False)
    try:
        first.assign([TopicPartition("orders", 0), TopicPartition("orders", 2)])
        first.commit({TopicPartition("orders", 0): OffsetAndMetadata(5, "five", -1),
                      TopicPartition("orders", 2): OffsetAndMetadata(9, "", -1)})
    finally:
        first.close()
    second = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="kp-simple", enable_auto_commit=False)
    try:
        assert second.committed(TopicPartition("orders", 0)) == 5
        assert second.committed(TopicPartition("orders", 1)) is None
        assert second.committed(TopicPartition("orders", 2)) == 9
    finally:
        second.close()


def test_find_coordinator_v4_answers_each_key_and_the_transaction_coordinator(kafka):
    response = exchange(kafka.bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("a", "b")))
    assert [(c.key, c.error_code, c.node_id, c.port) for c in response.coordinators] == \
        [("a", ErrorCode.none, 0, kafka.kafka_port), ("b", ErrorCode.none, 0, kafka.kafka_port)]
    response = exchange(kafka.bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(1), coordinator_keys=("tx",)))
    assert [(c.error_code, c.node_id, c.port) for c in response.coordinators] == \
        [(ErrorCode.none, 0, kafka.kafka_port)]
    response = exchange(kafka.bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(2), coordinator_keys=("x",)))
    assert response.coordinators[0].error_code == ErrorCode.invalid_request


def test_commits_answer_per_partition_and_fetch_answers_v8_groups(kafka):
    assert _commit(kafka.bootstrap, "raw-a", {0: 10, 1: 11}) == {0: ErrorCode.none, 1: ErrorCode.none}
    assert _commit(kafka.bootstrap, "raw-a", {1: 12}) == {1: ErrorCode.none}  # the last commit wins
    assert _commit(kafka.bootstrap, "raw-a", {7: 1}) == {7: ErrorCode.unknown_topic_or_partition}
    assert _commit(kafka.bootstrap, "raw-a", {0: 1}, topic="no-such-topic") == \
        {0: ErrorCode.unknown_topic_or_partition}
    answers = _fetch(kafka.bootstrap, "raw-a", "raw-never")
    assert answers["raw-a"] == (ErrorCode.none, {("orders", 0): (10, "m10", ErrorCode.none),
                                                 ("orders", 1): (12, "m12", ErrorCode.none),
                                                 ("orders", 2): (-1, "", ErrorCode.none)})
    assert answers["raw-never"][1][("orders", 0)] == (-1, "", ErrorCode.none)
    every = _fetch(kafka.bootstrap, "raw-a", topics=None)
    assert every["raw-a"][1] == {("orders", 0): (10, "m10", ErrorCode.none),
                                 ("orders", 1): (12, "m12", ErrorCode.none)}


def test_a_member_commit_to_a_group_without_members_is_unknown_member(kafka):
    assert _commit(kafka.bootstrap, "raw-b", {0: 3}, member_id="someone", generation=1) == \
        {0: ErrorCode.unknown_member_id}
    assert _fetch(kafka.bootstrap, "raw-b")["raw-b"][1][("orders", 0)][0] == -1


def test_offsets_topic_is_internal_and_holds_kafkas_records(kafka):
    assert _commit(kafka.bootstrap, "raw-layout", {2: 77}) == {2: ErrorCode.none}
    response = exchange(kafka.bootstrap, 3, 12, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=OFFSETS_TOPIC),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    (topic,) = response.topics
    assert topic.is_internal and len(topic.partitions) == OFFSETS_PARTITIONS
    produced = exchange(kafka.bootstrap, 0, 9, ProduceRequest(
        acks=i16(1), timeout=datetime.timedelta(seconds=10), transactional_id=None, topic_data=(
            TopicProduceData(name=OFFSETS_TOPIC, partition_data=(
                PartitionProduceData(index=i32(0), records=build_batch([b"x"])),)),)))
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.invalid_topic_exception
    partition = group_partition("raw-layout", OFFSETS_PARTITIONS)
    stored = sum(high_watermarks(kafka.bootstrap, OFFSETS_TOPIC, OFFSETS_PARTITIONS))
    records = [s for s in read_with_kafka_python(kafka.bootstrap, OFFSETS_TOPIC, OFFSETS_PARTITIONS, stored)
               if s.partition == partition]
    decoded = [decode_record(s.key, s.value) for s in records]
    assert (OffsetKey("raw-layout", "orders", 2), 77) in [(k, v.offset) for k, v in decoded
                                                          if isinstance(k, OffsetKey) and v is not None]
    assert all(isinstance(k, (OffsetKey, GroupKey)) for k, _ in decoded)
