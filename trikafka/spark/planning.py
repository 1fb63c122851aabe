"""Driver-side planning: which broker-partitions to read, and from where to where.

Runs in Spark's planner worker (batch) and in the long-lived streaming source
runner, never in tasks.  Offsets are resolved here with OFFSETS requests
(spec §5.5): ``earliest`` is S = OFFSETS(-2, 1), ``latest`` the visible end
E = OFFSETS(-1, 1).  A consumer group's offsets come from the ZooKeeper
registry (spec §8.3).  A partition of a replicated topic (``key.broker`` None,
docs/protocol.md §12) is asked of its current leader, learnt through METADATA
into the client's one ``LeaderCache``; its range is planned at that leader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Mapping

from trikafka.client.leader_cache import LeaderCache
from trikafka.wire import ErrorCode, InvalidMessageError, decode_message, parse_entries
from trikafka.wire.metadata import BrokerAddress

from .blocking_client import BrokerConnection, BrokerConnectionError
from .cluster import StaticCluster, ZooKeeperCluster, format_broker_list
from .offsets import EARLIEST, LATEST, OffsetSpec, PartitionKey, align_offsets
from .options import SourceOptions

# Room for response headers on top of the largest fetch.
_RESPONSE_HEADROOM_BYTES = 64 * 1024
# One small FETCH tells whether a user-given starting offset begins an entry: its
# length must fit in the log, its header must parse, and a whole entry's CRC must match.
_BOUNDARY_PROBE_BYTES = 4096


class PlanningError(ValueError):
    """The requested offsets or partitions cannot be planned."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """One task's work: bytes ``[start, end)`` of ``key`` on the broker at ``host:port``
    (``broker_id``: that broker, for a replicated partition its leader when planned)."""

    key: PartitionKey
    host: str
    port: int
    start: int
    end: int
    broker_id: int | None = None


def open_connection(address: BrokerAddress, options: SourceOptions) -> BrokerConnection:
    """A blocking connection sized for the options' largest fetch: to the broker's local
    listener when ``brokerSockets`` names one that exists on this machine, else over TCP."""
    return _connect(address.host, address.port, address.broker_id, options)


def _connect(host: str, port: int, broker_id: int | None, options: SourceOptions) -> BrokerConnection:
    """``open_connection`` for a broker whose id may be unknown (``None``: no local listener
    can be looked up, so the connection is over TCP)."""
    max_response_bytes = options.max_fetch_bytes + _RESPONSE_HEADROOM_BYTES
    path = dict(options.broker_sockets).get(broker_id) if broker_id is not None else None
    if path is not None and os.path.exists(path):
        try:
            return BrokerConnection(host, port, timeout_s=options.timeout_s,
                                    max_response_bytes=max_response_bytes, unix_path=path,
                                    short_circuit=options.short_circuit)
        except BrokerConnectionError:
            pass  # a stale socket file (the broker is gone or elsewhere): TCP says what is wrong
    return BrokerConnection(host, port, timeout_s=options.timeout_s, max_response_bytes=max_response_bytes)


def open_for_range(planned: "PartitionRange", options: SourceOptions) -> BrokerConnection:
    """A task's connection for ``planned``: its planned broker, or, for a replicated partition
    whose planned leader cannot be reached (a failover since planning; Spark retries the task),
    the partition's current leader."""
    try:
        broker_id = planned.key.broker if planned.key.broker is not None else planned.broker_id
        return _connect(planned.host, planned.port, broker_id, options)
    except BrokerConnectionError:
        if planned.key.broker is not None:
            raise
    cluster = options.open_cluster()
    try:
        with ConnectionPool(cluster.brokers(), options) as pool:
            address = pool.address_of(planned.key)
    finally:
        cluster.close()
    return open_connection(address, options)


class ConnectionPool:
    """Lazily opened connections, one per broker id; broken ones are reopened on next use."""

    def __init__(self, brokers: Mapping[int, BrokerAddress], options: SourceOptions):
        self.brokers = dict(brokers)
        self._options = options
        self._conns: dict[int, BrokerConnection] = {}
        self.leaders = LeaderCache()  # replicated partitions' leaders

    def update(self, brokers: Mapping[int, BrokerAddress]) -> None:
        """Adopt a new broker map; connections to moved or vanished brokers are closed."""
        for broker_id, conn in list(self._conns.items()):
            if brokers.get(broker_id) != self.brokers.get(broker_id):
                conn.close()
                del self._conns[broker_id]
        self.brokers = dict(brokers)

    def get(self, broker_id: int) -> BrokerConnection:
        conn = self._conns.get(broker_id)
        if conn is None or conn.closed:
            address = self.brokers.get(broker_id)
            if address is None:
                raise PlanningError(f"broker {broker_id} is not known (not listed / not registered)")
            conn = self._conns[broker_id] = open_connection(address, self._options)
        return conn

    def address_of(self, key: PartitionKey) -> BrokerAddress:
        """Where ``key`` is read: its broker, or the current leader of a replicated partition."""
        if key.broker is not None:
            address = self.brokers.get(key.broker)
            if address is None:
                raise PlanningError(f"{key}: broker {key.broker} is not registered")
            return address
        for _attempt in range(2):  # the cached leader, else one METADATA round
            leader = self.leaders.leader(key.topic, key.partition)
            if leader is not None and leader in self.brokers:
                return self.brokers[leader]
            self._learn_leaders(key.topic)
        raise PlanningError(f"{key}: the partition has no leader right now (LEADER_NOT_AVAILABLE); "
                            "try again once the cluster elected one")

    def _learn_leaders(self, topic: str) -> None:
        for broker_id in sorted(self.brokers):
            try:
                metadata = self.get(broker_id).metadata([topic])
            except BrokerConnectionError:
                continue  # a broker that is down: ask the next
            self.leaders.learn(metadata)
            for broker in metadata.brokers:
                self.brokers.setdefault(broker.broker_id, broker)
            return

    def for_key(self, key: PartitionKey) -> BrokerConnection:
        """The connection that reads ``key`` (see ``address_of``)."""
        return self.get(self.address_of(key).broker_id if key.broker is None else key.broker)

    def visible_end(self, key: PartitionKey) -> int:
        return self.for_key(key).visible_end(key.topic, key.partition)

    def log_start(self, key: PartitionKey) -> int:
        return self.for_key(key).log_start(key.topic, key.partition)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> "ConnectionPool":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def discover_keys(options: SourceOptions, cluster: StaticCluster | ZooKeeperCluster, *,
                  require_topics: bool = False) -> list[PartitionKey]:
    """Every broker-partition of the selected topics, plus those named in explicit offsets.

    With ``require_topics`` (a batch read, a stream's first start) and ``failOnMissingTopic`` on, a
    cluster with no brokers, a pattern matching no topic, or a named topic
    without partitions is an error: the read would silently return nothing.
    """
    require = require_topics and options.fail_on_missing_topic
    if require and not cluster.brokers():
        raise PlanningError(f"{_where(options)} lists no brokers (set failOnMissingTopic=false to read nothing)")
    topics = options.select_topics(cluster)
    if require and not topics:
        raise PlanningError(f"no topic of {_where(options)} matches topicPattern {options.topic_pattern!r} "
                            "(set failOnMissingTopic=false to read nothing)")
    # The registry answers partition 0 for a topic it does not list (0.7's default), so ask it.
    registered = set(cluster.topics()) if require and isinstance(cluster, ZooKeeperCluster) else None
    keys: set[PartitionKey] = set()
    for topic in topics:
        found = cluster.partitions(topic) if registered is None or topic in registered else []
        if require and not found:
            raise PlanningError(f"topic {topic!r} does not exist in {_where(options)} "
                                "(set failOnMissingTopic=false to read nothing)")
        keys.update(found)
    discovered = frozenset(keys)
    for spec in (options.starting, options.ending):
        keys.update(k for k in align_offsets(spec.explicit_offsets, discovered) if k.topic in topics)
    return sorted(keys)


def _where(options: SourceOptions) -> str:
    if options.zookeeper:
        return f"the ZooKeeper registry {options.zookeeper}"
    return f"the brokers {format_broker_list(options.brokers)}"


def resolve_offsets(
    spec: OffsetSpec,
    keys: Iterable[PartitionKey],
    pool: ConnectionPool,
    *,
    cluster: StaticCluster | ZooKeeperCluster,
    group_default: int = EARLIEST,
) -> dict[PartitionKey, int]:
    """Concrete byte offsets of ``spec`` for each key."""
    keys = list(keys)
    wanted: dict[PartitionKey, int]
    if spec.kind == "earliest":
        wanted = dict.fromkeys(keys, EARLIEST)
    elif spec.kind == "latest":
        wanted = dict.fromkeys(keys, LATEST)
    elif spec.kind == "group":
        assert isinstance(cluster, ZooKeeperCluster) and spec.group is not None
        committed = cluster.read_group_offsets(spec.group, keys)
        wanted = {k: committed.get(k, group_default) for k in keys}
    else:
        explicit = align_offsets(spec.explicit_offsets, keys)
        wanted = {k: explicit.get(k, spec.default) for k in keys}
    resolved = {}
    for key, value in wanted.items():
        if value == EARLIEST:
            value = pool.log_start(key)
        elif value == LATEST:
            value = pool.visible_end(key)
        resolved[key] = value
    return resolved


def plan_batch(options: SourceOptions) -> list[PartitionRange]:
    """The ranges of a batch read: one per broker-partition with data in ``[start, end)``."""
    cluster = options.open_cluster()
    try:
        keys = discover_keys(options, cluster, require_topics=True)
        with ConnectionPool(cluster.brokers(), options) as pool:
            start = resolve_offsets(
                options.starting, keys, pool, cluster=cluster, group_default=options.group_default_offset
            )
            end = resolve_offsets(options.ending, keys, pool, cluster=cluster)
            visible = {k: end[k] if options.ending.kind == "latest" else pool.visible_end(k) for k in keys}
            for key in keys:
                _check_range(key, start[key], end[key], visible[key])
            check_start_boundaries(options.starting, start, pool, visible)
            ranges = []
            for key in keys:
                if end[key] > start[key]:
                    address = pool.address_of(key)
                    ranges.append(PartitionRange(key, address.host, address.port, start[key], end[key], address.broker_id))
            return ranges
    except BrokerConnectionError as exc:
        raise PlanningError(f"planning the trikafka read failed: {exc}") from exc
    finally:
        cluster.close()


def check_start_boundaries(spec: OffsetSpec, start: Mapping[PartitionKey, int], pool: ConnectionPool,
                           visible_end: Mapping[PartitionKey, int] | None = None) -> None:
    """Fail on the driver when a given starting offset is not an entry boundary.

    ``earliest`` and ``latest`` come from the broker and are boundaries; an
    explicit or group offset is checked with one FETCH of a few bytes there.
    """
    if spec.kind in ("earliest", "latest"):
        return
    for key, offset in start.items():
        end = pool.visible_end(key) if visible_end is None else visible_end[key]
        if offset >= end:
            continue  # at the end (a boundary), or beyond it (_check_range says so)
        result = pool.for_key(key).fetch(key.topic, key.partition, offset, min(_BOUNDARY_PROBE_BYTES, end - offset))
        if result.error != ErrorCode.NO_ERROR:
            continue  # out of range after retention: the read reports it per failOnDataLoss
        reason = _not_an_entry(result.data, offset, end)
        if reason:
            raise PlanningError(f"{key}: starting offset {offset} is not an entry boundary ({reason}); "
                                "start at 'earliest', 'latest' or an offset a reader returned as next_offset")


def _not_an_entry(data: bytes, offset: int, visible_end: int) -> str | None:
    """Why the bytes fetched at ``offset`` do not begin an entry, or None if they do."""
    try:
        parsed = parse_entries(data, offset)
    except InvalidMessageError as exc:
        return str(exc)
    if parsed.entries:
        return None if parsed.entries[0].message.is_valid else "the bytes there fail the entry's CRC"
    needed = parsed.first_entry_bytes
    if needed is None or offset + needed > visible_end:
        return f"an entry there would end past the visible end {visible_end}"
    try:
        decode_message(data[4:])  # a big entry: check the framing of its header
    except InvalidMessageError as exc:
        return str(exc)
    return None


def _check_range(key: PartitionKey, start: int, end: int, visible_end: int) -> None:
    if end > visible_end:
        raise PlanningError(f"{key}: ending offset {end} is beyond the visible end {visible_end}")
    if start > end:
        raise PlanningError(f"{key}: starting offset {start} is beyond the ending offset {end}")


def ranges_between(
    start: Mapping[PartitionKey, int], end: Mapping[PartitionKey, int],
    brokers: Mapping[int, BrokerAddress] | ConnectionPool,
) -> list[PartitionRange]:
    """Streaming: the ranges of a micro-batch from its start and end offset maps.

    A key missing from ``start`` entered the offsets at ``end`` (see the stream
    reader), so it has nothing to read in this batch.  Given a ``ConnectionPool``,
    a replicated partition is read at its current leader.
    """
    ranges = []
    for key in sorted(end):
        begin = start.get(key)
        if begin is None or end[key] <= begin:
            continue
        if isinstance(brokers, ConnectionPool):
            address = brokers.address_of(key)
        else:
            registered = brokers.get(key.broker) if key.broker is not None else None
            if registered is None:
                raise PlanningError(f"{key}: broker {key.broker} is not registered; cannot read "
                                    f"[{begin}, {end[key]})")
            address = registered
        ranges.append(PartitionRange(key, address.host, address.port, begin, end[key], address.broker_id))
    return ranges
