"""The options of the source's Kafka-format mode: spark-sql-kafka's names, parsed and checked once.

The option ``kafka.bootstrap.servers`` selects this mode (``source``); the
rest is the subset of Spark's Kafka source (its integration guide) that a
reader of Kafka-format topics (docs/protocol.md §16.6) needs:

=========================  ==========================================================
option                     meaning
=========================  ==========================================================
kafka.bootstrap.servers    ``host:port,...`` of brokers' Kafka listeners (§16.1)
subscribe                  comma-separated topic names
subscribePattern           regex matched against the whole topic name
assign                     JSON ``{"topic":[0,1]}``: these partitions only
startingOffsets            earliest | latest | JSON ``{"topic":{"0":23,"1":-2}}`` (-2 earliest,
                           -1 latest); default earliest in batch, latest in streaming
endingOffsets              batch only: latest (default) | JSON (-1 latest)
maxOffsetsPerTrigger       streaming: offsets per micro-batch, shared by lag
failOnDataLoss             true (default): error when retention deleted offsets to read;
                           false: start at the partition's log start instead
includeHeaders             false (default) | true: the ``headers`` column
kafka.isolation.level      read_committed (default here) | read_uncommitted
kafka.max.partition.fetch.bytes  bytes per partition per Fetch (default 1048576)
kafka.request.timeout.ms   socket timeout of planners and tasks (default 30000)
=========================  ==========================================================

Exactly one of ``subscribe``, ``subscribePattern`` and ``assign``.  Spark's
rules for JSON offsets hold: a ``startingOffsets`` document names every
partition read, batch reads start at no -1 and end at no -2.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping

from trikafka.client.addresses import parse_broker_addresses

from .options import OptionError, bool_option, int_option

BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
EARLIEST = -2  # Spark's Kafka source's JSON values (and ListOffsets' special times)
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_ISOLATION_LEVELS = {"read_committed": READ_COMMITTED, "read_uncommitted": READ_UNCOMMITTED}
DEFAULT_PARTITION_FETCH_BYTES = 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
_KNOWN = {
    BOOTSTRAP_OPTION, "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "maxoffsetspertrigger", "failondataloss", "includeheaders", "kafka.isolation.level",
    "kafka.max.partition.fetch.bytes", "kafka.request.timeout.ms",
}

TopicPartition = tuple[str, int]


def is_kafka_mode(raw: Mapping[str, str]) -> bool:
    """Whether Spark's options select the Kafka-format mode (``kafka.bootstrap.servers`` is set)."""
    return any(str(k).lower() == BOOTSTRAP_OPTION for k in raw)


@dataclass(frozen=True, slots=True)
class OffsetsOption:
    """``startingOffsets``/``endingOffsets``: ``EARLIEST``/``LATEST`` for every partition, or per partition."""

    default: int
    explicit: tuple[tuple[TopicPartition, int], ...] = ()

    @property
    def is_explicit(self) -> bool:
        return bool(self.explicit)


@dataclass(frozen=True, slots=True)
class KafkaSourceOptions:
    """Everything the Kafka-format mode needs, as plain picklable data."""

    bootstrap: str
    topics: tuple[str, ...]
    topic_pattern: str | None
    assign: tuple[TopicPartition, ...]
    starting: OffsetsOption
    ending: OffsetsOption
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: int
    partition_fetch_bytes: int
    timeout_s: float

    def selects(self, topic: str) -> bool:
        """Whether ``topic`` is read (``subscribe``/``subscribePattern``; ``assign`` names partitions)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.topics


def parse_kafka_options(raw: Mapping[str, str], *, streaming: bool) -> KafkaSourceOptions:
    """Check and convert Spark's option mapping for the Kafka-format mode (keys case-insensitive)."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise OptionError(f"unknown option(s) of the Kafka-format trikafka source: {', '.join(unknown)}")
    bootstrap = opts[BOOTSTRAP_OPTION].strip()
    try:
        parse_broker_addresses(bootstrap)
    except ValueError as exc:
        raise OptionError(f"{BOOTSTRAP_OPTION}: {exc}") from None
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if opts.get(name, "").strip()]
    if len(chosen) != 1:
        raise OptionError("set exactly one of 'subscribe', 'subscribePattern' and 'assign'")
    topics = tuple(dict.fromkeys(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()))
    pattern = opts.get("subscribepattern", "").strip() or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"subscribePattern {pattern!r}: {exc}") from None
    assign = _assign(opts["assign"]) if "assign" in chosen else ()
    starting = _offsets(opts, "startingoffsets", "startingOffsets", "latest" if streaming else "earliest")
    ending = _offsets(opts, "endingoffsets", "endingOffsets", "latest")
    if streaming and "endingoffsets" in opts:
        raise OptionError("endingOffsets applies to batch reads only")
    if not streaming:
        if starting.default == LATEST or any(o == LATEST for _, o in starting.explicit):
            raise OptionError("startingOffsets: latest (-1) is not allowed in a batch read")
        if ending.default == EARLIEST or any(o == EARLIEST for _, o in ending.explicit):
            raise OptionError("endingOffsets: earliest (-2) is not allowed in a batch read")
    per_trigger = opts.get("maxoffsetspertrigger")
    level = opts.get("kafka.isolation.level", "read_committed").strip().lower()
    if level not in _ISOLATION_LEVELS:
        raise OptionError(f"kafka.isolation.level must be read_committed or read_uncommitted, got {level!r}")
    return KafkaSourceOptions(
        bootstrap=bootstrap, topics=topics, topic_pattern=pattern, assign=assign, starting=starting,
        ending=ending,
        max_offsets_per_trigger=None if per_trigger is None else int_option(opts, "maxoffsetspertrigger", 0, 1),
        fail_on_data_loss=bool_option(opts, "failondataloss", True),
        include_headers=bool_option(opts, "includeheaders", False),
        isolation_level=_ISOLATION_LEVELS[level],
        partition_fetch_bytes=int_option(opts, "kafka.max.partition.fetch.bytes", DEFAULT_PARTITION_FETCH_BYTES, 1),
        timeout_s=int_option(opts, "kafka.request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS, 1) / 1000,
    )


def _assign(text: str) -> tuple[TopicPartition, ...]:
    doc = _json(text, "assign")
    if not isinstance(doc, dict) or not all(
            isinstance(parts, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            for parts in doc.values()):
        raise OptionError(f'assign must be a JSON object of partition lists, like {{"topic":[0,1]}}; got {text!r}')
    return tuple(sorted({(str(topic), p) for topic, parts in doc.items() for p in parts}))


def _offsets(opts: dict[str, str], key: str, name: str, default: str) -> OffsetsOption:
    text = opts.get(key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetsOption(EARLIEST if text.lower() == "earliest" else LATEST)
    shape = f'{name} must be earliest, latest or JSON like {{"topic":{{"0":23,"1":-2}}}}; got {text!r}'
    if not text.startswith("{"):
        raise OptionError(shape)
    doc = _json(text, name)
    if not isinstance(doc, dict) or not doc or not all(isinstance(parts, dict) for parts in doc.values()):
        raise OptionError(shape)
    explicit: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) \
                    or offset < EARLIEST:
                raise OptionError(f"{name}: {topic}/{partition}: {offset!r} is not an offset "
                                  "(>= 0, -2 earliest, -1 latest)")
            explicit[(str(topic), int(partition))] = offset
    return OffsetsOption(LATEST if key == "endingoffsets" else EARLIEST, tuple(sorted(explicit.items())))


def _json(text: str, name: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{name} is not valid JSON: {exc}") from None
