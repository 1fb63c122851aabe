"""Properties of the ``__consumer_offsets`` records (§17.2): any key and value reads back as written,
and no byte string makes the decoder fail other than with ``GroupRecordError``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trikafka.kafka.group_records import (GroupKey, GroupRecordError, GroupValue, MemberValue, OffsetKey,
                                          OffsetValue, decode_group_value, decode_key, decode_offset_value,
                                          encode_group_value, encode_key, encode_offset_value)

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=40)
keys = st.one_of(st.builds(OffsetKey, texts, texts, int32s), st.builds(GroupKey, texts))
offsets = st.builds(OffsetValue, int64s, int32s, texts, int64s)
members = st.builds(MemberValue, texts, st.none() | texts, texts, texts, int32s, int32s, st.binary(max_size=50),
                    st.binary(max_size=50))
groups = st.builds(GroupValue, texts, int32s, st.none() | texts, st.none() | texts, int64s,
                   st.lists(members, max_size=4).map(tuple))


@given(keys)
def test_keys_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(offsets)
def test_offset_values_round_trip(value):
    assert decode_offset_value(encode_offset_value(value)) == value


@given(groups)
def test_group_values_round_trip(value):
    assert decode_group_value(encode_group_value(value)) == value


@given(st.binary(max_size=80))
def test_any_bytes_decode_or_raise_group_record_error(raw):
    for decode in (decode_key, decode_offset_value, decode_group_value):
        try:
            decode(raw)
        except GroupRecordError:
            pass
