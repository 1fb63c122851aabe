"""The records of ``__consumer_offsets`` (§17.2): bytes equal to Kafka's layouts built by hand,
every value version read, and what does not decode refused."""

from __future__ import annotations

import struct

import pytest

from trikafka.kafka.group_records import (GroupKey, GroupRecordError, GroupValue, MemberValue, OffsetKey,
                                          OffsetValue, decode_group_value, decode_key, decode_offset_value,
                                          decode_record, encode_group_value, encode_key, encode_offset_value,
                                          encode_value)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


MEMBER = MemberValue("m-1", "inst-1", "client", "/127.0.0.1", 45000, 10000, b"sub", b"assign")
GROUP = GroupValue("consumer", 7, "range", "m-1", 1_700_000_000_000, (MEMBER,))


def test_offset_key_is_kafkas_version_1_layout():
    assert encode_key(OffsetKey("g", "topic", 3)) == i16(1) + s16("g") + s16("topic") + i32(3)


def test_group_key_is_kafkas_version_2_layout():
    assert encode_key(GroupKey("grp")) == i16(2) + s16("grp")


def test_offset_value_is_kafkas_version_3_layout():
    value = OffsetValue(42, 5, "meta", 1_700_000_000_123)
    assert encode_offset_value(value) == i16(3) + i64(42) + i32(5) + s16("meta") + i64(1_700_000_000_123)


def test_group_value_is_kafkas_version_3_layout():
    expected = (i16(3) + s16("consumer") + i32(7) + s16("range") + s16("m-1") + i64(1_700_000_000_000) + i32(1)
                + s16("m-1") + s16("inst-1") + s16("client") + s16("/127.0.0.1") + i32(45000) + i32(10000)
                + b32(b"sub") + b32(b"assign"))
    assert encode_group_value(GROUP) == expected
    assert decode_group_value(expected) == GROUP


def test_empty_group_with_null_protocol_and_leader():
    empty = GroupValue("consumer", 0, None, None, -1, ())
    assert encode_group_value(empty) == i16(3) + s16("consumer") + i32(0) + s16(None) + s16(None) + i64(-1) + i32(0)
    assert decode_group_value(encode_group_value(empty)) == empty


@pytest.mark.parametrize("raw, expected", [
    (i16(0) + i64(9) + s16("m") + i64(100), OffsetValue(9, -1, "m", 100, -1)),
    (i16(1) + i64(9) + s16("m") + i64(100) + i64(200), OffsetValue(9, -1, "m", 100, 200)),
    (i16(2) + i64(9) + s16("m") + i64(100), OffsetValue(9, -1, "m", 100, -1)),
    (i16(3) + i64(9) + i32(4) + s16("m") + i64(100), OffsetValue(9, 4, "m", 100, -1)),
], ids=["v0", "v1", "v2", "v3"])
def test_every_offset_value_version_reads(raw, expected):
    assert decode_offset_value(raw) == expected


def _member_v(version: int) -> bytes:
    out = s16("m-1")
    if version >= 3:
        out += s16("inst-1")
    out += s16("client") + s16("/127.0.0.1")
    if version >= 1:
        out += i32(45000)
    return out + i32(10000) + b32(b"sub") + b32(b"assign")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_group_value_version_reads(version):
    raw = i16(version) + s16("consumer") + i32(7) + s16("range") + s16("m-1")
    if version >= 2:
        raw += i64(1_700_000_000_000)
    raw += i32(1) + _member_v(version)
    value = decode_group_value(raw)
    assert value.generation == 7 and value.protocol == "range" and value.leader == "m-1"
    assert value.current_state_timestamp_ms == (1_700_000_000_000 if version >= 2 else -1)
    member = value.members[0]
    assert member.group_instance_id == ("inst-1" if version >= 3 else None)
    assert member.rebalance_timeout_ms == (45000 if version >= 1 else 10000)  # v0: the session timeout
    assert (member.subscription, member.assignment) == (b"sub", b"assign")


def test_key_version_0_reads_as_an_offset_key():
    assert decode_key(i16(0) + s16("g") + s16("t") + i32(1)) == OffsetKey("g", "t", 1)


def test_records_and_tombstones():
    key = OffsetKey("g", "t", 0)
    value = OffsetValue(10, -1, "", 5)
    assert decode_record(encode_key(key), encode_value(value)) == (key, value)
    assert decode_record(encode_key(GroupKey("g")), None) == (GroupKey("g"), None)
    assert decode_record(encode_key(GroupKey("g")), encode_value(GROUP)) == (GroupKey("g"), GROUP)
    assert encode_value(None) is None


@pytest.mark.parametrize("raw", [
    b"", i16(3), i16(7) + s16("g"), i16(2) + s16("g") + b"x", i16(2) + i16(5) + b"ab",
    i16(2) + i16(2) + b"\xff\xfe", i16(1) + s16(None) + s16("t") + i32(0),
], ids=["empty", "version-only", "unknown-version", "trailing", "short-string", "not-utf8", "null-group"])
def test_keys_that_do_not_decode(raw):
    with pytest.raises(GroupRecordError):
        decode_key(raw)


@pytest.mark.parametrize("decode, raw", [
    (decode_offset_value, i16(4) + i64(1) + i32(0) + s16("") + i64(0)),
    (decode_offset_value, i16(3) + i64(1)),
    (decode_group_value, i16(3) + s16("consumer") + i32(1) + s16(None) + s16(None) + i64(0) + i32(-1)),
    (decode_group_value, i16(3) + s16("consumer") + i32(1) + s16(None) + s16(None) + i64(0) + i32(1) + s16("m")),
    (decode_group_value, i16(3) + s16(None) + i32(1) + s16(None) + s16(None) + i64(0) + i32(0)),
], ids=["offset-v4", "offset-short", "negative-members", "member-short", "null-protocol-type"])
def test_values_that_do_not_decode(decode, raw):
    with pytest.raises(GroupRecordError):
        decode(raw)
