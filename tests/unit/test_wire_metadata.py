"""METADATA and CREATE_TOPIC responses (docs/protocol.md §9.4, §9.5): round trips,
the exact bytes of a small answer, and malformed payloads from a hostile peer."""

import random
import struct

import pytest

from trikafka.wire import (
    BrokerAddress,
    CreateTopicResult,
    ErrorCode,
    LocalProtocolError,
    Metadata,
    PartitionMetadata,
    RemoteProtocolError,
    ResponseReader,
    TopicMetadata,
    decode_create_topic_payload,
    decode_metadata_payload,
    encode_create_topic_response,
    encode_metadata_response,
)

ONE_PARTITION = PartitionMetadata(0, leader=0, leader_epoch=0, replicas=(0,), isr=(0,))
SMALL = Metadata(1000000, (BrokerAddress(0, "h", 9092),), (TopicMetadata("t", (ONE_PARTITION,)),))
RICH = Metadata(
    52,
    (BrokerAddress(0, "10.0.0.5", 9092), BrokerAddress(7, "broker-7.example", 19092)),
    (
        TopicMetadata("events", tuple(
            PartitionMetadata(p, leader=p % 2 * 7, leader_epoch=p, replicas=(0, 7), isr=(0, 7)[:1 + p % 2])
            for p in range(4))),
        TopicMetadata("nosuch", error=ErrorCode.UNKNOWN_TOPIC),
        TopicMetadata("a/b", error=ErrorCode.INVALID_TOPIC),
        TopicMetadata("orphan", (PartitionMetadata(0, leader=-1, leader_epoch=3, replicas=(5,), isr=(),
                                                   error=ErrorCode.UNKNOWN),)),
    ),
)


def payload_of(frame: bytes) -> bytes:
    reader = ResponseReader(1 << 20)
    reader.receive_data(frame)
    response = reader.next_frame()
    assert response.error_code == ErrorCode.NO_ERROR
    return response.payload


@pytest.mark.parametrize("metadata", [SMALL, RICH, Metadata(1, (), ())])
def test_metadata_round_trip(metadata):
    assert decode_metadata_payload(payload_of(encode_metadata_response(metadata))) == metadata


def test_metadata_exact_bytes_of_a_one_partition_topic():
    expected = (
        struct.pack(">i", 1000000)
        + struct.pack(">i", 1) + struct.pack(">ih", 0, 1) + b"h" + struct.pack(">i", 9092)
        + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">hi", 0, 1)
        + struct.pack(">ihii", 0, 0, 0, 0) + struct.pack(">ii", 1, 0) + struct.pack(">ii", 1, 0)
    )
    frame = encode_metadata_response(SMALL)
    assert frame == struct.pack(">ih", len(expected) + 2, 0) + expected


def test_lookups_by_name_and_id():
    assert RICH.topic("events").partition_count == 4
    assert RICH.topic("nosuch").error == ErrorCode.UNKNOWN_TOPIC and RICH.topic("absent") is None
    assert RICH.broker(7).port == 19092 and RICH.broker(1) is None


def test_every_truncation_is_a_remote_protocol_error():
    payload = payload_of(encode_metadata_response(RICH))
    for cut in range(len(payload)):
        with pytest.raises(RemoteProtocolError):
            decode_metadata_payload(payload[:cut])


@pytest.mark.parametrize("position,value,match", [
    (4, -1, "negative broker count"),
    (4, 0x7FFFFFFF, "broker count 2147483647 cannot fit"),
])
def test_hostile_broker_counts(position, value, match):
    payload = bytearray(payload_of(encode_metadata_response(SMALL)))
    struct.pack_into(">i", payload, position, value)
    with pytest.raises(RemoteProtocolError, match=match):
        decode_metadata_payload(bytes(payload))


def test_hostile_partition_and_replica_counts():
    payload = payload_of(encode_metadata_response(SMALL))
    partitions_at = len(payload) - (14 + 8 + 8) - 4  # head: partition, error, leader, epoch
    replicas_at = partitions_at + 4 + 14
    for at, what in [(partitions_at, "partition count"), (replicas_at, "replica count")]:
        for value in (-3, 1 << 30):
            broken = bytearray(payload)
            struct.pack_into(">i", broken, at, value)
            with pytest.raises(RemoteProtocolError, match=what):
                decode_metadata_payload(bytes(broken))


def test_random_junk_never_escapes_as_another_exception():
    rng = random.Random(1402)
    good = payload_of(encode_metadata_response(RICH))
    for _ in range(2000):
        junk = bytearray(good if rng.random() < 0.5 else rng.randbytes(rng.randrange(64)))
        for _ in range(rng.randrange(1, 4)):
            if junk:
                junk[rng.randrange(len(junk))] = rng.randrange(256)
        try:
            decode_metadata_payload(bytes(junk))
        except RemoteProtocolError:
            pass


def test_unknown_error_codes_read_as_unknown():
    frame = encode_metadata_response(Metadata(1, (), (TopicMetadata("t"),)))
    payload = bytearray(payload_of(frame))
    struct.pack_into(">h", payload, 4 + 4 + 4 + 3, 1234)
    assert decode_metadata_payload(bytes(payload)).topics[0].error == ErrorCode.UNKNOWN


def test_encode_refuses_values_that_do_not_fit():
    with pytest.raises(LocalProtocolError):
        encode_metadata_response(Metadata(1 << 40, (), ()))
    with pytest.raises(LocalProtocolError):
        encode_create_topic_response(CreateTopicResult(ErrorCode.NO_ERROR, 1 << 33))


@pytest.mark.parametrize("result", [
    CreateTopicResult(ErrorCode.NO_ERROR, 8),
    CreateTopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, 3),
    CreateTopicResult(ErrorCode.INVALID_TOPIC, -1),
])
def test_create_topic_round_trip_and_bytes(result):
    frame = encode_create_topic_response(result)
    assert frame == struct.pack(">ihhi", 8, 0, result.error, result.partitions)
    assert decode_create_topic_payload(payload_of(frame)) == result


def test_create_topic_short_payload():
    with pytest.raises(RemoteProtocolError, match="too short for partitions"):
        decode_create_topic_payload(b"\x00\x00\x00")
