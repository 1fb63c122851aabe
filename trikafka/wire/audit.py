"""Audit events: what a producer or a loader counted per topic and time window
(docs/protocol.md §13.2).  Sans-I/O: JSON in UTF-8, one event per message."""

from __future__ import annotations

import json
from typing import NamedTuple

AUDIT_TOPIC = "trikafka-audit"
EVENT_VERSION = 1
PRODUCER_TIER = "producer"
DEFAULT_WINDOW_MS = 60_000


class AuditEvent(NamedTuple):
    """One tier's count of ``topic``'s messages created in one window."""

    tier: str
    topic: str
    window_start_ms: int
    window_ms: int
    origin: str | None
    producer_id: str | None
    count: int  # type: ignore[assignment]  # the public field name shadows tuple.count


def window_start(created_ms: int, window_ms: int) -> int:
    """The start of the window ``created_ms`` falls in (windows start at multiples of ``window_ms``)."""
    return created_ms - created_ms % window_ms


def encode_event(event: AuditEvent) -> bytes:
    """The event as the audit topic carries it."""
    return json.dumps({"v": EVENT_VERSION, **event._asdict()}, separators=(", ", ": ")).encode("utf-8")


def decode_event(data: bytes) -> AuditEvent | None:
    """The event in ``data``, or None if it is not a version-1 audit event (never raises)."""
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
        if not isinstance(obj, dict) or obj.get("v") != EVENT_VERSION:
            return None
        event = AuditEvent(*(obj[name] for name in AuditEvent._fields))
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
    ints = (event.window_start_ms, event.window_ms, event.count)
    if not all(type(v) is int for v in ints) or event.window_ms <= 0 or event.count < 0:
        return None
    if not isinstance(event.tier, str) or not isinstance(event.topic, str):
        return None
    if not all(v is None or isinstance(v, str) for v in (event.origin, event.producer_id)):
        return None
    return event


__all__ = ["AUDIT_TOPIC", "AuditEvent", "DEFAULT_WINDOW_MS", "PRODUCER_TIER", "decode_event",
           "encode_event", "window_start"]
