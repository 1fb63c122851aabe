"""Pure codecs for the 0.7 consumer registry in ZooKeeper (docs/protocol.md §8.1, §8.3).

Nothing here does I/O; the group consumer reads and writes the znodes and uses
these functions for the values and names.

Consumer ids and thread ids::

    new_consumer_id(group_id, *, consumer_id=None, hostname=None,
                    clock_ms=None, uuid_factory=uuid.uuid4) -> str
    uuid_hex8(u: uuid.UUID) -> str
    thread_ids(consumer_id, num_streams) -> list[str]      # "<id>-0" ... "<id>-(k-1)"

Partition node names (``/consumers/<g>/owners|offsets/<topic>/<b>-<p>``)::

    partition_name(broker_id, partition) -> str            # "3-0"
    parse_partition_name(name) -> tuple[int, int]

Registry value of ``/consumers/<g>/ids/<consumerId>``::

    decode_topic_count(data: bytes) -> TopicCount          # static JSON, *k*regex, !k!regex
    StaticTopicCount(counts: Mapping[str, int])            # .encode() -> b'{ "t1": 2,"t2": 1 }'
    WildcardTopicCount(topic_filter: TopicFilter, num_streams: int)   # .encode() -> b"*4*foo.*"
    TopicCount.streams_per_topic(broker_topics) -> dict[str, int]
    TopicCount.thread_ids_per_topic(consumer_id, broker_topics) -> dict[str, list[str]]
    whitelist(raw) / blacklist(raw) -> TopicFilter;  TopicFilter.allows(topic) -> bool
    normalize_topic_filter(raw) -> str                     # Kafka's TopicFilter clean-up

Offsets and owners::

    encode_offset(offset) -> bytes;   decode_offset(data) -> int | None
    encode_owner(thread_id) -> bytes; decode_owner(data) -> str

Every malformed value raises ``RegistryValueError`` (a ``ValueError``), except
offsets, which read as absent (``None``) per the spec's [T] rule.

Decisions where 0.7 is silent or fails (all [T]):

* A stream count ``k <= 0`` decodes (the value is valid JSON with an int) and
  gives that consumer no threads for the topic.  0.7's Scala ``assert(k >= 1)``
  would instead fail every rebalance of the whole group.  Encoding requires
  ``k >= 1``.
* ``uuid_hex8``: Java's ``substring(0, 8)`` throws when the unpadded hex form
  is shorter than 8 digits (probability about 2**-36); we left-pad with ``0``.
* A negative or out-of-range offset reads as absent, like a non-numeric one.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from trikafka.zk.errors import RegistryValueError
from trikafka.zk.paths import parse_partition_name, partition_name
from trikafka.zk.registry_values import decode_offset, encode_offset

from .javaregex import JavaRegexError, compile_java_regex

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
WHITELIST_MARKER = "*"
BLACKLIST_MARKER = "!"

__all__ = [
    "RegistryValueError", "new_consumer_id", "uuid_hex8", "thread_ids",
    "partition_name", "parse_partition_name", "normalize_topic_filter",
    "TopicFilter", "whitelist", "blacklist", "TopicCount", "StaticTopicCount",
    "WildcardTopicCount", "decode_topic_count", "encode_offset", "decode_offset",
    "encode_owner", "decode_owner",
]


# ---------------------------------------------------------------- ids


def _check_node_name(name: str, what: str) -> None:
    """ZooKeeper's rules for one path component (so a bad id fails here, not in ZK)."""
    if not name or name in (".", "..") or "/" in name:
        raise RegistryValueError(f"{what} {name!r} is not a valid znode name")
    for ch in name:
        code = ord(ch)
        if code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or code >= 0xFFF0:
            raise RegistryValueError(f"{what} {name!r} contains the character {ch!r}")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def uuid_hex8(u: uuid.UUID) -> str:
    """First 8 chars of Java's ``Long.toHexString(u.getMostSignificantBits())``.

    ``toHexString`` is unsigned, lowercase and has no leading zeros, so the
    8 chars start at the first non-zero hex digit.
    """
    return format(u.int >> 64, "x")[:8].rjust(8, "0")


def new_consumer_id(
    group_id: str,
    *,
    consumer_id: str | None = None,
    hostname: str | None = None,
    clock_ms: Callable[[], int] | None = None,
    uuid_factory: Callable[[], uuid.UUID] = uuid.uuid4,
) -> str:
    """``<group>_<hostname>-<millis>-<8 hex>``, or ``<group>_<consumer_id>`` when given.

    ``consumer_id`` is 0.7's ``consumerid`` setting (meant for tests).
    ``hostname`` defaults to ``socket.gethostname()``, ``clock_ms`` to the wall clock.
    """
    _check_node_name(group_id, "group id")
    if consumer_id is None:
        host = socket.gethostname() if hostname is None else hostname
        millis = (clock_ms or _wall_clock_ms)()
        consumer_id = f"{host}-{millis}-{uuid_hex8(uuid_factory())}"
    result = f"{group_id}_{consumer_id}"
    _check_node_name(result, "consumer id")
    return result


def thread_ids(consumer_id: str, num_streams: int) -> list[str]:
    """Thread ids ``<consumer_id>-0 ... <consumer_id>-(k-1)``; none when ``k <= 0``."""
    return [f"{consumer_id}-{i}" for i in range(num_streams)]


# ---------------------------------------------------------------- topic filters


def _java_trim(text: str) -> str:
    """``String.trim()``: strips every char <= U+0020 (not Unicode whitespace)."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def normalize_topic_filter(raw: str) -> str:
    """Kafka's clean-up of a user filter: trim, ``,``->``|``, drop spaces, strip quotes."""
    regex = _java_trim(raw).replace(",", "|").replace(" ", "")
    return regex.lstrip("\"'").rstrip("\"'")  # property files may bring quotes


@dataclass(frozen=True)
class TopicFilter:
    """A whitelist or blacklist over topic names; ``regex`` is already normalized.

    Matching is whole-name (Java ``String.matches``) with the Java pattern
    translated by ``javaregex``; construction raises ``RegistryValueError`` for
    a regex that is invalid or not translatable.
    """

    regex: str
    is_whitelist: bool
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "_pattern", compile_java_regex(self.regex))
        except JavaRegexError as exc:
            raise RegistryValueError(f"{self.regex!r} is an invalid regex: {exc}") from None

    @property
    def marker(self) -> str:
        return WHITELIST_MARKER if self.is_whitelist else BLACKLIST_MARKER

    def allows(self, topic: str) -> bool:
        """Whitelist: the regex matches the whole name; blacklist: it does not."""
        return (self._pattern.fullmatch(topic) is not None) == self.is_whitelist


def whitelist(raw: str) -> TopicFilter:
    """A whitelist from a user's filter string (normalized first, as Kafka does)."""
    return TopicFilter(normalize_topic_filter(raw), True)


def blacklist(raw: str) -> TopicFilter:
    """A blacklist from a user's filter string (normalized first, as Kafka does)."""
    return TopicFilter(normalize_topic_filter(raw), False)


# ---------------------------------------------------------------- topic counts


class TopicCount(ABC):
    """What one consumer subscribes to: topic -> number of streams (threads)."""

    @abstractmethod
    def streams_per_topic(self, broker_topics: Iterable[str]) -> dict[str, int]:
        """Topic -> stream count; ``broker_topics`` = children of ``/brokers/topics``."""

    @abstractmethod
    def encode(self) -> bytes:
        """The registry value exactly as Kafka 0.7 writes it (UTF-8)."""

    def thread_ids_per_topic(self, consumer_id: str, broker_topics: Iterable[str]) -> dict[str, list[str]]:
        """Topic -> this consumer's thread ids (0.7 ``getConsumerThreadIdsPerTopic``)."""
        return {t: thread_ids(consumer_id, k) for t, k in self.streams_per_topic(broker_topics).items()}


def _check_stream_count(num_streams: object) -> int:
    if type(num_streams) is not int or not INT32_MIN <= num_streams <= INT32_MAX:
        raise RegistryValueError(f"stream count {num_streams!r} is not an int32")
    return num_streams


def _check_writable(num_streams: int) -> None:
    if num_streams < 1:
        raise RegistryValueError(f"cannot register {num_streams} streams; need >= 1")


@dataclass(frozen=True)
class StaticTopicCount(TopicCount):
    """Explicit topics; encodes as ``{ "t1": 2,"t2": 1 }`` in ``counts`` order."""

    counts: Mapping[str, int]

    def __post_init__(self) -> None:
        checked = {}
        for topic, k in dict(self.counts).items():
            if not isinstance(topic, str):
                raise RegistryValueError(f"topic {topic!r} is not a string")
            checked[topic] = _check_stream_count(k)
        object.__setattr__(self, "counts", MappingProxyType(checked))

    def __hash__(self) -> int:
        return hash(tuple(self.counts.items()))

    def streams_per_topic(self, broker_topics: Iterable[str] = ()) -> dict[str, int]:
        """The explicit counts; a static consumer does not look at ``broker_topics``."""
        return dict(self.counts)

    def encode(self) -> bytes:
        entries = []
        for topic, k in self.counts.items():
            if not topic:
                raise RegistryValueError("cannot register an empty topic name")
            _check_writable(k)
            # For every legal topic name json.dumps is just the name in quotes,
            # which is what Kafka writes (it never escapes).
            entries.append(f"{json.dumps(topic, ensure_ascii=False)}: {k}")
        return ("{ " + ",".join(entries) + " }").encode("utf-8")


@dataclass(frozen=True)
class WildcardTopicCount(TopicCount):
    """Every current broker topic the filter allows, each with ``num_streams``."""

    topic_filter: TopicFilter
    num_streams: int

    def __post_init__(self) -> None:
        _check_stream_count(self.num_streams)

    def streams_per_topic(self, broker_topics: Iterable[str]) -> dict[str, int]:
        return {t: self.num_streams for t in broker_topics if self.topic_filter.allows(t)}

    def encode(self) -> bytes:
        _check_writable(self.num_streams)
        marker = self.topic_filter.marker
        return f"{marker}{self.num_streams}{marker}{self.topic_filter.regex}".encode("utf-8")


_WILDCARD_VALUE = re.compile(r"([*!])([0-9]+)\1(.*)", re.ASCII | re.DOTALL)
_JAVA_LINE_TERMINATORS = frozenset("\n\r\u0085\u2028\u2029")


def _decode_text(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RegistryValueError(f"{what} is not valid UTF-8: {exc}") from None


def decode_topic_count(data: bytes) -> TopicCount:
    """Parse a ``/consumers/<g>/ids/<id>`` value (any of the three forms of §8.3)."""
    text = _decode_text(data, "consumer registry value")
    if text.startswith((WHITELIST_MARKER, BLACKLIST_MARKER)):
        return _decode_wildcard(text)
    return _decode_static(text)


def _decode_wildcard(text: str) -> WildcardTopicCount:
    match = _WILDCARD_VALUE.fullmatch(text)
    if not match or _JAVA_LINE_TERMINATORS.intersection(match.group(3)):
        raise RegistryValueError(f"malformed wildcard registry value {text!r}")
    num_streams = int(match.group(2))
    if num_streams > INT32_MAX:
        raise RegistryValueError(f"stream count in {text!r} overflows int32")
    # Kafka re-applies the filter normalization when it reads the value back.
    regex = normalize_topic_filter(match.group(3))
    return WildcardTopicCount(TopicFilter(regex, match.group(1) == WHITELIST_MARKER), num_streams)


def _reject_non_int(literal: str) -> None:
    raise RegistryValueError(f"stream count {literal} is not an integer")


def _decode_static(text: str) -> StaticTopicCount:
    try:
        parsed = json.loads(text, parse_float=_reject_non_int, parse_constant=_reject_non_int)
    except json.JSONDecodeError as exc:
        raise RegistryValueError(
            f"registry value {text!r} is neither JSON nor a wildcard (a bare topic name, "
            f"as samsa writes, is not valid): {exc}"
        ) from None
    if not isinstance(parsed, dict):
        raise RegistryValueError(f"registry value {text!r} is not a JSON object")
    return StaticTopicCount(parsed)


# ---------------------------------------------------------------- offsets and owners

def encode_owner(thread_id: str) -> bytes:
    """An owner node's value: the owning thread id, UTF-8."""
    if not thread_id:
        raise RegistryValueError("owner thread id must not be empty")
    return thread_id.encode("utf-8")


def decode_owner(data: bytes) -> str:
    """The thread id stored in an owner node."""
    return _decode_text(data, "owner value")
