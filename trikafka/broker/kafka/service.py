"""The Kafka listener's shared state and its table of handlers (docs/protocol.md §16).

One ``KafkaService`` per broker: every Kafka connection hands its decoded
requests to ``handle``, which looks the api up in ``KAFKA_HANDLERS`` (one
entry per api of the codec's table, ``trikafka.kafka.apis``) and encodes the
answer.  The service is given the broker's ``Engine`` (``broker/engine/``),
the same one the 0.7 listener is given: both listeners share its partitions,
topics, waiters and metrics, and neither imports the other.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

import trio

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.log.fs import FileSystem
from trikafka.kafka.framing import Request, encode_response
from trikafka.wire.metadata import BrokerAddress
from trikafka.wire.responses import Chunk

from ..cleaner import compaction_policy
from ..config import BrokerConfig
from ..dynamic_config import BrokerSettings
from ..entity_configs import Entities, FileEntityConfigs, ZooKeeperEntityConfigs
from ..quotas import REQUEST_CHARGE, ClientQuotas
from ..engine.engine import settle
from ..engine.partition import Partition, ReadView, Refused
from ..topic_settings import FORMAT_V2, MESSAGE_TIMESTAMP_TYPE, log_overrides
from ..seams import RunBlocking
from . import (client_quotas, cluster, configs, delete_records, fetch, log_dirs, markers, offsets, partition_admin,
               produce, producer_id_blocks, producer_ids, producers, scram_users, topics)
from .groups import admin_api, consumer_api, membership_api, offsets_api, txn_offsets_api
from .groups.coordinator import GroupCoordinator
from .groups.placement import offsets_topic
from .transactions import api as transactions_api
from .transactions import admin_api as transactions_admin_api
from .transactions.coordinator import TransactionCoordinator
from .transactions.placement import transaction_topic
from .transactions.verification import RoutedVerifier
from .producer_expiry import ProducerExpiry
from .peer_connections import PeerConnections
from .peer_connector import PeerConnector
from .acl import api as acl_api
from .acl.authorizer import Authorizer
from .acl.model import AclSet
from .acl.store import Edit, FileAcls, ZooKeeperAcls, follow_file, follow_znode
from ..credentials import (CredentialStore, FileCredentials, FileCredentialStore, ZooKeeperCredentials,
                           ZooKeeperCredentialStore)
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.producer_ids import take_block as take_zookeeper_block
from .authentication import SaslGate, sasl_not_enabled
from .groups.live_marks import LiveGroupMarks
from .registry import KafkaRegistry, zookeeper_cluster_id
from .connection import Deferred, ServedKafkaConnection
from .needs import TopicCreation, TransactionCoordination, TransactionVerifier
from .errors import kafka_error

if TYPE_CHECKING:
    from ..engine.engine import Engine

logger = logging.getLogger(__name__)

TOPIC_KNOWN_TIMEOUT_S = 5.0
TOPIC_KNOWN_POLL_S = 0.02
CLUSTER_ID_FILE = ".trikafka-cluster-id"  # a standalone broker's cluster id (§16.7)

# Any: each handler takes its own api's request entity and answers with its response entity
# (or, for Fetch, chunks; for Produce with acks 0, None), which a table of many apis cannot name.
# Each handler's first parameter is the Protocol of ``needs.py`` its family reads; typing it
# here as taking a KafkaService makes the type check prove the service satisfies every one.
Handle = Callable[["KafkaService", Request], Awaitable[Any] | Any]

# The broker's side of the api table: one handler per api the codec serves (§16.3).
KAFKA_HANDLERS: dict[KafkaApi, Handle] = {
    KafkaApi.PRODUCE: produce.produce,
    KafkaApi.FETCH: fetch.fetch,
    KafkaApi.LIST_OFFSETS: offsets.list_offsets,
    KafkaApi.METADATA: cluster.metadata,
    KafkaApi.OFFSET_COMMIT: offsets_api.offset_commit,
    KafkaApi.OFFSET_FETCH: offsets_api.offset_fetch,
    KafkaApi.FIND_COORDINATOR: offsets_api.find_coordinator,
    KafkaApi.JOIN_GROUP: membership_api.join_group,
    KafkaApi.HEARTBEAT: membership_api.heartbeat,
    KafkaApi.LEAVE_GROUP: membership_api.leave_group,
    KafkaApi.SYNC_GROUP: membership_api.sync_group,
    KafkaApi.DESCRIBE_GROUPS: admin_api.describe_groups,
    KafkaApi.LIST_GROUPS: admin_api.list_groups,
    KafkaApi.SASL_HANDSHAKE: sasl_not_enabled,
    KafkaApi.API_VERSIONS: cluster.api_versions,
    KafkaApi.CREATE_TOPICS: topics.create_topics,
    KafkaApi.DELETE_TOPICS: topics.delete_topics,
    KafkaApi.DELETE_RECORDS: delete_records.delete_records,
    KafkaApi.INIT_PRODUCER_ID: producer_ids.init_producer_id,
    KafkaApi.ADD_PARTITIONS_TO_TXN: transactions_api.add_partitions_to_txn,
    KafkaApi.ADD_OFFSETS_TO_TXN: transactions_api.add_offsets_to_txn,
    KafkaApi.END_TXN: transactions_api.end_txn,
    KafkaApi.WRITE_TXN_MARKERS: markers.write_txn_markers,
    KafkaApi.TXN_OFFSET_COMMIT: txn_offsets_api.txn_offset_commit,
    KafkaApi.OFFSET_FOR_LEADER_EPOCH: offsets.offset_for_leader_epoch,
    KafkaApi.DESCRIBE_ACLS: acl_api.describe_acls,
    KafkaApi.CREATE_ACLS: acl_api.create_acls,
    KafkaApi.DELETE_ACLS: acl_api.delete_acls,
    KafkaApi.DESCRIBE_CONFIGS: topics.describe_configs,
    KafkaApi.ALTER_CONFIGS: configs.alter_configs,
    KafkaApi.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    KafkaApi.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
    KafkaApi.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    KafkaApi.SASL_AUTHENTICATE: sasl_not_enabled,
    KafkaApi.CREATE_PARTITIONS: topics.create_partitions,
    KafkaApi.DELETE_GROUPS: admin_api.delete_groups,
    KafkaApi.ELECT_LEADERS: partition_admin.elect_leaders,
    KafkaApi.ALTER_PARTITION_REASSIGNMENTS: partition_admin.alter_partition_reassignments,
    KafkaApi.LIST_PARTITION_REASSIGNMENTS: partition_admin.list_partition_reassignments,
    KafkaApi.OFFSET_DELETE: admin_api.offset_delete,
    KafkaApi.DESCRIBE_CLUSTER: cluster.describe_cluster,
    KafkaApi.DESCRIBE_CLIENT_QUOTAS: client_quotas.describe_client_quotas,
    KafkaApi.ALTER_CLIENT_QUOTAS: client_quotas.alter_client_quotas,
    KafkaApi.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_users.describe_user_scram_credentials,
    KafkaApi.ALTER_USER_SCRAM_CREDENTIALS: scram_users.alter_user_scram_credentials,
    KafkaApi.DESCRIBE_PRODUCERS: producers.describe_producers,
    KafkaApi.DESCRIBE_TRANSACTIONS: transactions_admin_api.describe_transactions,
    KafkaApi.LIST_TRANSACTIONS: transactions_admin_api.list_transactions,
    KafkaApi.CONSUMER_GROUP_HEARTBEAT: consumer_api.consumer_group_heartbeat,
    KafkaApi.CONSUMER_GROUP_DESCRIBE: consumer_api.consumer_group_describe,
    KafkaApi.DESCRIBE_TOPIC_PARTITIONS: cluster.describe_topic_partitions,
}
# Handlers that write their own answer (chunks, or nothing): the rest return an entity.
_RAW_ANSWERS = frozenset({KafkaApi.PRODUCE, KafkaApi.FETCH})


class KafkaService:
    """What the Kafka listener's connections share; see the module docstring."""

    def __init__(self, *, engine: Engine, config: BrokerConfig, clock_ms: Callable[[], int],
                 run_blocking: RunBlocking, listener: BrokerAddress, cluster_id: str, peer_connector: PeerConnector,
                 zookeeper: ZooKeeperClient | None, broker_settings: BrokerSettings):
        """``listener``: the listener's published address; ``zookeeper``: the broker's client in
        ZooKeeper mode (§16.1), None for a standalone broker; ``broker_settings``: the broker's
        dynamic settings (§20.4), which this listener puts in force from its entities and follows.
        ``open_kafka_service`` reads what the listener needs first (the cluster id, the peer
        connector's settings) and builds it."""
        self.engine = engine
        self.config = config
        self.clock_ms = clock_ms
        self.run_blocking = run_blocking
        self.max_request_bytes = config.max_socket_request_bytes
        self.broker_id = config.broker_id
        self.host, self.port = listener.host, listener.port
        self.cluster_id = cluster_id
        self.zookeeper = zookeeper
        self.topics: TopicCreation = topics.TopicService(self)
        # ZooKeeper mode: the other brokers' Kafka listeners and the topics' znodes (§16.1); a standalone
        # broker names only itself.
        self.registry: KafkaRegistry | None = None
        self.peers: Callable[[], Sequence[BrokerAddress]] = tuple
        if zookeeper is not None:
            self.registry = KafkaRegistry(zookeeper, self.wait_topic_known,
                                          default_replication_factor=config.default_replication_factor)
            self.peers = self.registry.peers
        # Each coordinator reaches the broker through its internal topic alone (internal_topic.py).
        self.groups = GroupCoordinator(offsets_topic(self), config, clock_ms, self,
                                       on_membership_change=self._group_membership_changed)
        # ZooKeeper mode: the marks of the groups with members here (§17.7).
        self.live_group_marks = (None if zookeeper is None
                                 else LiveGroupMarks(zookeeper, self.broker_id, self.groups.loaded))
        self.markers = markers.MarkerWriter(self, listeners=[self.groups.on_marker])
        # Producer ids come in blocks: from ZooKeeper, or from the log dir's file (§19.2).
        take_block = (functools.partial(take_zookeeper_block, zookeeper) if zookeeper is not None
                      else functools.partial(self.run_blocking, functools.partial(
                          producer_id_blocks.take_file_block, engine.directory.log_manager.fs, config.log_dir)))
        self.producer_ids = producer_id_blocks.ProducerIds(take_block)
        self.coordinator = TransactionCoordinator(transaction_topic(self), config, clock_ms,
                                                  markers.RoutedMarkers(self, self.markers), self.producer_ids.new_id)
        self.transactions: TransactionCoordination | None = self.coordinator
        self.verifier: TransactionVerifier | None = RoutedVerifier(self, self.coordinator)
        self.producer_expiry = ProducerExpiry(engine.directory.log_manager.logs,
                                              config.producer_id_expiration_check_interval_ms / 1000)
        self.authorizer = Authorizer.from_settings(config.authorizer, config.super_users)
        # Where the ACLs are kept (§18.3) and the users the SCRAM credential apis read and change
        # (§18.2; a listener without SASL has them too, as Kafka's does): ZooKeeper's, or the log dir's.
        self.acl_store: FileAcls | ZooKeeperAcls
        self.credential_store: CredentialStore
        if zookeeper is not None:
            self.acl_store = ZooKeeperAcls(zookeeper)
            self.credential_store = ZooKeeperCredentialStore(zookeeper)
        else:
            self.acl_store = FileAcls(engine.directory.log_manager.fs, config.log_dir)
            self.credential_store = FileCredentialStore(config.log_dir, run_blocking)
        self.security = config.kafka_security
        # A SASL listener's users (§18.2): watched in ZooKeeper, or the standalone users file.
        self.credentials: ZooKeeperCredentials | FileCredentials | None = None
        if self.security.sasl:
            self.credentials = (ZooKeeperCredentials(zookeeper) if zookeeper is not None
                                else FileCredentials(config.log_dir))
        # Its own calls to other brokers (§18.5), through the connector ``open_kafka_service`` read.
        self._peer_connector = peer_connector
        self.peer_connections = PeerConnections(peer_connector)
        self._latency = engine.metrics.kafka_requests
        # Client quotas (§20.2) and dynamic broker settings (§20.4), and the entities they come from (§20.1):
        # Kafka's znodes in ZooKeeper mode, else the log dir's file.
        self.quotas = ClientQuotas(samples=config.quota_window_num, window_s=config.quota_window_size_seconds)
        self.broker_settings = broker_settings
        broker_settings.listeners.append(self._reconfigure)
        self.entity_configs: ZooKeeperEntityConfigs | FileEntityConfigs = (
            ZooKeeperEntityConfigs(zookeeper, self._entities_changed) if zookeeper is not None
            else FileEntityConfigs(config.log_dir, run_blocking, self._entities_changed))

    def connection(self, stream: trio.abc.Stream, peer: str) -> ServedKafkaConnection:
        """A processor's connection factory for this listener."""
        gate = None
        if self.credentials is not None:
            config = self.config
            gate = SaslGate(self.credentials, failed_delay_s=config.connection_failed_authentication_delay_ms / 1000,
                            handshake_timeout_s=config.sasl_handshake_timeout_ms / 1000,
                            max_request_bytes=min(config.sasl_max_unauthenticated_request_bytes,
                                                  self.max_request_bytes))
        return ServedKafkaConnection(self, stream, peer, gate)

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the listener's tasks in ``nursery``: the coordinators, producer expiry, the users,
        the peer connections, the registry, the live group marks, the ACLs; before accepting."""
        self.groups.start(nursery)
        self.coordinator.start(nursery)
        nursery.start_soon(self.producer_expiry.run)
        if isinstance(self.credentials, ZooKeeperCredentials):
            await nursery.start(self.credentials.run)
        elif self.credentials is not None:
            await self.credentials.refresh()
        nursery.start_soon(self.peer_connections.run)
        if self.security.sasl and self.zookeeper is not None and self._peer_connector.login is None:
            logger.warning("kafka.security.protocol %s without sasl.inter.broker.username: if another broker joins "
                           "this ZooKeeper, neither can log in to the other and transactions across them fail (§18.5)",
                           self.security.name)
        if self.registry is not None:
            await nursery.start(self.registry.run)
        if self.live_group_marks is not None:
            nursery.start_soon(self.live_group_marks.run)
        if isinstance(self.entity_configs, ZooKeeperEntityConfigs):
            await nursery.start(self.entity_configs.run)
        else:
            await self.entity_configs.load()
        if self.authorizer.enabled:
            if isinstance(self.acl_store, ZooKeeperAcls):
                assert self.zookeeper is not None
                await nursery.start(follow_znode, self.zookeeper, self.authorizer.replace)
            else:
                await nursery.start(follow_file, self.acl_store, self.run_blocking, self.authorizer.replace)

    def _group_membership_changed(self) -> None:
        if self.live_group_marks is not None:
            self.live_group_marks.changed()

    def _entities_changed(self, entities: Entities) -> None:
        """The entity settings in force changed (§20.1): the quotas and the broker's settings follow."""
        self.broker_settings.apply(entities)  # may change the quotas' windows first
        self.quotas.replace(entities)

    def _reconfigure(self, config: BrokerConfig) -> None:
        """The broker's dynamic settings changed (§20.4): what this listener reads of them."""
        self.config = config
        self.quotas.samples, self.quotas.window_s = config.quota_window_num, config.quota_window_size_seconds

    async def has_07_consumers(self, group_id: str) -> bool:
        """Whether ``group_id`` has 0.7 consumers registered in ZooKeeper (§17.7); False without it."""
        return self.registry is not None and await self.registry.has_07_consumers(group_id)

    def on_role(self, topic: str, index: int, role: str) -> None:
        """Replication applied a state of a partition here: both coordinators hear of it
        (a coordinator not started yet loads a partition it leads on its first request)."""
        self.groups.on_role(topic, index, role)
        self.coordinator.on_role(topic, index, role)

    # ----------------------------------------------------------------- dispatch

    async def handle(self, request: Request) -> list[Chunk] | None | Deferred:
        """Answer one request: its chunks, None when it has no answer, or (a Produce with acks -1,
        already appended) what awaits the acknowledgement and then gives the chunks."""
        handle = KAFKA_HANDLERS[request.api]
        started_s = time.perf_counter()
        answer = handle(self, request)
        if inspect.isawaitable(answer):
            answer = await answer
        # request_percentage (§20.2): Produce and Fetch answer their byte quota's throttle time, the
        # others this one's.
        throttle_ms = REQUEST_CHARGE.get().handled(time.perf_counter() - started_s)
        if request.api in _RAW_ANSWERS:
            return answer  # type: ignore[no-any-return]
        if throttle_ms and hasattr(answer, "throttle_time"):
            answer = dataclasses.replace(answer, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
        return [encode_response(request, answer)]

    # ----------------------------------------------------------------- ACLs (§18.3)

    async def read_acls(self) -> AclSet:
        """The stored ACLs (the file read in a worker thread, or the znode)."""
        store = self.acl_store
        if isinstance(store, FileAcls):
            return await self.run_blocking(store.read)  # type: ignore[no-any-return]
        return await store.read()

    async def update_acls(self, edit: Edit) -> AclSet:
        """Apply ``edit`` to the stored ACLs; this broker decides by the result at once."""
        store = self.acl_store
        if isinstance(store, FileAcls):
            after: AclSet = await self.run_blocking(store.update, edit)
        else:
            after = await store.update(edit)
        self.authorizer.replace(after)
        return after

    def observe(self, api_key: int, seconds: float) -> None:
        histogram = self._latency.get(api_key)
        if histogram is not None:
            histogram.observe(seconds)

    # ----------------------------------------------------------------- cluster view

    def kafka_brokers(self) -> list[BrokerAddress]:
        """Every broker serving the Kafka protocol, this one first (§16.4)."""
        me = BrokerAddress(self.broker_id, self.host, self.port)
        return [me, *sorted(b for b in self.peers() if b.broker_id != self.broker_id)]

    def controller_id(self) -> int:
        """Every broker serves CreateTopics (§16.4), so each names itself as the controller."""
        return self.broker_id

    def topic_names(self) -> list[str]:
        """Every topic this broker knows, sorted."""
        return self.engine.admin.topic_names()

    def topic_format(self, topic: str) -> str | None:
        """``"v2"``, ``"0.7"``, or None for a topic this broker does not know (§16.6)."""
        return self.engine.directory.topic_format(topic)

    # ----------------------------------------------------------------- partitions

    def partition_count(self, topic: str) -> int | None:
        """``topic``'s partition count, None for a topic this broker does not know."""
        if self.topic_format(topic) is None:
            return None
        return self.engine.directory.partitions_if_valid(topic)

    async def partition_for(self, topic: str, index: int, *, write: bool) -> Partition | ErrorCode:
        """The partition a Kafka request names, or the Kafka error that answers it (§16.4, §16.6)."""
        fmt = self.topic_format(topic)
        if fmt is None:
            return ErrorCode.unknown_topic_or_partition
        if fmt != FORMAT_V2:
            return ErrorCode.unsupported_for_message_format
        count = self.engine.directory.partitions_if_valid(topic)
        if count is None or not 0 <= index < count:
            return ErrorCode.unknown_topic_or_partition
        if write:
            return await self.engine.directory.partition_for_write(topic, index)
        return self.engine.directory.partition(topic, index)

    async def read_view(self, topic: str, index: int, current_leader_epoch: int) -> ReadView | ErrorCode:
        """What a reader of the partition sees, or the Kafka error that answers it: as
        ``partition_for``, then only the leader serves (§16.4), and a ``current_leader_epoch``
        other than -1 must be the partition's (older: FENCED, newer: UNKNOWN_LEADER_EPOCH)."""
        target = await self.partition_for(topic, index, write=False)
        if isinstance(target, ErrorCode):
            return target
        try:
            view = target.read_view()
        except Refused as exc:
            return kafka_error(exc.error)
        if current_leader_epoch >= 0 and current_leader_epoch != view.leader_epoch:
            return (ErrorCode.fenced_leader_epoch if current_leader_epoch < view.leader_epoch
                    else ErrorCode.unknown_leader_epoch)
        return view

    async def isr_log_start(self, topic: str, index: int, offset: int, deadline: float) -> ErrorCode:
        """Wait until every replica in the partition's ISR stored a log start of at least ``offset``
        (DeleteRecords, §16.4), through the engine's waiter table; REQUEST_TIMED_OUT at ``deadline``."""
        target = await self.partition_for(topic, index, write=False)
        if isinstance(target, ErrorCode):
            return target
        try:
            wait = target.log_start_wait(offset)
        except Refused as exc:
            return kafka_error(exc.error)
        [status] = await settle(self.engine.waiters, [wait], deadline)
        return kafka_error(status)

    def log_start_offset(self, partition: Partition) -> int:
        try:
            return partition.read_view().log.kafka_offsets.start_offset
        except Refused:
            return -1

    def stored_settings(self, topic: str) -> dict[str, str]:
        """The settings stored for ``topic`` (§12.12.1)."""
        return self.engine.admin.stored_settings(topic)

    def timestamp_type(self, topic: str) -> str:
        return self.stored_settings(topic).get(MESSAGE_TIMESTAMP_TYPE, "CreateTime")

    def compacts(self, topic: str) -> bool:
        """Whether ``topic``'s ``cleanup.policy`` has ``compact`` (its settings, then the broker's maps)."""
        return compaction_policy(self.config, topic, log_overrides(self.stored_settings(topic))).compact

    async def wait_topic_known(self, topic: str, timeout_s: float = TOPIC_KNOWN_TIMEOUT_S) -> None:
        """Return once this broker knows ``topic`` (its ZooKeeper watch saw it), or after ``timeout_s``:
        a client that asks right after CreateTopics then finds it (clients retry anyway)."""
        with trio.move_on_after(timeout_s):
            while self.topic_format(topic) is None:
                await trio.sleep(TOPIC_KNOWN_POLL_S)

    async def wait_settings_seen(self, topic: str, settings: dict[str, str], timeout_s: float) -> None:
        """Return once this broker's view of ``topic``'s settings is ``settings`` (its ZooKeeper watch
        applied them), or after ``timeout_s``: a DescribeConfigs sent here next then sees them."""
        with trio.move_on_after(timeout_s):
            while self.stored_settings(topic) != settings:
                await trio.sleep(TOPIC_KNOWN_POLL_S)

    async def delete_topic(self, topic: str) -> None:
        """DeleteTopics of one topic (§16.4); raises ``TopicError``."""
        fmt = self.topic_format(topic)
        if fmt is None:
            raise topics.TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")
        if self.registry is not None:
            await self.registry.delete_topic(topic)
            return
        await self.engine.admin.delete_local_topic(topic)


async def open_kafka_service(*, engine: Engine, config: BrokerConfig, clock_ms: Callable[[], int],
                             run_blocking: RunBlocking, listener: BrokerAddress, zookeeper: ZooKeeperClient | None,
                             open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]],
                             broker_settings: BrokerSettings) -> KafkaService:
    """The Kafka listener, built once what it needs first is read: the cluster id (§16.7) and the
    security of its own calls to other brokers over ``open_stream`` (§18.5)."""
    connector = await run_blocking(functools.partial(PeerConnector.from_config, config, open_stream))
    if zookeeper is not None:
        cluster_id = await zookeeper_cluster_id(zookeeper)
    else:
        cluster_id = await run_blocking(functools.partial(
            _standalone_cluster_id, engine.directory.log_manager.fs, config.log_dir))
    return KafkaService(engine=engine, config=config, clock_ms=clock_ms, run_blocking=run_blocking,
                        listener=listener, cluster_id=cluster_id, peer_connector=connector, zookeeper=zookeeper,
                        broker_settings=broker_settings)


def _standalone_cluster_id(fs: FileSystem, log_dir: str) -> str:
    """The id in ``<log-dir>/.trikafka-cluster-id``, made (durably) on first use (§16.7)."""
    path = os.path.join(log_dir, CLUSTER_ID_FILE)
    if fs.exists(path) and (found := fs.read_file(path).decode().strip()):
        return found
    made = cluster.new_cluster_id()
    fs.write_synced(f"{path}.tmp", (made + "\n").encode())
    fs.rename(f"{path}.tmp", path)
    fs.fsync_dir(log_dir)
    return made
