"""The consumer protocol's embedded subscription and assignment bytes (docs/protocol.md §17.8)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedPartitions
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as OwnedPartitions
from kio.static.primitive import i32

from trikafka.kafka.consumer_protocol import (ConsumerProtocolError, assigned, decode_assignment, decode_subscription,
                                              encode)


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_a_v0_subscription_laid_out_by_hand_decodes():
    raw = struct.pack(">hi", 0, 2) + s16("a") + s16("bb") + struct.pack(">i", 4) + b"user"
    decoded = decode_subscription(raw)
    assert list(decoded.topics) == ["a", "bb"] and decoded.user_data == b"user"


def test_a_newer_version_than_known_reads_its_leading_fields():
    raw = struct.pack(">hi", 9, 1) + s16("t") + struct.pack(">i", -1) + struct.pack(">i", 0) + struct.pack(">i", 7) \
        + struct.pack(">h", -1) + b"fields of version 9"
    decoded = decode_subscription(raw)
    assert list(decoded.topics) == ["t"] and decoded.generation_id == 7


def test_an_assignment_laid_out_by_hand_decodes_and_empty_bytes_are_no_assignment():
    raw = struct.pack(">hi", 1, 1) + s16("t") + struct.pack(">iii", 2, 3, 0) + struct.pack(">i", -1)
    assert assigned(decode_assignment(raw)) == {"t": [0, 3]}
    assert assigned(decode_assignment(b"")) == {}


@pytest.mark.parametrize("raw", [b"", b"\x00", struct.pack(">h", -1), struct.pack(">hi", 0, 3) + s16("a")])
def test_bytes_that_are_no_subscription_are_refused(raw):
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(raw)


names = st.text(alphabet="abcxyz-._", min_size=1, max_size=12)
partitions = st.lists(st.integers(0, 1000), max_size=5, unique=True).map(lambda ps: tuple(i32(p) for p in ps))


@given(st.lists(names, max_size=5), st.binary(max_size=20) | st.none(),
       st.dictionaries(names, partitions, max_size=3), st.integers(-1, 1 << 20))
def test_subscriptions_round_trip(topics, user_data, owned, generation):
    entity = ConsumerProtocolSubscription(
        topics=tuple(topics), user_data=user_data, generation_id=i32(generation), rack_id=None,
        owned_partitions=tuple(OwnedPartitions(topic=t, partitions=p) for t, p in owned.items()))
    assert decode_subscription(encode(entity)) == entity


@given(st.dictionaries(names, partitions, max_size=4), st.binary(max_size=20) | st.none())
def test_assignments_round_trip(topics, user_data):
    entity = ConsumerProtocolAssignment(
        assigned_partitions=tuple(AssignedPartitions(topic=t, partitions=p) for t, p in topics.items()),
        user_data=user_data)
    assert decode_assignment(encode(entity)) == entity
    assert assigned(entity) == {t: sorted(p) for t, p in topics.items()}
