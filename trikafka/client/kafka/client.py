"""A Trio client of the Apache Kafka protocol: bootstrap, metadata, leader routing (docs/protocol.md §16.4).

``KafkaClient`` keeps one ``KafkaConnection`` per broker node and a cache of
the cluster's metadata (brokers, controller, each partition's leader).  A
call to a partition goes to its leader through ``call_leader``, which on an
error naming stale metadata (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, the leader-epoch errors) or a broken connection
refreshes the metadata and tries again, up to ``max_retries`` times.

A broker answers one connection's requests in order, so a long-poll Fetch
holds up every request behind it.  Connections therefore belong to a *lane*:
``DEFAULT_LANE`` for produce, metadata and admin calls, and a lane of its own
for each ``PartitionConsumer``'s fetches.
"""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Mapping, TypeVar

import trio
from kio.schema.errors import ErrorCode

from trikafka.client.addresses import parse_broker_addresses
from trikafka.client.errors import BrokerConnectionError
from trikafka.kafka.apis import KafkaApi

from . import schema
from .connection import (DEFAULT_CLIENT_ID, DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S, NO_CAPS,
                         UNKNOWN_SOFTWARE_VERSION, KafkaConnection, OpenStream, SaslLogin, open_kafka_connection)
from .errors import KafkaResponseError

T = TypeVar("T")
DEFAULT_MAX_RETRIES = 5
DEFAULT_RETRY_BACKOFF_S = 0.1
NO_LEADER = -1
DEFAULT_LANE = "default"


@dataclass(frozen=True)
class BrokerNode:
    """A broker as Metadata names it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class KafkaPartitionMetadata:
    """One partition as Metadata describes it; ``leader_id`` is -1 while it has no leader."""

    topic: str
    partition: int
    error_code: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class KafkaTopicMetadata:
    """One topic as Metadata describes it: its error code and partitions by index."""

    name: str
    error_code: int
    partitions: dict[int, KafkaPartitionMetadata] = field(default_factory=dict)
    topic_id: uuid.UUID | None = None  # Metadata v10+ (None before, or the all-zero id of a broker without ids)


@dataclass(frozen=True)
class ClusterMetadata:
    """One Metadata answer: brokers by node id, the controller, the cluster id, topics by name."""

    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerNode]
    topics: dict[str, KafkaTopicMetadata]


class KafkaClient:
    """Connections to a Kafka-protocol cluster reached through ``bootstrap`` (``HOST:PORT[,...]``).

    Use ``async with KafkaClient(bootstrap) as client``; leaving it closes
    every connection.  ``request_timeout_s`` bounds each answer (a long-poll
    fetch adds its wait); ``max_retries`` and ``retry_backoff_s`` bound
    ``call_leader``'s retries.  ``allow_auto_topic_creation``: whether asking
    for an unknown topic's partitions may create it (§16.5; Kafka clients' default).
    ``software_version``: this application's version, told to brokers in ApiVersions.
    ``ssl_context``: connect with TLS (listeners with ``SSL``, docs/protocol.md §18.1).
    ``sasl``: the login every connection makes on a SASL listener (§18.2).
    ``max_versions``: the highest version to send of each api named (for a broker that
    mis-reads a version it advertises), else the highest both sides serve.
    ``open_stream(host, port)``: how every connection is opened, TCP by default (an in-process
    cluster's, ``trikafka.testing.InProcessCluster.kafka_client``, reaches its brokers in memory).
    """

    def __init__(self, bootstrap: str, *, client_id: str = DEFAULT_CLIENT_ID,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
                 max_retries: int = DEFAULT_MAX_RETRIES, retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
                 allow_auto_topic_creation: bool = True, software_version: str = UNKNOWN_SOFTWARE_VERSION,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslLogin | None = None,
                 max_versions: Mapping[KafkaApi, int] = NO_CAPS, open_stream: OpenStream = trio.open_tcp_stream):
        self.bootstrap = tuple((a.host, a.port) for a in parse_broker_addresses(bootstrap))
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.software_version = software_version
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.max_versions = dict(max_versions)
        self.open_stream = open_stream
        self.metadata = ClusterMetadata(None, NO_LEADER, {}, {})
        self._connections: dict[tuple[str, int, str], KafkaConnection] = {}  # by (host, port, lane)
        self._connecting: dict[tuple[str, int, str], trio.Lock] = {}

    async def __aenter__(self) -> KafkaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.aclose()

    # ------------------------------------------------------------------ connections

    async def connection_to(self, host: str, port: int, lane: str = DEFAULT_LANE) -> KafkaConnection:
        """The open connection of ``lane`` to ``host:port``, opened (and versions negotiated) on first use."""
        address = (host, port, lane)
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection  # the lock only keeps two tasks from opening one address twice
        lock = self._connecting.setdefault(address, trio.Lock())
        async with lock:  # one connection per address, even when many tasks ask at once
            connection = self._connections.get(address)
            if connection is None or connection.closed:
                connection = await open_kafka_connection(
                    host, port, connect_timeout_s=self.connect_timeout_s, client_id=self.client_id,
                    request_timeout_s=self.request_timeout_s, software_version=self.software_version,
                    ssl_context=self.ssl_context, sasl=self.sasl, max_versions=self.max_versions,
                    open_stream=self.open_stream)
                self._connections[address] = connection
            return connection

    async def close_lane(self, lane: str) -> None:
        """Close the connections of ``lane`` (a consumer that is done)."""
        for key in [key for key in self._connections if key[2] == lane]:
            await self._connections.pop(key).aclose()

    async def node_connection(self, node_id: int, lane: str = DEFAULT_LANE) -> KafkaConnection:
        """The connection of ``lane`` to broker ``node_id`` of the cached metadata."""
        node = self.metadata.brokers.get(node_id)
        if node is None:
            await self.refresh_metadata()
            node = self.metadata.brokers.get(node_id)
            if node is None:
                raise BrokerConnectionError(f"broker {node_id} is not in the cluster's metadata")
        return await self.connection_to(node.host, node.port, lane)

    async def any_connection(self) -> KafkaConnection:
        """A connection to some live broker: a known one first, then the bootstrap addresses in order."""
        for (_host, _port, lane), connection in self._connections.items():
            if lane == DEFAULT_LANE and not connection.closed:
                return connection
        known = [(n.host, n.port) for n in self.metadata.brokers.values()]
        errors: list[str] = []
        for host, port in [*known, *self.bootstrap]:
            try:
                return await self.connection_to(host, port)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise BrokerConnectionError(f"no broker reachable: {'; '.join(errors)}")

    async def controller_connection(self) -> KafkaConnection:
        """The connection to the controller (where CreateTopics goes), any broker if none is named."""
        if self.metadata.controller_id not in self.metadata.brokers:
            await self.refresh_metadata()
        if self.metadata.controller_id in self.metadata.brokers:
            return await self.node_connection(self.metadata.controller_id)
        return await self.any_connection()

    # ------------------------------------------------------------------ metadata

    async def refresh_metadata(self, topics: Iterable[str] | None = (), *,
                               allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Ask Metadata for ``topics`` (None: every topic; empty: brokers only) and update the cache."""
        connection = await self.any_connection()
        version = connection.version(KafkaApi.METADATA)
        names = None if topics is None else list(topics)
        if names is None and version == 0:
            names = []  # v0 has no null list: an empty one means every topic
        answer = await connection.request(
            KafkaApi.METADATA, topics=None if names is None else [{"name": n, "topic_id": None} for n in names],
            allow_auto_topic_creation=allow_auto_topic_creation, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        fresh = _cluster_metadata(answer)
        cached = dict(self.metadata.topics) if names is not None else {}
        cached.update(fresh.topics)
        self.metadata = ClusterMetadata(fresh.cluster_id, fresh.controller_id, fresh.brokers, cached)
        return fresh

    async def topic(self, name: str) -> KafkaTopicMetadata:
        """The topic's metadata, asked for when not cached or not yet led (and created if
        ``allow_auto_topic_creation`` and the broker agree, §16.5).

        Raises ``KafkaResponseError`` (UNKNOWN_TOPIC_OR_PARTITION, ...) when
        the topic is still missing or leaderless after ``max_retries`` tries.
        """
        for attempt in range(self.max_retries + 1):
            topic = self.metadata.topics.get(name)
            if topic is not None and topic.error_code == ErrorCode.none and topic.partitions and all(
                    p.leader_id != NO_LEADER for p in topic.partitions.values()):
                return topic
            if attempt:
                await trio.sleep(self.retry_backoff_s * attempt)
            await self.refresh_metadata([name], allow_auto_topic_creation=self.allow_auto_topic_creation)
        topic = self.metadata.topics.get(name)
        error = ErrorCode.leader_not_available if topic is None or topic.error_code == 0 else topic.error_code
        raise KafkaResponseError(error, f"topic {name}")

    async def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has."""
        return len((await self.topic(topic)).partitions)

    async def leader_connection(self, topic: str, partition: int, lane: str = DEFAULT_LANE) -> KafkaConnection:
        """The connection of ``lane`` to the leader of ``topic``-``partition`` in the cached metadata."""
        info = (await self.topic(topic)).partitions.get(partition)
        if info is None:
            raise KafkaResponseError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")
        if info.leader_id == NO_LEADER:
            raise KafkaResponseError(ErrorCode.leader_not_available, f"{topic}-{partition}")
        return await self.node_connection(info.leader_id, lane)

    async def call_leader(self, topic: str, partition: int,
                          call: Callable[[KafkaConnection], Awaitable[T]], *, lane: str = DEFAULT_LANE) -> T:
        """``call`` on the partition leader's connection, following a leader that moved.

        ``call`` raises ``KafkaResponseError`` for the partition's error code;
        when it names stale metadata, or the connection breaks, the metadata is
        refreshed and ``call`` runs again on the new leader, up to
        ``max_retries`` times.  Other errors propagate at once.
        """
        for attempt in range(self.max_retries + 1):
            try:
                return await call(await self.leader_connection(topic, partition, lane))
            except KafkaResponseError as exc:
                if not exc.stale_metadata or attempt == self.max_retries:
                    raise
            except BrokerConnectionError:
                if attempt == self.max_retries:
                    raise
            self.metadata.topics.pop(topic, None)
            await trio.sleep(self.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable: the last attempt raises")


def _cluster_metadata(answer: object) -> ClusterMetadata:
    brokers = {int(b.node_id): BrokerNode(int(b.node_id), b.host, int(b.port))
               for b in schema.field(answer, "brokers", ())}
    topics: dict[str, KafkaTopicMetadata] = {}
    for t in schema.field(answer, "topics", ()):
        name = str(t.name)
        partitions = {
            int(p.partition_index): KafkaPartitionMetadata(
                name, int(p.partition_index), int(p.error_code), int(p.leader_id),
                int(schema.field(p, "leader_epoch", -1)), tuple(map(int, p.replica_nodes)),
                tuple(map(int, p.isr_nodes)))
            for p in t.partitions}
        found_id = schema.field(t, "topic_id")
        topics[name] = KafkaTopicMetadata(name, int(t.error_code), partitions,
                                          None if found_id is None or found_id.int == 0 else found_id)
    return ClusterMetadata(schema.field(answer, "cluster_id"), int(schema.field(answer, "controller_id", NO_LEADER)),
                           brokers, topics)
