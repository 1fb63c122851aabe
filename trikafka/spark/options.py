"""The options of ``spark.read.format("trikafka")``, parsed and checked once.

Spark hands options over as a case-insensitive mapping of strings; this
module turns them into a frozen, picklable ``SourceOptions`` and rejects
anything it does not understand with a message naming the option.

=====================  ==========================================================
option                 meaning
=====================  ==========================================================
brokers                ``id:host:port,...`` static broker list (or use zookeeper)
zookeeper              ZooKeeper connect string of the registry (spec §8)
topics                 comma-separated topic names (alias: subscribe, as in Spark's Kafka source)
topicPattern           regex matched against the whole topic name (alias: subscribePattern)
failOnMissingTopic     true (default): a named topic no broker has, a pattern matching no
                       topic, or a registry with no brokers fails a batch read or a stream's
                       first start; false reads nothing from them instead
partitionsPerBroker    with a static broker list: partitions per broker, overriding what each
                       broker reports (METADATA, or the FETCH probe on a 0.7 broker)
startingOffsets        earliest (default) | latest | group:<name> | JSON document
endingOffsets          batch only: latest (default) | JSON document
groupDefaultOffset     where group:<name> starts a partition it has no offset for:
                       earliest (default) or latest
fetchSize              bytes per fetch (default 1048576: one fetch is one RecordBatch)
maxFetchSize           a fetch grows up to this to fit one big message (default 100 MiB)
maxBytesPerTrigger     streaming: bytes per micro-batch, never splitting a message
commitToGroup          write consumed offsets to this group's ZooKeeper registry
failOnDataLoss         true (default): error when retention deleted unread data
timeoutSeconds         socket and ZooKeeper timeout (default 30)
brokerSockets          ``id=path,...``: the Unix-domain socket of each broker's local listener
                       (its unix.socket.path); a task or planner on that broker's machine
                       connects there instead of over TCP, elsewhere (no such path) over TCP
shortCircuit           true (default) | false: over brokerSockets, fetches take the segment
                       file's descriptor and read the bytes from it (FETCH_LOCAL,
                       docs/protocol.md §9.8): no broker sendfile, no socket copy
prefetch               false (default) | true: each task fetches and decodes its next response in
                       a thread while Spark takes the current batch; faster where cores are free,
                       slower where Spark already fills them (bench/spark_bench.py --prefetch)
=====================  ==========================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from trikafka.util.settings import parse_bool
from trikafka.wire.metadata import BrokerAddress

from .cluster import ClusterConfigError, StaticCluster, ZooKeeperCluster, parse_broker_list
from .offsets import EARLIEST, LATEST, OffsetSpec, OffsetSpecError, parse_offset_spec

# 1 MiB (one fetch is one RecordBatch, ~5,000 rows of 200 B): with short-circuit reads a fetch
# inside a granted range costs no request, so only the decoding and Spark's side see the size;
# bench/spark_bench.py --unix-sockets gave 86-91% of the floor in batch (4 runs) against 82-88%
# with 4 MiB (5 runs), and over TCP 78-79% against 77%.  Likely why (not measured apart): a
# 1 MiB fetch is decoded within the core's 2 MiB cache, and the JVM's batches stay small.
DEFAULT_FETCH_BYTES = 1024 * 1024
DEFAULT_MAX_FETCH_BYTES = 100 * 1024 * 1024
# Smallest useful fetch: one entry prefix plus a magic-1 header.
MIN_FETCH_BYTES = 10
_KNOWN = {
    "brokers", "zookeeper", "topics", "topicpattern", "partitionsperbroker", "startingoffsets",
    "endingoffsets", "groupdefaultoffset", "fetchsize", "maxfetchsize", "maxbytespertrigger",
    "committogroup", "failondataloss", "failonmissingtopic", "timeoutseconds", "prefetch", "brokersockets",
    "shortcircuit",
}
# Spark's Kafka source names, accepted as aliases of ours.
_ALIASES = {"subscribe": "topics", "subscribepattern": "topicpattern"}


class OptionError(ValueError):
    """An option of the trikafka source is missing, unknown or malformed."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything the source needs, as plain picklable data."""

    brokers: tuple[BrokerAddress, ...]
    zookeeper: str | None
    topics: tuple[str, ...]
    topic_pattern: str | None
    partitions_per_broker: int | None  # None: ask the brokers
    starting: OffsetSpec
    ending: OffsetSpec
    group_default_offset: int
    fetch_bytes: int
    max_fetch_bytes: int
    max_bytes_per_trigger: int | None
    commit_to_group: str | None
    fail_on_data_loss: bool
    timeout_s: float
    fail_on_missing_topic: bool = True
    prefetch: bool = False
    broker_sockets: tuple[tuple[int, str], ...] = ()  # (broker id, Unix socket path)
    short_circuit: bool = True  # over broker_sockets, FETCH_LOCAL (docs/protocol.md §9.8)

    def open_cluster(self) -> StaticCluster | ZooKeeperCluster:
        """The cluster view: ZooKeeper when configured, else the static list."""
        if self.zookeeper:
            return ZooKeeperCluster(self.zookeeper, timeout_s=self.timeout_s)
        return StaticCluster({b.broker_id: b for b in self.brokers}, self.partitions_per_broker,
                             allow_missing_topics=not self.fail_on_missing_topic, timeout_s=self.timeout_s)

    def select_topics(self, cluster: StaticCluster | ZooKeeperCluster) -> list[str]:
        """The topics to read: the explicit list, or the registry's topics matching the pattern."""
        if self.topic_pattern is None:
            return list(self.topics)
        pattern = re.compile(self.topic_pattern)
        return [t for t in cluster.topics() if pattern.fullmatch(t)]


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Check and convert Spark's option mapping (keys are case-insensitive)."""
    opts = _resolve_aliases({str(k).lower(): str(v) for k, v in raw.items()})
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise OptionError(f"unknown trikafka option(s): {', '.join(unknown)}")
    brokers, zookeeper = _cluster_options(opts)
    topics, pattern = _topic_options(opts, zookeeper)
    starting, ending = _offset_options(opts)
    commit_group = opts.get("committogroup") or None
    if (commit_group or starting.kind == "group") and not zookeeper:
        raise OptionError("group offsets live in ZooKeeper: set the 'zookeeper' option")
    fetch_bytes = int_option(opts, "fetchsize", DEFAULT_FETCH_BYTES, MIN_FETCH_BYTES)
    max_fetch = int_option(opts, "maxfetchsize", max(DEFAULT_MAX_FETCH_BYTES, fetch_bytes), fetch_bytes)
    per_trigger = opts.get("maxbytespertrigger")
    return SourceOptions(
        brokers=brokers,
        zookeeper=zookeeper,
        topics=topics,
        topic_pattern=pattern,
        partitions_per_broker=(int_option(opts, "partitionsperbroker", 1, 1)
                               if "partitionsperbroker" in opts else None),
        starting=starting,
        ending=ending,
        group_default_offset=_group_default(opts),
        fetch_bytes=fetch_bytes,
        max_fetch_bytes=max_fetch,
        max_bytes_per_trigger=None if per_trigger is None else int_option(opts, "maxbytespertrigger", 0, 1),
        commit_to_group=commit_group,
        fail_on_data_loss=bool_option(opts, "failondataloss", True),
        timeout_s=float(int_option(opts, "timeoutseconds", 30, 1)),
        fail_on_missing_topic=bool_option(opts, "failonmissingtopic", True),
        prefetch=bool_option(opts, "prefetch", False),
        broker_sockets=_broker_sockets(opts.get("brokersockets", "")),
        short_circuit=bool_option(opts, "shortcircuit", True),
    )


def _resolve_aliases(opts: dict[str, str]) -> dict[str, str]:
    """Rename Spark-Kafka's option names to ours; naming one option both ways is an error."""
    for alias, name in _ALIASES.items():
        if alias in opts:
            if name in opts:
                raise OptionError(f"'{alias}' is an alias of '{name}': set only one of them")
            opts[name] = opts.pop(alias)
    return opts


def _cluster_options(opts: dict[str, str]) -> tuple[tuple[BrokerAddress, ...], str | None]:
    zookeeper = opts.get("zookeeper", "").strip() or None
    broker_text = opts.get("brokers", "").strip()
    if not broker_text and not zookeeper:
        raise OptionError("set 'brokers' (id:host:port,...) or 'zookeeper' (a connect string)")
    if broker_text and zookeeper:
        raise OptionError("set only one of 'brokers' and 'zookeeper'")
    try:
        brokers = tuple(parse_broker_list(broker_text).values()) if broker_text else ()
    except ClusterConfigError as exc:
        raise OptionError(f"brokers: {exc}") from None
    return brokers, zookeeper


def _topic_options(opts: dict[str, str], zookeeper: str | None) -> tuple[tuple[str, ...], str | None]:
    from trikafka.zk.errors import InvalidPathError
    from trikafka.zk.paths import validate_topic

    topic_text, pattern = opts.get("topics", "").strip(), opts.get("topicpattern")
    if bool(topic_text) == bool(pattern):
        raise OptionError("set exactly one of 'topics' (or 'subscribe') and 'topicPattern' (or 'subscribePattern')")
    if pattern:
        if not zookeeper:
            raise OptionError("'topicPattern' needs the registry: set 'zookeeper'")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"topicPattern {pattern!r}: {exc}") from None
        return (), pattern
    topics = tuple(dict.fromkeys(t.strip() for t in topic_text.split(",") if t.strip()))
    for topic in topics:
        try:
            validate_topic(topic)
        except InvalidPathError as exc:
            raise OptionError(f"topics: {exc}") from None
    return topics, None


def _offset_options(opts: dict[str, str]) -> tuple[OffsetSpec, OffsetSpec]:
    try:
        starting = parse_offset_spec(
            opts.get("startingoffsets", "earliest"), option="startingOffsets", allow_group=True,
            default_special=EARLIEST,
        )
        ending = parse_offset_spec(
            opts.get("endingoffsets", "latest"), option="endingOffsets", allow_group=False,
            default_special=LATEST,
        )
    except OffsetSpecError as exc:
        raise OptionError(str(exc)) from None
    if ending.kind == "earliest":
        raise OptionError("endingOffsets must be 'latest' or a JSON offset document")
    return starting, ending


def _group_default(opts: dict[str, str]) -> int:
    value = opts.get("groupdefaultoffset", "earliest").strip().lower()
    if value not in ("earliest", "latest"):
        raise OptionError(f"groupDefaultOffset must be earliest or latest, got {value!r}")
    return EARLIEST if value == "earliest" else LATEST


def int_option(opts: dict[str, str], name: str, default: int, minimum: int) -> int:
    """Option ``name`` (lower-case key) as an integer >= ``minimum``; ``default`` when unset."""
    text = opts.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _broker_sockets(text: str) -> tuple[tuple[int, str], ...]:
    """``brokerSockets``: ``id=path`` items, comma-separated."""
    sockets: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        broker_id, sep, path = item.partition("=")
        if not sep or not broker_id.strip().isdigit() or not path.strip():
            raise OptionError(f"brokerSockets: {item!r} is not ID=PATH (a broker id, '=', a socket path)")
        if int(broker_id) in sockets:
            raise OptionError(f"brokerSockets names broker {int(broker_id)} twice")
        sockets[int(broker_id)] = path.strip()
    return tuple(sorted(sockets.items()))


def bool_option(opts: dict[str, str], name: str, default: bool) -> bool:
    """Option ``name`` (lower-case key) as true or false; ``default`` when unset."""
    text = opts.get(name)
    if text is None:
        return default
    try:
        return parse_bool(text)
    except ValueError:
        raise OptionError(f"option {name} must be true or false, got {text!r}") from None
