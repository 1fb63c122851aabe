"""METADATA (type 102) and CREATE_TOPIC (type 103) responses (docs/protocol.md §9.4, §9.5).

Broker side: ``encode_metadata_response`` / ``encode_create_topic_response``
build whole response frames.  Client side: ``decode_metadata_payload`` /
``decode_create_topic_payload`` take the payload of a ``ResponseFrame`` and
raise ``RemoteProtocolError`` on anything malformed.  Every count is checked
against the bytes that are left before anything is built, so a hostile count
costs no memory or time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

from .errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from .cursor import INT32_MAX, FieldCursor, encode_topic

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_RESPONSE_HEADER = struct.Struct(">ih")  # size, errorCode
_PARTITION_HEAD = struct.Struct(">ihii")  # partition, error, leader, leaderEpoch
_CREATED = struct.Struct(">hi")  # error, partitions

# Smallest encodings, used to bound counts by the bytes that follow.
_MIN_BROKER_BYTES = 4 + 2 + 4
_MIN_TOPIC_BYTES = 2 + 2 + 4
_MIN_PARTITION_BYTES = _PARTITION_HEAD.size + 4 + 4
NO_LEADER = -1


@dataclass(frozen=True, slots=True, order=True)
class BrokerAddress:
    """A broker id and where it listens (a METADATA broker record, a ``broker.list`` entry)."""

    broker_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: its leader (``NO_LEADER`` if none), epoch, replicas and in-sync replicas."""

    partition: int
    leader: int
    leader_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NO_ERROR


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic: an error (7 invalid name, 8 unknown topic) or its partitions in order."""

    topic: str
    partitions: tuple[PartitionMetadata, ...] = ()
    error: ErrorCode = ErrorCode.NO_ERROR

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class Metadata:
    """A METADATA answer: the broker's ``max.message.size``, brokers, and topics."""

    max_message_size: int
    brokers: tuple[BrokerAddress, ...]
    topics: tuple[TopicMetadata, ...]

    def topic(self, name: str) -> TopicMetadata | None:
        """The record of topic ``name``, or None if the answer has none."""
        return next((t for t in self.topics if t.topic == name), None)

    def broker(self, broker_id: int) -> BrokerAddress | None:
        return next((b for b in self.brokers if b.broker_id == broker_id), None)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    """A CREATE_TOPIC answer: the error and the topic's partition count afterwards (-1 if none)."""

    error: ErrorCode
    partitions: int


# --------------------------------------------------------------------------- broker side


def _frame(payload: bytes) -> bytes:
    if len(payload) + 2 > INT32_MAX:
        raise LocalProtocolError("response does not fit an int32 size")
    return _RESPONSE_HEADER.pack(len(payload) + 2, ErrorCode.NO_ERROR) + payload


def _ids(ids: Sequence[int]) -> bytes:
    return _INT32.pack(len(ids)) + b"".join(_INT32.pack(i) for i in ids)


def encode_metadata_response(metadata: Metadata) -> bytes:
    """The whole METADATA response frame for ``metadata``."""
    try:
        out = [_INT32.pack(metadata.max_message_size), _INT32.pack(len(metadata.brokers))]
        for b in metadata.brokers:
            out += [_INT32.pack(b.broker_id), encode_topic(b.host), _INT32.pack(b.port)]
        out.append(_INT32.pack(len(metadata.topics)))
        for t in metadata.topics:
            out += [encode_topic(t.topic), _INT16.pack(int(t.error)), _INT32.pack(len(t.partitions))]
            for p in t.partitions:
                out += [_PARTITION_HEAD.pack(p.partition, int(p.error), p.leader, p.leader_epoch),
                        _ids(p.replicas), _ids(p.isr)]
    except struct.error as exc:
        raise LocalProtocolError(f"metadata field out of range: {exc}") from None
    return _frame(b"".join(out))


def encode_create_topic_response(result: CreateTopicResult) -> bytes:
    """The whole CREATE_TOPIC response frame for ``result``."""
    try:
        return _frame(_CREATED.pack(int(result.error), result.partitions))
    except struct.error as exc:
        raise LocalProtocolError(f"create-topic field out of range: {exc}") from None


# --------------------------------------------------------------------------- client side


def _count(cur: FieldCursor, what: str, min_bytes: int) -> int:
    n = cur.int32(what)
    if n < 0:
        raise RemoteProtocolError(f"negative {what} {n}")
    if n * min_bytes > cur.remaining:
        raise RemoteProtocolError(f"{what} {n} cannot fit in the {cur.remaining} bytes that follow")
    return n


def _id_list(cur: FieldCursor, what: str) -> tuple[int, ...]:
    return tuple(cur.int32(what) for _ in range(_count(cur, f"{what} count", 4)))


def _partition(cur: FieldCursor) -> PartitionMetadata:
    partition = cur.int32("partition")
    error = ErrorCode.from_wire(cur.int16("partition error"))
    leader = cur.int32("leader")
    epoch = cur.int32("leader epoch")
    replicas = _id_list(cur, "replica")
    return PartitionMetadata(partition, leader, epoch, replicas, _id_list(cur, "in-sync replica"), error)


def _topic(cur: FieldCursor) -> TopicMetadata:
    topic = cur.topic()
    error = ErrorCode.from_wire(cur.int16("topic error"))
    count = _count(cur, "partition count", _MIN_PARTITION_BYTES)
    return TopicMetadata(topic, tuple(_partition(cur) for _ in range(count)), error)


def decode_metadata_payload(payload: bytes) -> Metadata:
    """The ``Metadata`` in a METADATA response payload."""
    cur = FieldCursor(bytes(payload), kind="METADATA response")
    max_message_size = cur.int32("maxMessageSize")
    brokers = []
    for _ in range(_count(cur, "broker count", _MIN_BROKER_BYTES)):
        broker_id = cur.int32("broker id")
        host = cur.topic()
        brokers.append(BrokerAddress(broker_id, host, cur.int32("broker port")))
    topics = tuple(_topic(cur) for _ in range(_count(cur, "topic count", _MIN_TOPIC_BYTES)))
    return Metadata(max_message_size, tuple(brokers), topics)


def decode_create_topic_payload(payload: bytes) -> CreateTopicResult:
    """The ``CreateTopicResult`` in a CREATE_TOPIC response payload."""
    cur = FieldCursor(bytes(payload), kind="CREATE_TOPIC response")
    error = ErrorCode.from_wire(cur.int16("error"))
    return CreateTopicResult(error, cur.int32("partitions"))

