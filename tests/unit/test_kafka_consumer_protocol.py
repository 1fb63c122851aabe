"""The consumer protocol's embedded subscription and assignment bytes (docs/protocol.md §17.8)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from trikafka.kafka.consumer_protocol import (LATEST_VERSION, Assignment, Subscription, decode_assignment,
                                              decode_subscription, encode_assignment, encode_subscription)
from trikafka.kafka.errors import KafkaCodecError

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
partitions = st.dictionaries(names, st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple), max_size=4)
user_data = st.none() | st.binary(max_size=20)
versions = st.integers(0, LATEST_VERSION)
subscriptions = st.builds(Subscription, topics=st.lists(names, max_size=5).map(tuple), user_data=user_data,
                          owned_partitions=partitions, generation_id=st.integers(-1, 2**31 - 1),
                          rack_id=st.none() | names)
assignments = st.builds(Assignment, partitions=partitions, user_data=user_data)


def _as_of(subscription: Subscription, version: int) -> Subscription:
    """What ``version`` keeps of ``subscription``: owned partitions from v1, generation v2, rack v3."""
    return Subscription(subscription.topics, subscription.user_data,
                        subscription.owned_partitions if version >= 1 else {},
                        subscription.generation_id if version >= 2 else -1,
                        subscription.rack_id if version >= 3 else None)


@given(subscriptions, versions)
def test_subscription_round_trip(subscription: Subscription, version: int) -> None:
    assert decode_subscription(encode_subscription(subscription, version)) == (version, _as_of(subscription, version))


@given(assignments, versions)
def test_assignment_round_trip(assignment: Assignment, version: int) -> None:
    assert decode_assignment(encode_assignment(assignment, version)) == (version, assignment)


@given(subscriptions, versions)
def test_kafka_python_reads_our_subscription(subscription: Subscription, version: int) -> None:
    theirs = KpSubscription.decode(encode_subscription(subscription, version))
    kept = _as_of(subscription, version)
    assert list(theirs.topics) == list(kept.topics)
    assert theirs.user_data == kept.user_data
    if version >= 1:
        assert {tp.topic: tuple(tp.partitions) for tp in theirs.owned_partitions} == dict(kept.owned_partitions)
    if version >= 2:
        assert theirs.generation_id == kept.generation_id
    if version >= 3:
        assert theirs.rack_id == kept.rack_id


@given(subscriptions, versions)
def test_we_read_kafka_python_subscription(subscription: Subscription, version: int) -> None:
    theirs = KpSubscription(
        topics=list(subscription.topics), user_data=subscription.user_data,
        owned_partitions=[KpSubscription.TopicPartition(topic=t, partitions=list(p))
                          for t, p in subscription.owned_partitions.items()],
        generation_id=subscription.generation_id, rack_id=subscription.rack_id)
    assert decode_subscription(theirs.encode(version=version)) == (version, _as_of(subscription, version))


@given(assignments, versions)
def test_assignment_against_kafka_python(assignment: Assignment, version: int) -> None:
    theirs = KpAssignment(assigned_partitions=[KpAssignment.TopicPartition(topic=t, partitions=list(p))
                                               for t, p in assignment.partitions.items()],
                          user_data=assignment.user_data)
    encoded = theirs.encode(version=version)
    assert decode_assignment(encoded) == (version, assignment)
    assert encode_assignment(assignment, version) == encoded


def test_a_newer_version_reads_as_the_latest_and_ignores_trailing_fields() -> None:
    subscription = Subscription(("t",), b"u", {"t": (0, 1)}, 7, "rack-a")
    v3 = encode_subscription(subscription, 3)
    v9 = struct.pack(">h", 9) + v3[2:] + b"\x00\x00\x00\x2a"  # a field v9 appended
    assert decode_subscription(v9) == (9, subscription)


def test_empty_assignment_bytes_are_no_assignment() -> None:
    assert decode_assignment(b"") == (0, Assignment())


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff\x00\x00", b"\x00\x01\x00\x00\x00\x05ab"])
def test_bad_subscription_bytes_are_a_codec_error(data: bytes) -> None:
    with pytest.raises(KafkaCodecError):
        decode_subscription(data)


def test_unknown_version_does_not_encode() -> None:
    with pytest.raises(KafkaCodecError):
        encode_assignment(Assignment(), 4)
