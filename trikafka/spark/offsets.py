"""Partition keys and the offset documents the Spark source reads and writes.

A 0.7 offset is a byte position scoped to one broker-partition (spec §4), so
every offset is keyed by ``(topic, broker, partition)``.  Offset documents are
JSON objects laid out like the ZooKeeper offsets registry (spec §8.1)::

    {"pageviews": {"0-0": 1523, "0-1": 0, "1-0": 88}}

i.e. topic, then ``<brokerId>-<partition>``, then the next byte offset to read.
A partition of a replicated topic (docs/protocol.md §12.9) has no fixed broker:
its key has ``broker`` None and its name is the plain ``<partition>``, and it is
read from whichever replica leads it (offsets are the same on every replica).
The same layout serves ``startingOffsets`` / ``endingOffsets`` (where -2 means
earliest and -1 latest) and Spark's streaming checkpoints.  Spark compares
offsets as JSON *strings*, so documents are always built in one canonical
order: topics sorted, then brokers and partitions numerically.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from trikafka.wire import OFFSETS_EARLIEST as EARLIEST  # OFFSETS' special times (spec §5.5)
from trikafka.wire import OFFSETS_LATEST as LATEST
from trikafka.zk.errors import InvalidPathError
from trikafka.zk.paths import parse_partition_name, partition_name, validate_topic

_GROUP_PREFIX = "group:"
_GROUP_NAME_RE = re.compile(r"[^/\x00-\x1f]+")


class OffsetSpecError(ValueError):
    """An offsets option or document that cannot be understood."""


@dataclass(frozen=True, slots=True, order=True)
class PartitionKey:
    """One broker-partition of a topic: the unit of reading and of offsets."""

    topic: str
    broker: int | None  # None: a partition of a replicated topic, read from its leader
    partition: int

    @property
    def name(self) -> str:
        """``<brokerId>-<partition>`` (``<partition>`` if replicated), as in the ZooKeeper registry."""
        return partition_name(self.broker, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}/{self.name}"


def _sort_key(key: PartitionKey) -> tuple[str, int, int]:
    return (key.topic, -1 if key.broker is None else key.broker, key.partition)


def offsets_to_document(offsets: Mapping[PartitionKey, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-able document for ``offsets`` (deterministic key order)."""
    doc: dict[str, dict[str, int]] = {}
    for key in sorted(offsets, key=_sort_key):
        doc.setdefault(key.topic, {})[key.name] = int(offsets[key])
    return doc


def offsets_to_json(offsets: Mapping[PartitionKey, int]) -> str:
    """Compact JSON of :func:`offsets_to_document`."""
    return json.dumps(offsets_to_document(offsets), separators=(",", ":"))


def offsets_from_document(doc: object, *, allow_special: bool = False) -> dict[PartitionKey, int]:
    """Parse an offset document; ``allow_special`` admits -2 (earliest) and -1 (latest)."""
    if not isinstance(doc, dict):
        raise OffsetSpecError(f"an offset document must be a JSON object, got {type(doc).__name__}")
    result: dict[PartitionKey, int] = {}
    for topic, parts in doc.items():
        try:
            validate_topic(topic)
        except InvalidPathError as exc:
            raise OffsetSpecError(str(exc)) from None
        if not isinstance(parts, dict):
            raise OffsetSpecError(f"offsets of topic {topic!r} must be an object of '<broker>-<partition>' keys")
        for name, value in parts.items():
            try:
                broker, partition = parse_partition_name(name)
            except InvalidPathError as exc:
                raise OffsetSpecError(f"topic {topic!r}: {exc}") from None
            result[PartitionKey(topic, broker, partition)] = _check_offset(value, allow_special, f"{topic}/{name}")
    return result


def _check_offset(value: object, allow_special: bool, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetSpecError(f"offset of {where} must be an integer, got {value!r}")
    lowest = EARLIEST if allow_special else 0
    if value < lowest:
        hint = " (-2 = earliest, -1 = latest)" if allow_special else ""
        raise OffsetSpecError(f"offset of {where} is {value}; must be >= {lowest}{hint}")
    return value


def offsets_from_json(text: str, *, allow_special: bool = False) -> dict[PartitionKey, int]:
    """Parse the JSON text of an offset document."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetSpecError(f"offsets are not valid JSON: {exc}") from None
    return offsets_from_document(doc, allow_special=allow_special)


def align_offsets(offsets: Mapping[PartitionKey, int], known: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
    """``offsets`` with each key written as the ``known`` partition it names.

    A key without a broker (``{"t": {"0": 14}}``, the shape Spark's Kafka source uses) names
    partition 0 of a 0.7 topic when exactly one broker has that partition; a 0.7 topic's
    partition held by several brokers, or a broker-qualified key of a replicated topic, is
    an OffsetSpecError that says how to name it.  Topics with no known partition keep
    their keys as written.
    """
    by_topic: dict[str, list[PartitionKey]] = {}
    for key in known:
        by_topic.setdefault(key.topic, []).append(key)
    aligned: dict[PartitionKey, int] = {}
    for key, offset in offsets.items():
        found = by_topic.get(key.topic)
        if not found or key in found:
            aligned[key] = offset
            continue
        replicated = all(k.broker is None for k in found)
        if key.broker is not None and replicated:
            raise OffsetSpecError(f"topic {key.topic!r} is replicated: name its partitions by number "
                                  f"({key.partition!r}, not {key.name!r})")
        candidates = [k for k in found if k.partition == key.partition] if key.broker is None else []
        if len(candidates) == 1:
            aligned[candidates[0]] = offset
        elif len(candidates) > 1:
            brokers = ", ".join(str(k.broker) for k in sorted(candidates))
            raise OffsetSpecError(f"partition {key.partition} of topic {key.topic!r} is on brokers {brokers}: "
                                  f"name it '<broker>-<partition>' (e.g. {candidates[0].name!r})")
        elif key.broker is None and not replicated:
            raise OffsetSpecError(f"topic {key.topic!r} has no partition {key.partition} on any broker")
        else:
            aligned[key] = offset  # a broker's partition not discovered (e.g. its broker is down)
    return aligned


# -- the startingOffsets / endingOffsets options ------------------------------


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A parsed offsets option.

    ``kind`` is ``"earliest"``, ``"latest"``, ``"group"`` (a consumer group's
    committed offsets, ``group`` names it) or ``"explicit"`` (``explicit``
    maps keys to offsets, -2/-1 allowed; partitions it does not name use
    ``default``).
    """

    kind: str
    group: str | None = None
    explicit: tuple[tuple[PartitionKey, int], ...] = ()
    default: int = EARLIEST

    @property
    def explicit_offsets(self) -> dict[PartitionKey, int]:
        return dict(self.explicit)


def parse_offset_spec(text: str, *, option: str, allow_group: bool, default_special: int) -> OffsetSpec:
    """Parse ``earliest`` | ``latest`` | ``group:<name>`` | a JSON offset document."""
    value = text.strip()
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(lowered)
    if lowered.startswith(_GROUP_PREFIX):
        if not allow_group:
            raise OffsetSpecError(f"{option} does not accept a consumer group")
        group = value[len(_GROUP_PREFIX):]
        if not _GROUP_NAME_RE.fullmatch(group) or group in (".", ".."):
            raise OffsetSpecError(f"{option}: invalid consumer group name {group!r}")
        return OffsetSpec("group", group=group)
    if value.startswith("{"):
        offsets = offsets_from_json(value, allow_special=True)
        return OffsetSpec("explicit", explicit=tuple(sorted(offsets.items())), default=default_special)
    choices = "earliest, latest, group:<name> or a JSON offset document" if allow_group else \
        "latest or a JSON offset document"
    raise OffsetSpecError(f"{option}={text!r}: expected {choices}")
