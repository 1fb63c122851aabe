"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-612; docs/protocol.md §20.2): which quota applies
to a request or a new connection, the rates measured against it, and the throttle time a recording costs.

Pure bookkeeping on an injected clock: the Kafka connection records what each
request costs (``Charge``) and mutes itself for the throttle time it answers.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, NamedTuple

from .entity_configs import CLIENT_ID, DEFAULT_NAME, IP, USER, Component, EntityError, components, ip_key, sanitize

logger = logging.getLogger(__name__)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
PERCENT_PER_SECOND = 100.0  # request_percentage records 100 per second of handling
CLIENT_KINDS = frozenset({USER, CLIENT_ID})


class QuotaKey(NamedTuple):
    """What a quota key's values may be, and the entity types that may set it (§20.3)."""

    whole: bool  # a whole number
    least: float  # the smallest value allowed
    least_included: bool  # whether ``least`` itself is allowed
    kinds: frozenset[str]

    def need(self) -> str:
        return f"{'a whole number' if self.whole else 'a number'} {'>=' if self.least_included else '>'} {self.least:g}"

    def allows(self, value: float) -> bool:
        return (math.isfinite(value) and (value >= self.least if self.least_included else value > self.least)
                and (not self.whole or value == int(value)))


QUOTA_KEYS: dict[str, QuotaKey] = {
    PRODUCER_BYTE_RATE: QuotaKey(True, 1, True, CLIENT_KINDS),
    CONSUMER_BYTE_RATE: QuotaKey(True, 1, True, CLIENT_KINDS),
    REQUEST_PERCENTAGE: QuotaKey(False, 0, False, CLIENT_KINDS),
    CONNECTION_CREATION_RATE: QuotaKey(True, 0, True, frozenset({IP})),
}


class QuotaError(ValueError):
    """A quota key or value that cannot be stored; the message names it."""


def quota_key(key: str) -> QuotaKey:
    """``key``'s rules; QuotaError for a key that is not a quota."""
    found = QUOTA_KEYS.get(key)
    if found is None:
        raise QuotaError(f"unknown quota key {key!r} (served: {', '.join(QUOTA_KEYS)})")
    return found


def check_quota(key: str, value: float, kinds: frozenset[str] | None = None) -> str:
    """``value`` as an entity stores it; QuotaError for an unknown key, one that entity types ``kinds``
    may not set, or a value out of range (§20.3)."""
    rules = quota_key(key)
    if kinds is not None and not kinds <= rules.kinds:
        raise QuotaError(f"quota key {key!r} is not one of an entity of type {', '.join(sorted(kinds))}")
    if not rules.allows(value):
        raise QuotaError(f"quota {key} = {value}: {rules.need()} is needed")
    return str(int(value)) if rules.whole else repr(float(value))


def _candidates(user: str, client_id: str) -> Iterator[tuple[str, str, str]]:
    """KIP-55's order: (entity path, user and client id the quota is shared by)."""
    u, c, d = sanitize(user), sanitize(client_id), DEFAULT_NAME
    yield f"users/{u}/clients/{c}", user, client_id
    yield f"users/{u}/clients/{d}", user, client_id
    yield f"users/{u}", user, ""
    yield f"users/{d}/clients/{c}", user, client_id
    yield f"users/{d}/clients/{d}", user, client_id
    yield f"users/{d}", user, ""
    yield f"clients/{c}", "", client_id
    yield f"clients/{d}", "", client_id


def _in_force_path(path: str, entity: list[Component]) -> str:
    """The path a quota is looked up by: an IP address in its canonical form (``connection_created``)."""
    if len(entity) == 1 and entity[0].kind == IP and entity[0].name is not None:
        return f"ips/{ip_key(entity[0].name)}"
    return path


class Rate:
    """Kafka's sampled rate: ``samples`` windows of ``window_s``; the total of the live windows over
    the time since the oldest began, never less than ``samples - 1`` windows."""

    def __init__(self, samples: int, window_s: float):
        self._samples = samples
        self._window_s = window_s
        self._windows: collections.deque[list[float]] = collections.deque()  # [start_s, total]

    def record(self, amount: float, now_s: float) -> None:
        self._purge(now_s)
        if not self._windows or now_s >= self._windows[-1][0] + self._window_s:
            self._windows.append([now_s, 0.0])
        self._windows[-1][1] += amount

    def measure(self, now_s: float) -> tuple[float, float]:
        """(rate per second, the span in seconds it was taken over)."""
        self._purge(now_s)
        elapsed = now_s - self._windows[0][0] if self._windows else 0.0
        span = max(elapsed, (self._samples - 1) * self._window_s, self._window_s)
        total = sum(total for _start, total in self._windows)
        return total / span, span

    def _purge(self, now_s: float) -> None:
        while self._windows and self._windows[0][0] + self._samples * self._window_s <= now_s:
            self._windows.popleft()


@dataclass
class ClientQuotas:
    """The quotas in force and the rates measured against them, for one broker."""

    samples: int = 11  # quota.window.num
    window_s: float = 1.0  # quota.window.size.seconds
    clock_s: Callable[[], float] = time.monotonic
    _quotas: dict[str, dict[str, float]] = field(default_factory=dict)  # entity path -> key -> quota
    _rates: dict[tuple[str, str, str], Rate] = field(default_factory=dict)  # (key, user, client id)

    def replace(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Put ``entities``' quota keys in force (a value that does not parse is skipped)."""
        quotas: dict[str, dict[str, float]] = {}
        for path, config in entities.items():
            for key, value in config.items():
                if key in QUOTA_KEYS:
                    try:
                        entity = components(path)
                        stored = float(check_quota(key, float(value), frozenset(c.kind for c in entity)))
                        quotas.setdefault(_in_force_path(path, entity), {})[key] = stored
                    except (QuotaError, EntityError, ValueError) as exc:
                        logger.error("entity %s: quota %s=%r ignored: %s", path, key, value, exc)
        self._quotas = quotas
        self._rates.clear()  # Kafka starts new sensors when a quota changes

    @property
    def active(self) -> bool:
        return bool(self._quotas)

    def quota_of(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(quota, user, client id it is shared by) for ``key``, or None: no quota (§20.2)."""
        for path, shared_user, shared_client in _candidates(user, client_id):
            found = self._quotas.get(path, {}).get(key)
            if found is not None:
                return found, shared_user, shared_client
        return None

    def record(self, key: str, user: str, client_id: str, amount: float) -> int:
        """Record ``amount`` against ``key``'s quota for the request's entity; the throttle time in ms."""
        if not self._quotas:
            return 0
        applying = self.quota_of(key, user, client_id)
        if applying is None:
            return 0
        quota, shared_user, shared_client = applying
        rate = self._rates.get((key, shared_user, shared_client))
        if rate is None:
            rate = self._rates[(key, shared_user, shared_client)] = Rate(self.samples, self.window_s)
        now_s = self.clock_s()
        rate.record(amount, now_s)
        if amount < 0:  # taken back (a throttled Fetch's records): nothing to throttle
            return 0
        observed, span_s = rate.measure(now_s)
        if observed <= quota:
            return 0
        return round(min((observed - quota) / quota * span_s, span_s) * 1000)

    def connection_created(self, address: str) -> int:
        """Record a new connection from ``address`` against its ``connection_creation_rate`` (KIP-612,
        §20.2): the throttle time in ms (the connection is then closed after it, and not counted)."""
        if not self._quotas:
            return 0
        key = ip_key(address)
        if key is None:
            return 0
        for path in (f"ips/{key}", f"ips/{DEFAULT_NAME}"):
            quota = self._quotas.get(path, {}).get(CONNECTION_CREATION_RATE)
            if quota is not None:
                break
        else:
            return 0
        rate = self._rates.get((CONNECTION_CREATION_RATE, key, ""))
        if rate is None:
            rate = self._rates[(CONNECTION_CREATION_RATE, key, "")] = Rate(self.samples, self.window_s)
        now_s = self.clock_s()
        rate.record(1, now_s)
        observed, span_s = rate.measure(now_s)
        if observed <= quota:
            return 0
        rate.record(-1, now_s)
        return max(round(min((observed - quota) / quota * span_s if quota else span_s, self.window_s) * 1000), 1)

    def window_amount(self, key: str, user: str, client_id: str) -> float | None:
        """The most one recording of ``key`` may be without being throttled when nothing else is
        recorded: the quota over ``samples - 1`` windows (Kafka's ``getMaxValueInQuotaWindow``); None
        without a quota."""
        applying = self.quota_of(key, user, client_id) if self._quotas else None
        return None if applying is None else applying[0] * (self.samples - 1) * self.window_s


class Charge:
    """What one request costs its entity: the connection makes one per request (§20.2)."""

    __slots__ = ("_quotas", "user", "client_id", "request_bytes", "mute_ms", "started_s", "_handled_s")

    def __init__(self, quotas: ClientQuotas | None, user: str, client_id: str, request_bytes: int,
                 started_s: float | None = None):
        self._quotas = quotas
        self.user = user
        self.client_id = client_id
        self.request_bytes = request_bytes
        self.mute_ms = 0  # the longest throttle recorded: the connection reads nothing for this long
        self.started_s = time.perf_counter() if started_s is None else started_s  # handling began (perf_counter)
        self._handled_s = 0.0  # handling time already recorded against request_percentage

    def _record(self, key: str, amount: float) -> int:
        if self._quotas is None:
            return 0
        throttle_ms = self._quotas.record(key, self.user, self.client_id, amount)
        self.mute_ms = max(self.mute_ms, throttle_ms)
        return throttle_ms

    def produced(self) -> int:
        """A Produce request's size against ``producer_byte_rate``; its throttle time (ms)."""
        return self._record(PRODUCER_BYTE_RATE, self.request_bytes)

    def fetch_limit_bytes(self) -> int | None:
        """The most a Fetch answer may carry under ``consumer_byte_rate`` (§20.2); None: no quota."""
        if self._quotas is None:
            return None
        limit = self._quotas.window_amount(CONSUMER_BYTE_RATE, self.user, self.client_id)
        return None if limit is None else int(limit)

    def fetched(self, answer_bytes: int) -> int:
        """A Fetch answer's size against ``consumer_byte_rate`` and the handling time so far against
        ``request_percentage``: the larger throttle time (ms). Throttled, the size is taken back, for the
        answer is sent without its records (KIP-219, §20.2)."""
        if self._quotas is None:
            return 0
        request_ms = self.handled(time.perf_counter() - self.started_s)
        bytes_ms = self._record(CONSUMER_BYTE_RATE, answer_bytes)
        throttle_ms = max(request_ms, bytes_ms)
        if throttle_ms and answer_bytes:
            self._quotas.record(CONSUMER_BYTE_RATE, self.user, self.client_id, -answer_bytes)
        return throttle_ms

    def handled(self, seconds: float) -> int:
        """The request's handling time, ``seconds`` in all, against ``request_percentage`` (what an
        earlier call recorded not again); its throttle time (ms)."""
        if self._quotas is None:
            return 0
        amount_s, self._handled_s = max(seconds - self._handled_s, 0.0), max(seconds, self._handled_s)
        return self._record(REQUEST_PERCENTAGE, amount_s * PERCENT_PER_SECOND)


NO_CHARGE = Charge(None, "", "", 0)  # outside a connection (a bare service in tests): nothing recorded
# What the request being handled costs its user and client id (§20.2): the Kafka connection's task
# sets it per request; Produce and Fetch record their bytes on it, the dispatcher the handling time.
REQUEST_CHARGE: contextvars.ContextVar[Charge] = contextvars.ContextVar("kafka_request_charge", default=NO_CHARGE)
