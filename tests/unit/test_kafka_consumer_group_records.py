"""Kafka 4's consumer group records of ``__consumer_offsets`` (docs/protocol.md §17.9): Kafka's bytes,
round trips, tagged fields skipped, Kafka 4.0's ignored types read; topic ids (§17.9)."""

from __future__ import annotations

import struct
import uuid

import pytest

from trikafka.kafka.group_records import (ConsumerKey, ConsumerRecord, CurrentAssignmentValue, EpochValue,
                                          GroupRecordError, IgnoredValue, MemberMetadataValue, MemberState,
                                          TargetValue,
                                          decode_record, encode_key, encode_value)
from trikafka.kafka.topic_ids import names_by_id, topic_id

TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_a_current_assignment_is_kafkas_bytes():
    key = ConsumerKey(ConsumerRecord.CURRENT_ASSIGNMENT, "g", "m")
    value = CurrentAssignmentValue(5, 4, MemberState.UNRELEASED_PARTITIONS, ((TOPIC, (0, 1)),), ())
    assert encode_key(key) == struct.pack(">hh", 8, 1) + b"g" + struct.pack(">h", 1) + b"m"
    # Kafka's MemberState: STABLE 0, UNREVOKED_PARTITIONS 1, UNRELEASED_PARTITIONS 2.
    assert encode_value(value) == (struct.pack(">hiib", 0, 5, 4, 2) + b"\x02" + TOPIC.bytes + b"\x03"
                                   + struct.pack(">ii", 0, 1) + b"\x00" + b"\x01" + b"\x00")


def test_group_and_target_metadata_are_an_epoch_and_no_tags():
    assert encode_key(ConsumerKey(ConsumerRecord.GROUP_METADATA, "g")) == struct.pack(">hh", 3, 1) + b"g"
    assert encode_value(EpochValue(7)) == struct.pack(">hi", 0, 7) + b"\x00"


@pytest.mark.parametrize("key, value", [
    (ConsumerKey(ConsumerRecord.GROUP_METADATA, "g"), EpochValue(3)),
    (ConsumerKey(ConsumerRecord.TARGET_METADATA, "g"), EpochValue(2)),
    (ConsumerKey(ConsumerRecord.MEMBER_METADATA, "g", "m1"),
     MemberMetadataValue("i", None, "client", "/127.0.0.1", ("a", "b"), "t.*", 300000, "uniform")),
    (ConsumerKey(ConsumerRecord.MEMBER_METADATA, "g", "m1"),
     MemberMetadataValue(None, "rack", "c", "", (), None, -1, None)),
    (ConsumerKey(ConsumerRecord.TARGET_MEMBER, "g", "m1"), TargetValue(((TOPIC, (0, 2, 4)),))),
    (ConsumerKey(ConsumerRecord.CURRENT_ASSIGNMENT, "g", "m1"),
     CurrentAssignmentValue(3, 2, MemberState.UNREVOKED_PARTITIONS, ((TOPIC, (1,)),), ((TOPIC, (2, 3)),))),
])
def test_every_record_reads_back(key, value):
    assert decode_record(encode_key(key), encode_value(value)) == (key, value)
    assert decode_record(encode_key(key), None) == (key, None)


def test_tagged_fields_kafka_adds_are_skipped():
    # Kafka 4.1's MetadataHash (tag 0, int64) after the group epoch.
    data = struct.pack(">hi", 0, 9) + b"\x01" + b"\x00" + b"\x08" + struct.pack(">q", 42)
    key = encode_key(ConsumerKey(ConsumerRecord.GROUP_METADATA, "g"))
    assert decode_record(key, data)[1] == EpochValue(9)


def test_kafka_4_0s_partition_metadata_and_regex_records_are_read_and_ignored():
    partition_key = struct.pack(">hh", 4, 1) + b"g"
    assert decode_record(partition_key, b"\x00\x00anything") == (
        ConsumerKey(ConsumerRecord.PARTITION_METADATA, "g"), IgnoredValue())
    regex_key = struct.pack(">hh", 16, 1) + b"g" + struct.pack(">h", 2) + b"t."
    assert decode_record(regex_key, b"\x00\x00")[0] == ConsumerKey(ConsumerRecord.REGULAR_EXPRESSION, "g", "", "t.")


def test_a_share_group_key_is_an_error():
    with pytest.raises(GroupRecordError, match="key version 9"):
        decode_record(struct.pack(">hh", 9, 1) + b"g", None)


def test_an_unknown_member_state_is_an_error():
    key = encode_key(ConsumerKey(ConsumerRecord.CURRENT_ASSIGNMENT, "g", "m"))
    with pytest.raises(GroupRecordError, match="member state 127"):
        decode_record(key, struct.pack(">hiib", 0, 1, 0, 127) + b"\x01\x01\x00")


def test_a_truncated_value_is_an_error():
    key = encode_key(ConsumerKey(ConsumerRecord.TARGET_MEMBER, "g", "m"))
    data = encode_value(TargetValue(((TOPIC, (0,)),)))
    assert data is not None
    with pytest.raises(GroupRecordError):
        decode_record(key, data[:-3])


def test_topic_ids_are_stable_and_distinct():
    assert topic_id("events") == topic_id("events") != topic_id("events2")
    assert topic_id("events").version == 5
    assert names_by_id(["a", "b"]) == {topic_id("a"): "a", topic_id("b"): "b"}
