"""Counting an audit (docs/protocol.md §13.2), without I/O: events and held
messages in, one row per (topic, window, tier) out."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trikafka.wire.audit import PRODUCER_TIER, AuditEvent, window_start
from trikafka.wire.envelope import Envelope


@dataclass(frozen=True)
class AuditRow:
    """What one tier holds of one topic's window, against what producers sent.

    ``held`` counts messages found (None for a loading tier, which only
    publishes a count), ``distinct`` the distinct (producer, sequence) among
    them; ``missing``/``duplicated`` are what the tier lacks or has twice and
    ``extra`` what it has that no producer event counts (yet).
    """

    topic: str
    window_start_ms: int
    window_ms: int
    tier: str
    expected: int
    held: int | None
    distinct: int
    missing: int
    duplicated: int
    extra: int

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.extra)


class AuditTally:
    """Feed producer and loader events (``add_event``, in the audit topic's order) and
    each cluster's enveloped messages (``add_held``); ``rows()`` compares them."""

    def __init__(self) -> None:
        self.window_ms: dict[str, int] = {}  # per topic: the largest window its events use
        self._sent: dict[tuple[str, int, int], int] = {}  # (topic, start, window) -> count
        self._loaded: dict[tuple[str, str, int, int], int] = {}  # (tier, topic, start, window) -> count
        self._held: dict[tuple[str, str, int], int] = {}  # (tier, topic, start) -> count
        self._seen: dict[tuple[str, str, int], set[tuple[str, int]]] = {}
        self._tiers: list[str] = []

    @property
    def topics(self) -> list[str]:
        return sorted(self.window_ms)

    def add_event(self, event: AuditEvent) -> None:
        self.window_ms[event.topic] = max(self.window_ms.get(event.topic, 0), event.window_ms)
        if event.tier == PRODUCER_TIER:
            key3 = (event.topic, event.window_start_ms, event.window_ms)
            self._sent[key3] = self._sent.get(key3, 0) + event.count
        else:
            # A loader's event is a snapshot of its totals: the later one (in the
            # audit topic's order) replaces the earlier.
            self._loaded[(event.tier, event.topic, event.window_start_ms, event.window_ms)] = event.count

    def add_tier(self, tier: str) -> None:
        """A cluster that is read (so it gets rows even when it holds nothing)."""
        if tier not in self._tiers:
            self._tiers.append(tier)

    def add_held(self, tier: str, topic: str, envelope: Envelope) -> None:
        """One enveloped message of ``topic`` found in cluster ``tier``."""
        window = self.window_ms.get(topic)
        if window is None:
            return  # no producer audits this topic
        key = (tier, topic, window_start(envelope.created_ms, window))
        self._held[key] = self._held.get(key, 0) + 1
        self._seen.setdefault(key, set()).add((envelope.producer_id, envelope.sequence))

    def _expected(self) -> dict[tuple[str, int], int]:
        """Producer counts, re-bucketed into each topic's largest window."""
        expected: dict[tuple[str, int], int] = {}
        for (topic, start, _window), count in self._sent.items():
            key = (topic, window_start(start, self.window_ms[topic]))
            expected[key] = expected.get(key, 0) + count
        return expected

    def rows(self) -> list[AuditRow]:
        expected = self._expected()
        loaded: dict[tuple[str, str, int], int] = {}
        for (tier, topic, start, _window), count in self._loaded.items():
            key = (tier, topic, window_start(start, self.window_ms[topic]))
            loaded[key] = loaded.get(key, 0) + count
        windows = set(expected) | {(t, s) for (_tier, t, s) in self._held} | {(t, s) for (_tier, t, s) in loaded}
        loader_tiers = sorted({tier for (tier, _t, _s) in loaded})
        rows = []
        for topic, start in sorted(windows):
            window = self.window_ms[topic]
            want = expected.get((topic, start), 0)
            for tier in self._tiers:
                held = self._held.get((tier, topic, start), 0)
                distinct = len(self._seen.get((tier, topic, start), ()))
                rows.append(AuditRow(topic, start, window, tier, want, held, distinct, max(0, want - distinct),
                                     held - distinct, max(0, distinct - want)))
            for tier in loader_tiers:
                count = loaded.get((tier, topic, start), 0)
                rows.append(AuditRow(topic, start, window, tier, want, None, count, max(0, want - count),
                                     max(0, count - want), 0))
        return rows


__all__ = ["AuditRow", "AuditTally"]
