"""The "consumer" protocol's embedded bytes (docs/protocol.md §17.8), sans I/O.

A group of protocol type ``consumer`` carries two opaque byte strings through
the coordinator: each member's subscription (JoinGroup's protocol metadata)
and each member's assignment (SyncGroup's).  Their layouts are Apache Kafka's
``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` schemas
(v0-v3), as ``kio`` models them, behind an int16 version prefix.

Fields are only ever appended to these schemas, so bytes of a version newer
than v3 are read as v3 and bytes after the known fields are ignored, as
Kafka's own clients do; a negative version is an error.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from dataclasses import dataclass, field
from typing import Mapping

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from kio.static.protocol import Entity

from .errors import KafkaCodecError

PROTOCOL_TYPE = "consumer"
LATEST_VERSION = 3
_VERSION = struct.Struct(">h")
# Per version: the kio module holding the data class and its nested TopicPartition
# (typed object: each version's classes differ, so they are read by name).
_SUBSCRIPTIONS = {0: subscription_v0, 1: subscription_v1, 2: subscription_v2, 3: subscription_v3}
_ASSIGNMENTS = {0: assignment_v0, 1: assignment_v1, 2: assignment_v2, 3: assignment_v3}

TopicPartitions = Mapping[str, tuple[int, ...]]  # topic -> partition ids


@dataclass(frozen=True)
class Subscription:
    """A member's JoinGroup metadata: what it wants, what it owns (v1+), its generation and rack (v3+)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """A member's SyncGroup assignment: partitions by topic, and the assignor's user data."""

    partitions: TopicPartitions = field(default_factory=dict)
    user_data: bytes | None = None


def encode_subscription(subscription: Subscription, version: int = LATEST_VERSION) -> bytes:
    """``subscription`` as ``version``'s bytes (the fields that version lacks are left out)."""
    module = _module(_SUBSCRIPTIONS, version)
    return _encode(version, getattr(module, "ConsumerProtocolSubscription"), {
        "topics": tuple(subscription.topics), "user_data": subscription.user_data,
        "owned_partitions": _topic_partitions(module, subscription.owned_partitions),
        "generation_id": i32(subscription.generation_id), "rack_id": subscription.rack_id})


def decode_subscription(data: bytes | memoryview) -> tuple[int, Subscription]:
    """The version written in ``data`` and the subscription it holds."""
    version, entity = _decode(data, _SUBSCRIPTIONS, "ConsumerProtocolSubscription")
    return version, Subscription(
        topics=tuple(str(t) for t in getattr(entity, "topics")), user_data=_bytes(getattr(entity, "user_data", None)),
        owned_partitions=_partitions_of(getattr(entity, "owned_partitions", ())),
        generation_id=int(getattr(entity, "generation_id", -1)), rack_id=getattr(entity, "rack_id", None))


def encode_assignment(assignment: Assignment, version: int = LATEST_VERSION) -> bytes:
    """``assignment`` as ``version``'s bytes."""
    module = _module(_ASSIGNMENTS, version)
    return _encode(version, getattr(module, "ConsumerProtocolAssignment"), {
        "assigned_partitions": _topic_partitions(module, assignment.partitions), "user_data": assignment.user_data})


def decode_assignment(data: bytes | memoryview) -> tuple[int, Assignment]:
    """The version written in ``data`` and the assignment it holds; empty bytes are no assignment
    (a coordinator answers them to a member the leader left out)."""
    if len(data) == 0:
        return 0, Assignment()
    version, entity = _decode(data, _ASSIGNMENTS, "ConsumerProtocolAssignment")
    return version, Assignment(partitions=_partitions_of(getattr(entity, "assigned_partitions")),
                               user_data=_bytes(getattr(entity, "user_data", None)))


def _module(table: Mapping[int, object], version: int) -> object:
    if version not in table:
        raise KafkaCodecError(f"consumer protocol v{version} is not v0-v{LATEST_VERSION}")
    return table[version]


def _encode(version: int, cls: type[Entity], values: Mapping[str, object]) -> bytes:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    entity = cls(**{k: v for k, v in values.items() if k in names})
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    try:
        entity_writer(cls)(out, entity)
    except Exception as exc:  # kio's writers raise their own errors and struct.error on out-of-range values
        raise KafkaCodecError(f"{cls.__name__} v{version} does not encode: {exc}") from None
    return out.getvalue()


def _decode(data: bytes | memoryview, table: Mapping[int, object], name: str) -> tuple[int, Entity]:
    buffer = data if isinstance(data, bytes) or data.readonly else bytes(data)
    if len(buffer) < _VERSION.size:
        raise KafkaCodecError(f"{name}: {len(buffer)} bytes hold no version")
    (version,) = _VERSION.unpack_from(buffer, 0)
    if version < 0:
        raise KafkaCodecError(f"{name}: negative version {version}")
    cls: type[Entity] = getattr(table[min(version, LATEST_VERSION)], name)
    try:
        entity, _size = entity_reader(cls)(buffer, _VERSION.size)
    except Exception as exc:  # kio's readers raise their own errors, struct.error, UnicodeDecodeError
        raise KafkaCodecError(f"{name} v{version}: {exc}") from None
    return version, entity


def _topic_partitions(module: object, partitions: TopicPartitions) -> tuple[Entity, ...]:
    if not hasattr(module, "TopicPartition"):
        return ()
    nested: type[Entity] = getattr(module, "TopicPartition")
    return tuple(nested(topic=TopicName(topic), partitions=tuple(i32(p) for p in ids))  # type: ignore[call-arg]
                 for topic, ids in partitions.items())


def _partitions_of(entries: object) -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    for entry in entries or ():  # type: ignore[attr-defined]
        found[str(entry.topic)] = found.get(str(entry.topic), ()) + tuple(int(p) for p in entry.partitions)
    return found


def _bytes(value: object) -> bytes | None:
    return None if value is None else bytes(value)  # type: ignore[call-overload]
