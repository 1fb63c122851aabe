"""Where the partitions are: a static broker list or the ZooKeeper registry.

Both kinds answer the same questions for the planner: which brokers exist
(``brokers()``), which topics (``topics()``), and which broker-partitions a
topic has (``partitions(topic)``).  The ZooKeeper kind reads the 0.7 registry
(spec §8.1-§8.2) through ``trikafka.zk.blocking``, because Spark's planner
and source runner are ordinary Python processes with no Trio loop; it also
reads and writes consumer-group offsets (spec §8.3).

Like 0.7 clients (spec §8.5), a live broker that has not registered a
topic is assumed to hold partition 0 of it: OFFSETS on a partition without a
log answers 0, so such a partition simply reads as empty until data arrives.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping

from trikafka.client.leader_cache import LeaderCache
from trikafka.client.topics import PartitionCounts
from trikafka.wire.errors import ErrorCode
from trikafka.wire.metadata import BrokerAddress
from trikafka.zk import paths
from trikafka.zk.errors import ZooKeeperClientError
from trikafka.zk.registry_values import decode_offset, encode_offset, parse_broker_registration, parse_partition_count
from trikafka.zk.replication_values import ReplicationValueError, TopicAssignment

from .blocking_client import BrokerConnectionError, partition_counts
from .offsets import PartitionKey

log = logging.getLogger(__name__)


class ClusterConfigError(ValueError):
    """A broker list, ZooKeeper registry or topic selection that cannot be used."""


def parse_broker_list(text: str) -> dict[int, BrokerAddress]:
    """Parse ``[ID:]HOST:PORT[,...]``, the one address syntax (``trikafka.client.parse_broker_addresses``)."""
    from trikafka.client.addresses import parse_broker_addresses

    try:
        return {a.broker_id: a for a in parse_broker_addresses(text)}
    except ValueError as exc:
        raise ClusterConfigError(str(exc)) from None


def format_broker_list(brokers: Iterable[BrokerAddress]) -> str:
    """Inverse of :func:`parse_broker_list`: ``ID:HOST:PORT,...`` in id order."""
    from trikafka.client.addresses import format_broker_addresses

    return format_broker_addresses(sorted(brokers))


class StaticCluster:
    """A fixed broker list; each broker is asked how many partitions a topic has.

    The counts come from ``partition_counts``: METADATA, or the
    FETCH probe on a plain 0.7 broker.  ``partitions_per_broker`` overrides
    the discovery (0.7's static ``broker.list`` mode).  A topic that no broker
    has (METADATA says so) is an error unless ``allow_missing_topics``.
    """

    def __init__(self, brokers: Mapping[int, BrokerAddress], partitions_per_broker: int | None = None, *,
                 allow_missing_topics: bool = False, timeout_s: float = 30.0):
        if partitions_per_broker is not None and partitions_per_broker < 1:
            raise ClusterConfigError("partitions per broker must be at least 1")
        self._brokers = dict(brokers)
        self.partitions_per_broker = partitions_per_broker
        self.allow_missing_topics = allow_missing_topics
        # A stream keeps the partitions it already knows of a broker that is down (its
        # offsets list them); a batch must not read part of a topic, so by default an
        # unreachable broker is an error.
        self.skip_unreachable = False
        self._timeout_s = timeout_s

    def brokers(self) -> dict[int, BrokerAddress]:
        return dict(self._brokers)

    def topics(self) -> list[str]:
        """Every topic of every broker (METADATA); a plain 0.7 broker cannot list them."""
        names: set[str] = set()
        for address in self._brokers.values():
            counts = self._counts(address, [])
            if counts.metadata is None:
                raise ClusterConfigError(
                    f"broker {address.host}:{address.port} is a plain 0.7 broker and cannot list its topics; "
                    "use 'topics' or 'zookeeper'")
            names.update(counts.topics)
        return sorted(names)

    def partitions(self, topic: str) -> list[PartitionKey]:
        if self.partitions_per_broker is not None:
            return [PartitionKey(topic, broker_id, p)
                    for broker_id in sorted(self._brokers) for p in range(self.partitions_per_broker)]
        keys = []
        for broker_id, address in sorted(self._brokers.items()):
            try:
                counts_answer = partition_counts(address.host, address.port, [topic], timeout_s=self._timeout_s)
                found = counts_answer.topics[topic]
            except BrokerConnectionError as exc:
                if not self.skip_unreachable:
                    raise
                log.warning("broker %s unreachable, its partitions of %s are not discovered: %s",
                            broker_id, topic, exc)
                continue
            if found.error == ErrorCode.INVALID_TOPIC:
                raise ClusterConfigError(f"broker {address.host}:{address.port} rejects the topic name {topic!r}")
            replicated = _replicated_count(counts_answer, topic)
            if replicated is not None:  # one set of partitions, whichever broker answers (§12.9)
                return [PartitionKey(topic, None, p) for p in range(replicated)]
            keys += [PartitionKey(topic, broker_id, p) for p in range(found.count)]
        if not keys and not self.allow_missing_topics and not self.skip_unreachable:
            raise ClusterConfigError(f"topic {topic!r} does not exist on any of the brokers "
                                     f"{format_broker_list(self._brokers.values())}")
        return keys

    def _counts(self, address: BrokerAddress, topics: list[str]) -> PartitionCounts:
        try:
            return partition_counts(address.host, address.port, topics, timeout_s=self._timeout_s)
        except BrokerConnectionError as exc:
            raise ClusterConfigError(f"cannot ask broker {address.host}:{address.port} for partitions: {exc}") \
                from exc

    def close(self) -> None:
        pass


def _replicated_count(answer: PartitionCounts, topic: str) -> int | None:
    """The partition count of ``topic`` if the METADATA answer shows it replicated, else None."""
    if answer.metadata is None:
        return None
    cache = LeaderCache()
    cache.learn(answer.metadata)
    return cache.partition_count(topic) if cache.replicated(topic) else None


class ZooKeeperCluster:
    """The 0.7 ZooKeeper registry, read through ``trikafka.zk``'s blocking adapter.

    ``connect`` is a ZooKeeper connect string, optionally with a chroot
    (``host:2181/kafka``), applied to every path.
    """

    def __init__(self, connect: str, *, timeout_s: float = 15.0):
        from trikafka.zk.blocking import BlockingRegistry  # imported here: only planners need it

        self.connect = connect
        try:
            self._registry = BlockingRegistry(connect, timeout_s=timeout_s)
        except ZooKeeperClientError as exc:
            raise ClusterConfigError(str(exc)) from exc

    def close(self) -> None:
        self._registry.close()

    def __enter__(self) -> "ZooKeeperCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def brokers(self) -> dict[int, BrokerAddress]:
        """Live brokers from ``/brokers/ids/<id>`` = ``creator:host:port`` (spec §8.2)."""
        found: dict[int, BrokerAddress] = {}
        for child in self._registry.children(paths.broker_ids()):
            if not child.isdigit():
                continue
            value = self._registry.value(f"{paths.broker_ids()}/{child}")
            if value is None:
                continue  # the broker went away between the two reads
            try:
                info = parse_broker_registration(value)
            except ValueError:  # UnicodeDecodeError included
                raise ClusterConfigError(f"broker {child} registered {value!r}, not creator:host:port") from None
            found[int(child)] = BrokerAddress(int(child), info.host, info.port)
        return found

    def topics(self) -> list[str]:
        """0.7 topics (``/brokers/topics``) and replicated ones (``/trikafka/topics``)."""
        return sorted(set(self._registry.children(paths.broker_topics()))
                      | set(self._registry.children(paths.REPLICATED_TOPICS)))

    def partitions(self, topic: str) -> list[PartitionKey]:
        """Partitions per live broker from ``/brokers/topics/<t>/<id>`` (partition 0 if unregistered);
        for a replicated topic, ``0..N-1`` with no broker (read from the leader, §12.9)."""
        assignment = self._registry.value(paths.replicated_topic(topic))
        if assignment is not None:
            try:
                count = len(TopicAssignment.decode(assignment).replicas)
            except ReplicationValueError as exc:
                raise ClusterConfigError(f"{paths.replicated_topic(topic)}: {exc}") from None
            return [PartitionKey(topic, None, p) for p in range(count)]
        registered: dict[int, int] = {}
        for child in self._registry.children(paths.broker_topic(topic)):
            value = self._registry.value(f"{paths.broker_topic(topic)}/{child}")
            if not child.isdigit() or value is None:
                continue
            try:
                registered[int(child)] = parse_partition_count(value.strip())
            except ValueError:
                continue  # unreadable: treated as unregistered
        keys: list[PartitionKey] = []
        for broker_id in sorted(self.brokers()):
            count = max(1, registered.get(broker_id, 1))
            keys.extend(PartitionKey(topic, broker_id, p) for p in range(count))
        return keys

    # -- consumer-group offsets (spec §8.3) ----------------------------------

    def read_group_offsets(self, group: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        """Committed offsets of ``group`` for ``keys``; absent, empty or non-numeric nodes are left out."""
        found = {}
        for key in keys:
            value = self._registry.value(paths.consumer_offset(group, key.topic, key.broker, key.partition))
            offset = None if value is None else decode_offset(value)
            if offset is not None:
                found[key] = offset
        return found

    def commit_group_offsets(self, group: str, offsets: Mapping[PartitionKey, int]) -> list[PartitionKey]:
        """Write each offset to the group's offsets node, fenced like a member's commit.

        A partition a live member of ``group`` owns keeps its offset (see
        ``BlockingRegistry.commit_offset_if_unowned``), and one warning line
        names it.  Returns the keys refused that way.
        """
        refused = []
        for key in sorted(offsets):
            value = encode_offset(int(offsets[key]))
            if not self._registry.commit_offset_if_unowned(group, key.topic, key.broker, key.partition, value):
                refused.append(key)
                log.warning("commitToGroup %s: %s is owned by a live group member; "
                            "its offset was not overwritten", group, key)
        return refused
