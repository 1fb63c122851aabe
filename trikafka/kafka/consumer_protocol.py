"""The ``consumer`` protocol's embedded bytes (docs/protocol.md §17.8), sans I/O.

A member of a consumer group puts its *subscription* in JoinGroup's protocol
metadata, and the group's leader hands each member its *assignment* through
SyncGroup; the broker relays both untouched (§17.4).  Each is an ``int16``
version followed by Kafka's ``ConsumerProtocolSubscription`` or
``ConsumerProtocolAssignment`` schema at that version, which ``kio`` models.
A version newer than the newest known is read as the newest: later versions
only append fields, so their leading fields read the same.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as AssignmentV0
from kio.schema.consumer_protocol_assignment.v1.data import ConsumerProtocolAssignment as AssignmentV1
from kio.schema.consumer_protocol_assignment.v2.data import ConsumerProtocolAssignment as AssignmentV2
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment as AssignmentV3
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer

PROTOCOL_TYPE = "consumer"
_VERSION = struct.Struct(">h")

Subscription = SubscriptionV0 | SubscriptionV1 | SubscriptionV2 | SubscriptionV3
Assignment = AssignmentV0 | AssignmentV1 | AssignmentV2 | AssignmentV3
_SUBSCRIPTIONS: dict[int, type[Subscription]] = {0: SubscriptionV0, 1: SubscriptionV1, 2: SubscriptionV2,
                                                 3: SubscriptionV3}
_ASSIGNMENTS: dict[int, type[Assignment]] = {0: AssignmentV0, 1: AssignmentV1, 2: AssignmentV2, 3: AssignmentV3}


class ConsumerProtocolError(ValueError):
    """Embedded bytes that are not a consumer subscription or assignment."""


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A member's subscription (``topics``, ``user_data`` and, by version, ``owned_partitions``,
    ``generation_id``, ``rack_id``)."""
    return _decode(data, _SUBSCRIPTIONS, "subscription")


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A member's assignment (``assigned_partitions``: topic and partitions; ``user_data``).  Empty
    bytes are the empty assignment a member gets before its first SyncGroup."""
    if len(data) == 0:
        return AssignmentV0(assigned_partitions=())
    return _decode(data, _ASSIGNMENTS, "assignment")


def encode(entity: Subscription | Assignment) -> bytes:
    """The embedded bytes of a subscription or assignment at its class's version."""
    out = io.BytesIO()
    out.write(_VERSION.pack(entity.__version__))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def assigned(assignment: Assignment) -> dict[str, list[int]]:
    """An assignment as topic -> sorted partitions."""
    return {str(tp.topic): sorted(int(p) for p in tp.partitions) for tp in assignment.assigned_partitions}


def _decode(data: bytes | bytearray | memoryview, classes: dict[int, Any], what: str) -> Any:
    view = memoryview(data)
    if len(view) < _VERSION.size:
        raise ConsumerProtocolError(f"consumer {what}: {len(view)} bytes, no version")
    (version,) = _VERSION.unpack_from(view)
    if version < 0:
        raise ConsumerProtocolError(f"consumer {what}: version {version}")
    cls = classes[min(version, max(classes))]
    try:
        entity, _size = entity_reader(cls)(view, _VERSION.size)
    except Exception as exc:  # kio raises its own and struct/index errors on short or bad bytes
        raise ConsumerProtocolError(f"consumer {what} v{version}: {exc}") from None
    return entity
