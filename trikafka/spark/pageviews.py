"""The activity-event generator: page views produced into trikafka.

Each event is a compact JSON object ``{"user": ..., "page": ..., "timestamp": ms}``.
Events are partitioned semantically by user (the design doc's
``hash(key) % num_partitions``), so one user's views stay in order in one
partition.  Everything random comes from an injected ``random.Random`` and
timestamps from an injected clock, so a seeded run is reproducible.

Batches are sent with PRODUCE_ACKED and ``acks=-1`` (spec §9.2): when
``generate_pageviews`` returns, every event is flushed and visible to readers.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from trikafka.wire import Codec, ErrorCode, ProducePart, build_message_set
from trikafka.wire.metadata import BrokerAddress

from .blocking_client import BrokerConnection
from .offsets import PartitionKey

PAGES = (
    "/", "/home", "/search", "/jobs", "/feed", "/profile", "/messages", "/notifications",
    "/settings", "/groups", "/company", "/learning", "/help", "/login", "/logout", "/premium",
)
# Zipf-like popularity: the front pages get most of the views.
PAGE_WEIGHTS = tuple(1.0 / (rank + 1) for rank in range(len(PAGES)))


def wall_clock_ms() -> int:
    """Default clock: wall time in ms (injectable for tests)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class PageView:
    user: str
    page: str
    timestamp_ms: int

    def to_json_bytes(self) -> bytes:
        return json.dumps(
            {"user": self.user, "page": self.page, "timestamp": self.timestamp_ms}, separators=(",", ":")
        ).encode("utf-8")


def iter_pageviews(
    count: int, *, rng: random.Random, start_ms: int, interval_ms: int = 50, users: int = 1000
) -> Iterator[PageView]:
    """``count`` page views, one every ``interval_ms`` from ``start_ms`` (distinct timestamps)."""
    for i in range(count):
        user = f"user-{rng.randrange(users)}"
        page = rng.choices(PAGES, PAGE_WEIGHTS)[0]
        yield PageView(user, page, start_ms + i * interval_ms)


def partition_for(user: str, targets: Sequence[PartitionKey]) -> PartitionKey:
    """Semantic partitioning: ``crc32(user) % len(targets)`` over the sorted targets."""
    return targets[zlib.crc32(user.encode("utf-8")) % len(targets)]


@dataclass
class GenerateSummary:
    messages: int = 0
    payload_bytes: int = 0
    per_partition: dict[PartitionKey, int] = field(default_factory=dict)


class _Sender:
    """Buffers payloads per partition and sends full batches with acks=-1."""

    def __init__(self, brokers: dict[int, BrokerAddress], batch_size: int, codec: Codec, timeout_s: float):
        self._brokers = brokers
        self._batch_size = batch_size
        self._codec = codec
        self._timeout_s = timeout_s
        self._conns: dict[int, BrokerConnection] = {}
        self._pending: dict[PartitionKey, list[bytes]] = {}

    def add(self, key: PartitionKey, payload: bytes) -> None:
        batch = self._pending.setdefault(key, [])
        batch.append(payload)
        if len(batch) >= self._batch_size:
            self._send(key)

    def flush(self) -> None:
        for key in sorted(self._pending):
            self._send(key)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()

    def _send(self, key: PartitionKey) -> None:
        payloads = self._pending.pop(key, [])
        if not payloads:
            return
        broker = key.broker
        assert broker is not None  # generate_pageviews refuses partitions of replicated topics
        conn = self._conns.get(broker)
        if conn is None or conn.closed:
            address = self._brokers[broker]
            conn = self._conns[broker] = BrokerConnection(address.host, address.port, timeout_s=self._timeout_s)
        part = ProducePart(key.topic, key.partition, build_message_set(payloads, codec=self._codec))
        (result,) = conn.produce_acked([part], timeout_ms=int(self._timeout_s * 1000))
        if result.error != ErrorCode.NO_ERROR:
            raise RuntimeError(f"producing to {key} failed: {result.error.name}")


def generate_pageviews(
    brokers: dict[int, BrokerAddress],
    targets: Sequence[PartitionKey],
    count: int,
    *,
    rng: random.Random,
    clock_ms: Callable[[], int] = wall_clock_ms,
    interval_ms: int = 50,
    users: int = 1000,
    batch_size: int = 500,
    codec: Codec = Codec.NONE,
    timeout_s: float = 30.0,
) -> GenerateSummary:
    """Produce ``count`` page views spread over ``targets``; returns what was sent.

    Every target names its broker: a partition of a replicated topic (broker
    ``None``) has no fixed broker to send to and is refused with ``ValueError``.
    """
    if not targets:
        raise ValueError("no partitions to produce to")
    replicated = [str(key) for key in targets if key.broker is None]
    if replicated:
        raise ValueError(f"partitions of a replicated topic have no fixed broker: {', '.join(replicated)}")
    targets = sorted(targets)
    summary = GenerateSummary()
    sender = _Sender(brokers, batch_size, codec, timeout_s)
    try:
        for view in iter_pageviews(count, rng=rng, start_ms=clock_ms(), interval_ms=interval_ms, users=users):
            key = partition_for(view.user, targets)
            payload = view.to_json_bytes()
            sender.add(key, payload)
            summary.messages += 1
            summary.payload_bytes += len(payload)
            summary.per_partition[key] = summary.per_partition.get(key, 0) + 1
        sender.flush()
    finally:
        sender.close()
    return summary
