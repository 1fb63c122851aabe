"""The producer's side of auditing (docs/protocol.md §13.1-§13.2).

``AuditTrail`` envelopes each payload (creation time, origin host, producer
id, sequence), counts the delivered ones per (topic, window) and hands out
the events of closed windows for the producer to publish on the audit topic.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
import uuid
from typing import Any, Callable, Iterable, Protocol

import trio

from trikafka.wire.audit import AUDIT_TOPIC, PRODUCER_TIER, AuditEvent, encode_event, window_start
from trikafka.wire.envelope import encode_header

from .config import ProducerConfig, Value
from .errors import ProducerError
from .partitioner import Key
from .results import SendResult

log = logging.getLogger(__name__)

# createdMs sits right after the marker, version and header CRC.
_CREATED_MS = struct.Struct(">q")
_CREATED_AT = 9


def default_producer_id(origin: str) -> str:
    """``<host>-<pid>-<8 hex digits>``: one producer instance."""
    return f"{origin}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class AuditTrail:
    """Envelopes and counts one producer's messages.  Not thread-safe (one Trio task world)."""

    def __init__(self, window_s: float = 60.0, *, origin: str | None = None, producer_id: str | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        if window_s <= 0:
            raise ValueError("audit window_s must be positive")
        self.window_ms = max(1, int(window_s * 1000))
        self.origin = origin if origin is not None else socket.gethostname()
        self.producer_id = producer_id if producer_id is not None else default_producer_id(self.origin)
        self._clock_ms = clock_ms if clock_ms is not None else (lambda: time.time_ns() // 1_000_000)
        self._sequence = 0
        self._counts: dict[tuple[str, int], int] = {}  # (topic, window start) -> delivered

    def wrap(self, topic: str, payload: bytes) -> bytes:
        """``payload`` in an envelope (the audit topic's own events are never wrapped)."""
        if topic == AUDIT_TOPIC:
            return payload
        header = encode_header(self._clock_ms(), self._sequence, self.origin, self.producer_id)
        self._sequence += 1
        return header + payload

    def delivered(self, topic: str, payload: bytes) -> None:
        """Count one delivered message (call once per message, never for a retry)."""
        if topic == AUDIT_TOPIC:
            return
        (created_ms,) = _CREATED_MS.unpack_from(payload, _CREATED_AT)
        key = (topic, window_start(created_ms, self.window_ms))
        self._counts[key] = self._counts.get(key, 0) + 1

    def take_events(self, *, everything: bool = False) -> list[AuditEvent]:
        """Events of the windows that have closed (all windows with ``everything``), forgotten here.

        A message delivered late for a window already reported gets an event
        of its own for that window; readers sum the events.
        """
        now_window = window_start(self._clock_ms(), self.window_ms)
        events = []
        for (topic, start), count in sorted(self._counts.items()):
            if everything or start < now_window:
                events.append(AuditEvent(PRODUCER_TIER, topic, start, self.window_ms, self.origin,
                                         self.producer_id, count))
        for event in events:
            del self._counts[(event.topic, event.window_start_ms)]
        return events


class AuditedProducer(Protocol):
    """What publishing needs of the producer (``Producer``)."""

    audit: AuditTrail | None
    config: ProducerConfig

    # Deliveries (async) or SendResults (sync) back: by mode, not by type.
    async def send_many(self, records: Iterable[tuple[str, Value] | tuple[str, Value, Key]]) -> list[Any]: ...

    async def flush(self) -> None: ...


async def run_audit_loop(producer: AuditedProducer) -> None:
    """Publish the closed windows' events every window (a task in the producer's nursery)."""
    assert producer.audit is not None
    while True:
        await trio.sleep(producer.audit.window_ms / 1000)
        await publish_audit(producer)


async def publish_audit(producer: AuditedProducer, *, everything: bool = False) -> None:
    """Send the audit events of closed windows (all with ``everything``) to the audit topic,
    keyed by the audited topic; a failure is logged (the counts are lost, not the messages)."""
    assert producer.audit is not None
    events = producer.audit.take_events(everything=everything)
    if not events:
        return
    try:
        sent = await producer.send_many([(AUDIT_TOPIC, encode_event(e), e.topic) for e in events])
        if producer.config.is_async:
            await producer.flush()
            results: list[SendResult] = [await delivery.wait() for delivery in sent]
        else:
            results = sent
        for result in results:
            result.raise_for_error()
    except ProducerError as exc:
        log.warning("audit events for %d window(s) not published: %s", len(events), exc)


__all__ = ["AuditTrail", "AuditedProducer", "default_producer_id", "publish_audit", "run_audit_loop"]
