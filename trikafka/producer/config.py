"""Producer settings: Pythonic names with units, mapped from 0.7's ``ProducerConfig``.

=============================  ==============================  ==========================
0.7 property                   keyword                         note
=============================  ==============================  ==========================
``broker.list``                ``brokers``                     ``"id:host:port,..."``, ``"host:port,..."``
                                                               or ``[(id, host, port) | (host, port)]``
``zk.connect``                 ``zk_connect``                  or pass ``coordinator=``
``zk.sessiontimeout.ms``       ``zk_session_timeout_s``
``producer.type``              ``producer_type``               ``"sync"`` / ``"async"``
``partitioner.class``          ``partitioner``                 any ``(key, n) -> index`` callable
``serializer.class``           ``serializer``                  ``value -> bytes``
``compression.codec``          ``compression_codec``           ``none``/``gzip``/``snappy`` or 0/1/2
``compressed.topics``          ``compressed_topics``           empty: every topic
(trikafka)                     ``gzip_level``                  1-9, default 6 (Java's)
``batch.size``                 ``batch_size``                  messages per dispatch (async)
``queue.time``                 ``queue_time_s``                longest a message waits (async)
``queue.size``                 ``queue_size``                  messages queued or in flight (async)
``queue.enqueueTimeout.ms``    ``enqueue_timeout_s``           ``None``: block (backpressure) [T]
``connect.timeout.ms``         ``connect_timeout_s``
``socket.timeout.ms``          ``request_timeout_s``
``max.message.size``           ``max_message_size``
``num.retries``                ``num_retries``                 default 3 [T] (0.7: 0)
(trikafka)                     ``acks``                        0: PRODUCE; 1, -1: PRODUCE_ACKED (§9.2)
(trikafka)                     ``ack_timeout_s``               PRODUCE_ACKED ``timeout_ms``
(trikafka)                     ``partitions_per_broker``       static list: ``None`` = 0.7 (partition -1)
(trikafka)                     ``reconnect_backoff_s``/``reconnect_backoff_max_s``
(trikafka)                     ``leader_wait_s``               replicated topics: how long a message
                                                               may wait for a partition's new leader
=============================  ==============================  ==========================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from trikafka.client.addresses import parse_broker_addresses
from trikafka.wire import Codec

from .partitioner import PartitionFn

SYNC = "sync"
ASYNC = "async"

BrokerSpec = tuple[int, str, int]  # (broker id, host, port)
# A message value before serialization: bytes, or whatever the configured serializer takes.
Value = Any


@dataclass(frozen=True)
class ProducerConfig:
    """Validated producer settings (see the module docstring for the 0.7 names)."""

    brokers: tuple[BrokerSpec, ...] | None = None
    zk_connect: str | None = None
    zk_session_timeout_s: float = 6.0
    producer_type: str = SYNC
    partitioner: PartitionFn | None = None
    serializer: Callable[[Value], bytes] | None = None
    compression_codec: Codec = Codec.NONE
    compressed_topics: frozenset[str] = frozenset()
    gzip_level: int = 6
    batch_size: int = 200
    queue_time_s: float = 5.0
    queue_size: int = 10_000
    enqueue_timeout_s: float | None = None
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_message_size: int = 1_000_000
    num_retries: int = 3
    acks: int = 0
    ack_timeout_s: float = 10.0
    partitions_per_broker: int | Mapping[str, int] | None = None
    reconnect_backoff_s: float = 0.1
    reconnect_backoff_max_s: float = 5.0
    retry_backoff_s: float = 0.1
    # Replicated topics (docs/protocol.md §12): a failover (leader gone, NOT_LEADER,
    # no leader yet) is waited out this long on top of num_retries.
    leader_wait_s: float = 30.0
    # Keyed messages for compacted topics (docs/protocol.md §11.2) [T]:
    # every topic with write_keys, else the topics named here.
    write_keys: bool = False
    keyed_topics: frozenset[str] = frozenset()
    # Auditing (docs/protocol.md §13): envelope every payload, publish counts every window.
    audit: bool = False
    audit_window_s: float = 60.0

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.brokers is not None:
            set_("brokers", parse_broker_list(self.brokers))
        set_("compression_codec", parse_codec(self.compression_codec))
        set_("compressed_topics", frozenset(self.compressed_topics or ()))
        set_("keyed_topics", frozenset(self.keyed_topics or ()))
        if self.producer_type not in (SYNC, ASYNC):
            raise ValueError(f"producer_type must be 'sync' or 'async', not {self.producer_type!r}")
        if self.acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, not {self.acks!r}")
        for name in ("batch_size", "queue_size", "max_message_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive int, not {getattr(self, name)!r}")
        if not isinstance(self.gzip_level, int) or not 1 <= self.gzip_level <= 9:
            raise ValueError(f"gzip_level must be 1..9, not {self.gzip_level!r}")
        if self.num_retries < 0:
            raise ValueError("num_retries must be >= 0")
        for name in ("queue_time_s", "connect_timeout_s", "request_timeout_s", "ack_timeout_s",
                     "reconnect_backoff_s", "reconnect_backoff_max_s", "retry_backoff_s", "leader_wait_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.audit_window_s <= 0:
            raise ValueError("audit_window_s must be > 0")
        if self.enqueue_timeout_s is not None and self.enqueue_timeout_s < 0:
            raise ValueError("enqueue_timeout_s must be >= 0 or None")
        ppb = self.partitions_per_broker
        if isinstance(ppb, Mapping):
            set_("partitions_per_broker", dict(ppb))
        elif ppb is not None and (not isinstance(ppb, int) or ppb < 1):
            raise ValueError(f"partitions_per_broker must be >= 1, not {ppb!r}")

    @property
    def is_async(self) -> bool:
        return self.producer_type == ASYNC

    def writes_keys(self, topic: str) -> bool:
        """Whether messages to ``topic`` are written as keyed messages (key and value apart)."""
        return self.write_keys or topic in self.keyed_topics

    def codec_for(self, topic: str) -> Codec:
        """``compression.codec`` for ``topic``, honouring ``compressed.topics``."""
        if self.compression_codec == Codec.NONE:
            return Codec.NONE
        if self.compressed_topics and topic not in self.compressed_topics:
            return Codec.NONE
        return self.compression_codec

    def static_partitions(self, topic: str) -> int | None:
        """Partitions per broker of ``topic`` in static mode (``None``: unknown, send -1)."""
        ppb = self.partitions_per_broker
        if isinstance(ppb, Mapping):
            return ppb.get(topic, ppb.get("*"))
        return ppb

    def replace(self, **changes: Any) -> "ProducerConfig":  # fields of different types
        """A copy with ``changes`` (field names as keywords), validated again."""
        return dataclasses.replace(self, **changes)


# 0.7 property -> (keyword, converter); each converter returns its field's type, hence Any.
_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "broker.list": ("brokers", str),
    "zk.connect": ("zk_connect", str),
    "zk.sessiontimeout.ms": ("zk_session_timeout_s", lambda v: int(v) / 1000),
    "producer.type": ("producer_type", str),
    "compression.codec": ("compression_codec", str),
    "compressed.topics": ("compressed_topics", lambda v: frozenset(t.strip() for t in v.split(",") if t.strip())),
    "batch.size": ("batch_size", int),
    "queue.time": ("queue_time_s", lambda v: int(v) / 1000),
    "queue.size": ("queue_size", int),
    "queue.enqueueTimeout.ms": ("enqueue_timeout_s", lambda v: None if int(v) < 0 else int(v) / 1000),
    "connect.timeout.ms": ("connect_timeout_s", lambda v: int(v) / 1000),
    "socket.timeout.ms": ("request_timeout_s", lambda v: int(v) / 1000),
    "max.message.size": ("max_message_size", int),
    "num.retries": ("num_retries", int),
}
# Accepted and ignored: they tune things trikafka does differently.
_IGNORED_PROPERTIES = {"buffer.size", "reconnect.interval", "reconnect.time.interval.ms",
                       "zk.read.num.retries", "zk.connectiontimeout.ms", "serializer.class",
                       "partitioner.class", "event.handler", "callback.handler"}


def config_from_properties(properties: Mapping[str, str], **overrides: Any) -> ProducerConfig:  # fields' types
    """A ``ProducerConfig`` from 0.7 ``producer.properties`` keys (plus keyword overrides).

    ``serializer.class``/``partitioner.class`` name Java classes and are
    ignored: pass ``serializer=``/``partitioner=`` callables instead.
    Unknown keys raise ``ValueError``.
    """
    kwargs: dict[str, Any] = {}  # keyword -> a value of that field's type
    for key, value in properties.items():
        if key in _PROPERTIES:
            name, convert = _PROPERTIES[key]
            kwargs[name] = convert(str(value).strip())
        elif key not in _IGNORED_PROPERTIES:
            raise ValueError(f"unknown producer property {key!r}")
    kwargs.update(overrides)
    return ProducerConfig(**kwargs)


def parse_codec(value: Codec | int | str) -> Codec:
    """``none``/``gzip``/``snappy`` (any case), 0/1/2, or a ``Codec``."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isdigit():
            return Codec(int(text))
        try:
            return Codec[text.upper()]
        except KeyError:
            raise ValueError(f"unknown compression codec {value!r}") from None
    return Codec(value)


def parse_broker_list(value: str | Sequence[Any]) -> tuple[BrokerSpec, ...]:  # items checked below
    """``"[ID:]HOST:PORT,..."`` (the one address syntax, ``client.parse_broker_addresses``;
    ids 0, 1, ... in order where left out) or a sequence of ``(id, host, port)`` /
    ``(host, port)`` / ``"[ID:]HOST:PORT"``."""
    if isinstance(value, str):
        return tuple((a.broker_id, a.host, a.port) for a in parse_broker_addresses(value))
    specs: list[BrokerSpec] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            [address] = parse_broker_addresses(item)  # an id, if given, is kept; else the position
            item = (address.broker_id if item.count(":") == 2 else index, address.host, address.port)
        item = tuple(item)
        if len(item) == 2:
            item = (index, *item)
        if len(item) != 3:
            raise ValueError(f"broker {item!r} is not (id, host, port) or (host, port)")
        broker_id, host, port = int(item[0]), str(item[1]), int(item[2])
        if broker_id < 0 or not host or not 0 < port < 65536:
            raise ValueError(f"bad broker {item!r}")
        specs.append((broker_id, host, port))
    if not specs:
        raise ValueError("the broker list is empty")
    if len({b for b, _, _ in specs}) != len(specs):
        raise ValueError(f"duplicate broker ids in {value!r}")
    return tuple(specs)


__all__ = ["ProducerConfig", "config_from_properties", "parse_broker_list", "parse_codec",
           "SYNC", "ASYNC", "BrokerSpec", "Value"]
