"""Broker configuration: the 0.7.2 settings of spec §14.1 under snake_case names, and trikafka's own
(replication, the Kafka listener's: docs/protocol.md §12, §16-§20).

``BrokerConfig`` holds the settings with their defaults (0.7.2's, except where
trikafka decides otherwise [T]) and checks their ranges.  Reading them from a
TOML file, a 0.7 ``server.properties`` and overrides is ``config_sources``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import trio

from trikafka.kafka.sasl import SaslMechanism, check_user_name
from trikafka.log.config import HOUR_MS, LogConfig
from trikafka.wire.ports import DEFAULT_HOST, DEFAULT_KAFKA_PORT, DEFAULT_PORT

from .kafka.acl.model import check_settings as check_acl_settings

if TYPE_CHECKING:
    from .security import SecurityProtocol

KAFKA_PORT_OFF = -1  # --kafka-port -1: no Kafka listener
DEFAULT_LOG_DIR = "./trikafka-data"
WILDCARD_HOSTS = ("", "0.0.0.0", "::")  # bind addresses that mean every interface
# sasl.inter.broker.username's password when no sasl.inter.broker.password.file is set (§18.5)
INTER_BROKER_PASSWORD_VARIABLE = "TRIKAFKA_INTER_BROKER_SASL_PASSWORD"

# Settings whose value is a per-topic map ``t1:8,t2:16`` (spec §14.1).
_TOPIC_MAP_FIELDS = (
    "topic_partition_count_map",
    "topic_log_file_size",
    "topic_log_roll_hours",
    "topic_log_retention_hours",
    "topic_log_retention_size",
    "topic_flush_intervals_ms",
)
# Per-topic maps of text values (``t1:compact,t2:compact+delete``).
_TOPIC_TEXT_MAP_FIELDS = ("topic_cleanup_policy_map",)
_CLEANER_MAP_FIELDS = ("topic_min_compaction_lag_ms_map", "topic_delete_retention_ms_map")
# The broker settings a running broker applies when Alter*Configs change them (docs/protocol.md §20.4),
# by Kafka's name: the field.  Kafka's names are accepted at start too (``_RENAMED``).
DYNAMIC_SETTINGS: dict[str, str] = {
    "log.segment.bytes": "log_file_size",
    "log.roll.hours": "log_roll_hours",
    "log.retention.ms": "log_retention_ms",
    "log.retention.hours": "log_retention_hours",
    "log.retention.bytes": "log_retention_size",
    "log.flush.interval.messages": "log_flush_interval",
    "log.flush.interval.ms": "log_default_flush_interval_ms",
    "log.cleanup.policy": "log_cleanup_policy",
    "log.cleaner.delete.retention.ms": "delete_retention_ms",
    "log.cleaner.min.compaction.lag.ms": "min_compaction_lag_ms",
    "log.cleaner.min.cleanable.ratio": "min_cleanable_dirty_ratio",
    "min.insync.replicas": "min_insync_replicas",
    "quota.window.num": "quota_window_num",
    "quota.window.size.seconds": "quota_window_size_seconds",
}
_RENAMED = {"brokerid": "broker_id",
            **{name: field for name, field in DYNAMIC_SETTINGS.items() if name.replace(".", "_") != field}}


class ConfigError(ValueError):
    """A setting is unknown, malformed or out of range; the message names it."""


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a broker needs to run; 0.7 names in the comments (spec §14.1)."""

    broker_id: int = 0  # brokerid (required in 0.7; 0 for a standalone trikafka)
    host: str = DEFAULT_HOST  # bind address (0.7 bound every interface) [T]
    port: int = DEFAULT_PORT  # port; 0 picks a free port (tests)
    # kafka.port: the Apache Kafka protocol listener (docs/protocol.md §16.1); 0 picks a free
    # port; None or -1: off (None is the library's default; `trikafka serve` picks one with
    # default_kafka_port unless given -1) [T]
    kafka_port: int | None = None
    # authorizer: "acl" checks every Kafka request against the ACLs; empty: off (§18.3) [T]
    authorizer: str = ""
    super_users: str = ""  # super.users: ";"-separated principals allowed everything (§18.3)
    auto_create_topics_enable: bool = True  # auto.create.topics.enable: Metadata creates unknown topics (§16.5)
    hostname: str | None = None  # hostname: published in ZooKeeper; default = host
    log_dir: str = DEFAULT_LOG_DIR  # log.dir
    num_partitions: int = 1  # num.partitions
    # default.replication.factor: CreateTopics with -1 and auto-creation in a cluster (§16.4), capped at
    # the live brokers
    default_replication_factor: int = 1
    topic_partition_count_map: Mapping[str, int] = field(default_factory=dict)
    num_threads: int = field(default_factory=lambda: os.cpu_count() or 1)  # processors
    # SO_SNDBUF; 0 (default) leaves the kernel's autotuning [T]: 0.7's fixed 102400 made a
    # 1 MiB fetch go out in many partial sendfile calls, each a trip through the event loop
    # (about 40% more broker CPU per fetched byte; bench/spark_bench.py --broker-set).
    socket_send_buffer: int = 0
    socket_receive_buffer: int = 102400  # SO_RCVBUF; 0 leaves the kernel's autotuning [T]
    # unix.socket.path: also listen on this Unix-domain socket, for clients on this machine
    # (docs/protocol.md §2) [T]
    unix_socket_path: str | None = None
    max_socket_request_bytes: int = 104857600
    max_message_size: int = 1000000
    max_topic_name_length: int = 255
    log_file_size: int = 1073741824
    topic_log_file_size: Mapping[str, int] = field(default_factory=dict)
    log_roll_hours: int = 168
    topic_log_roll_hours: Mapping[str, int] = field(default_factory=dict)
    log_retention_hours: int = 168
    log_retention_ms: int | None = None  # Kafka's log.retention.ms: set, it wins over the hours [T]
    topic_log_retention_hours: Mapping[str, int] = field(default_factory=dict)
    log_retention_size: int = -1
    topic_log_retention_size: Mapping[str, int] = field(default_factory=dict)
    log_cleanup_interval_mins: int = 10
    log_flush_interval: int = 500  # messages
    log_default_flush_interval_ms: int | None = None  # None: the scheduler interval
    log_default_flush_scheduler_interval_ms: int = 3000  # only the default of the above: flushes follow deadlines
    topic_flush_intervals_ms: Mapping[str, int] = field(default_factory=dict)
    # acks.all.fsync: acks -1 on an unreplicated partition waits for a flush; false: a Kafka-format
    # partition answers at the append, Kafka's one-replica promise (docs/protocol.md §12.6) [T]
    acks_all_fsync: bool = True
    monitoring_period_secs: int = 600  # accepted for compatibility; metrics are scraped (metrics_port)
    # ZooKeeper (§8.2).  Off for an in-process BrokerConfig() (library use and
    # tests); `trikafka serve` turns it on unless --standalone [T].
    enable_zookeeper: bool = False
    zk_connect: str | None = None  # None: the broker runs a private ZooKeeper [T]
    zk_sessiontimeout_ms: int = 6000
    zk_connectiontimeout_ms: int | None = None
    zk_synctime_ms: int = 2000
    private_zookeeper_port: int = 2181  # private server only; taken -> a free port; 0: free port [T]
    private_zookeeper_dir: str | None = None  # private server data; default <log_dir>-zookeeper [T]
    # trikafka only.
    graceful_shutdown_timeout_s: float = 10.0  # in-flight requests get this long to finish
    retention_first_run_delay_s: float = 60.0  # 0.7 waits 60 s before the first cleanup
    metrics_port: int | None = None  # HTTP /metrics, /healthz, /readyz on ``host``; None: off; 0: a free port
    # Compaction (docs/protocol.md §11.5) [T].
    log_cleanup_policy: str = "delete"  # delete | compact | compact,delete
    topic_cleanup_policy_map: Mapping[str, str] = field(default_factory=dict)
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_io_max_bytes_per_second: float = 0.0  # 0: unlimited
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    topic_min_compaction_lag_ms_map: Mapping[str, int] = field(default_factory=dict)
    delete_retention_ms: int = 24 * HOUR_MS
    topic_delete_retention_ms_map: Mapping[str, int] = field(default_factory=dict)
    # Consumer groups over the Kafka protocol (docs/protocol.md §17), Kafka's names and defaults.
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions (§17.1)
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor, capped at the live brokers
    offsets_topic_segment_bytes: int = 100 << 20  # offsets.topic.segment.bytes: the compacted topic's segments
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes: an Empty group's offsets expire (§17.5)
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms (§17.4)
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms (§17.4)
    group_max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms (§17.4)
    group_consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms (§17.9)
    group_consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms (§17.9)
    # min.insync.replicas: the default of replicated topics that set none (§20.4); standalone only 1 [T]
    min_insync_replicas: int = 1
    # Security (docs/protocol.md §18.1, §18.4).  The protocols are SecurityProtocol names.
    kafka_security_protocol: str = "PLAINTEXT"  # kafka.security.protocol: the Kafka listener's
    port_security_protocol: str = "PLAINTEXT"  # port.security.protocol: the 0.7 port's (and replica traffic)
    metrics_security_protocol: str = "PLAINTEXT"  # metrics.security.protocol: the metrics endpoint's, PLAINTEXT or SSL
    ssl_certificate_location: str | None = None  # ssl.certificate.location: the broker's certificate, PEM
    ssl_key_location: str | None = None  # ssl.key.location: its private key, PEM
    ssl_key_password: str | None = None  # ssl.key.password: for an encrypted PEM key
    ssl_client_ca_location: str | None = None  # ssl.client.ca.location: set = mutual TLS, client CAs, PEM
    ssl_ca_location: str | None = None  # ssl.ca.location: CAs trusted for other brokers; None: the system's
    ssl_handshake_timeout_ms: int = 10000  # ssl.handshake.timeout.ms (§18.4)
    max_connections_per_ip: int = 2147483647  # max.connections.per.ip (Kafka's name and default, §18.4)
    # Transactions over the Kafka protocol (docs/protocol.md §19.5), Kafka's names and defaults.
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions (§19.5.1)
    transaction_state_log_replication_factor: int = 3  # capped at the live brokers
    transaction_state_log_segment_bytes: int = 100 << 20  # transaction.state.log.segment.bytes
    transaction_max_timeout_ms: int = 900000  # transaction.max.timeout.ms: a producer's timeout cap (§19.5.4)
    # How often Ongoing transactions are checked against their timeout (§19.5.3).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    # An id at rest and unused this long is removed (a tombstone), and how often that is checked (§19.5.3).
    transactional_id_expiration_ms: int = 604800000  # transactional.id.expiration.ms: 7 days
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    # Idempotent producers (docs/protocol.md §19.2.1), Kafka's names and defaults: a producer silent
    # this long on a partition, with no open transaction there, leaves its state; how often that is checked.
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms: 1 day
    producer_id_expiration_check_interval_ms: int = 600000  # producer.id.expiration.check.interval.ms: 10 min
    # trikafka's own: how long a request the coordinator would answer CONCURRENT_TRANSACTIONS waits for
    # the id's write in flight or Complete* (§19.5.3); 0: answered at once, as Kafka does.
    transaction_completion_wait_ms: int = 5000
    # Client quotas (docs/protocol.md §20.2), Kafka's names and defaults: the rates' windows.
    quota_window_num: int = 11  # quota.window.num
    quota_window_size_seconds: int = 1  # quota.window.size.seconds
    # SASL limits (§18.4): a frame before authentication, the whole handshake, a failed attempt's answer.
    sasl_max_unauthenticated_request_bytes: int = 524288
    sasl_handshake_timeout_ms: int = 10000
    connection_failed_authentication_delay_ms: int = 100  # Kafka's name and default
    # Brokers' own calls to each other's Kafka listener (§18.5): the SASL login they make.
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-512"  # Kafka's name; its default (GSSAPI) is not served
    sasl_inter_broker_username: str | None = None  # sasl.inter.broker.username [T]
    sasl_inter_broker_password_file: str | None = None  # its password: this file's first line [T]

    def __post_init__(self) -> None:
        _check_range(self)
        for name in _TOPIC_MAP_FIELDS + _TOPIC_TEXT_MAP_FIELDS + _CLEANER_MAP_FIELDS:
            object.__setattr__(self, name, dict(getattr(self, name)))

    # ----------------------------------------------------------------- derived values

    def partitions(self, topic: str) -> int:
        """``partitions(topic)`` of spec §9.6: the per-topic override or ``num.partitions``."""
        return self.topic_partition_count_map.get(topic, self.num_partitions)

    @property
    def retention_ms(self) -> int:
        """The broker's retention time: ``log.retention.ms`` when set, else ``log.retention.hours``."""
        return self.log_retention_ms if self.log_retention_ms is not None else self.log_retention_hours * HOUR_MS

    @property
    def flush_interval_ms(self) -> int:
        """``log.default.flush.interval.ms``, which defaults to the scheduler interval."""
        if self.log_default_flush_interval_ms is None:
            return self.log_default_flush_scheduler_interval_ms
        return self.log_default_flush_interval_ms

    def log_config(self, topic: str | None = None) -> LogConfig:
        """The ``LogConfig`` of ``topic`` (its overrides applied), or the default one."""
        def pick(per_topic: Mapping[str, int], default: int) -> int:
            return per_topic.get(topic, default) if topic is not None else default

        return LogConfig(
            segment_bytes=pick(self.topic_log_file_size, self.log_file_size),
            roll_ms=pick(self.topic_log_roll_hours, self.log_roll_hours) * HOUR_MS,
            flush_interval_messages=self.log_flush_interval,
            flush_interval_ms=pick(self.topic_flush_intervals_ms, self.flush_interval_ms),
            retention_ms=(self.topic_log_retention_hours[topic] * HOUR_MS
                          if topic is not None and topic in self.topic_log_retention_hours
                          else self.retention_ms),
            retention_bytes=pick(self.topic_log_retention_size, self.log_retention_size),
            max_message_size=self.max_message_size,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )

    def topic_log_configs(self) -> dict[str, LogConfig]:
        """A ``LogConfig`` for every topic that has an override of a log setting."""
        topics: set[str] = set()
        for name in _TOPIC_MAP_FIELDS:
            if name != "topic_partition_count_map":
                topics.update(getattr(self, name))
        return {topic: self.log_config(topic) for topic in sorted(topics)}

    @property
    def serves_kafka(self) -> bool:
        """Whether the broker opens the Kafka-protocol listener (§16.1)."""
        return self.kafka_port is not None and self.kafka_port != KAFKA_PORT_OFF

    @property
    def ssl_handshake_timeout_s(self) -> float:
        return self.ssl_handshake_timeout_ms / 1000

    @property
    def kafka_security(self) -> SecurityProtocol:
        """The Kafka listener's security protocol (§18), parsed."""
        from .security import SecurityProtocol  # security imports the listener's modules, which import this

        return SecurityProtocol.parse(self.kafka_security_protocol)

    @property
    def published_hostname(self) -> str:
        return self.hostname if self.hostname is not None else self.host

    def replace(self, **changes: Any) -> "BrokerConfig":  # Any: each field has its own type
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)


def default_kafka_port(port: int) -> int:
    """The Kafka listener's port when none is given (§16.1): 9093 beside the default 0.7 port,
    else a free one, so brokers started on one machine with their own ports never collide."""
    return DEFAULT_KAFKA_PORT if port == DEFAULT_PORT else 0


async def published_host(config: BrokerConfig) -> str:
    """The host the broker publishes (ZooKeeper ``/brokers/ids/<id>``, METADATA):
    ``hostname`` if set, else the bind address, else (bound to every interface)
    the local IP address, looked up in a worker thread (a resolver may take seconds)."""
    host = config.published_hostname
    if host not in WILDCARD_HOSTS:
        return host
    return await trio.to_thread.run_sync(_local_address)


def _local_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _check_range(cfg: BrokerConfig) -> None:
    at_least = {
        "num_partitions": 1, "default_replication_factor": 1, "num_threads": 1, "max_socket_request_bytes": 2, "max_message_size": 1,
        "max_topic_name_length": 1, "log_file_size": 1, "log_roll_hours": 1, "log_retention_hours": 0,
        "log_cleanup_interval_mins": 1, "log_flush_interval": 1,
        "log_default_flush_scheduler_interval_ms": 1, "socket_send_buffer": 0,
        "socket_receive_buffer": 0, "broker_id": 0, "private_zookeeper_port": 0, "zk_sessiontimeout_ms": 1,
        "log_cleaner_threads": 1, "log_cleaner_backoff_ms": 0, "log_cleaner_dedupe_buffer_size": 1 << 16,
        "min_compaction_lag_ms": 0, "delete_retention_ms": 0,
        "offsets_topic_num_partitions": 1, "offsets_topic_replication_factor": 1, "offsets_retention_minutes": 1,
        "offsets_topic_segment_bytes": 1,
        "group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1, "group_max_session_timeout_ms": 1,
        "group_consumer_session_timeout_ms": 1, "group_consumer_heartbeat_interval_ms": 1,
        "ssl_handshake_timeout_ms": 1, "max_connections_per_ip": 1,
        "transaction_state_log_num_partitions": 1, "transaction_state_log_replication_factor": 1,
        "transaction_state_log_segment_bytes": 1, "transaction_max_timeout_ms": 1,
        "transaction_abort_timed_out_transaction_cleanup_interval_ms": 1,
        "transactional_id_expiration_ms": 1, "transaction_remove_expired_transaction_cleanup_interval_ms": 1,
        "producer_id_expiration_ms": 1, "producer_id_expiration_check_interval_ms": 1,
        "transaction_completion_wait_ms": 0,
        "sasl_max_unauthenticated_request_bytes": 2, "sasl_handshake_timeout_ms": 1,
        "connection_failed_authentication_delay_ms": 0,
        "quota_window_num": 1, "quota_window_size_seconds": 1, "min_insync_replicas": 1,
    }
    for name, low in at_least.items():
        if getattr(cfg, name) < low:
            raise ConfigError(f"{name} must be >= {low}, got {getattr(cfg, name)}")
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"port must be in [0, 65535], got {cfg.port}")
    try:
        check_acl_settings(cfg.authorizer, cfg.super_users)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.kafka_port is not None and not KAFKA_PORT_OFF <= cfg.kafka_port <= 65535:
        raise ConfigError(f"kafka_port must be in [0, 65535] (or -1: off), got {cfg.kafka_port}")
    if cfg.metrics_port is not None and not 0 <= cfg.metrics_port <= 65535:
        raise ConfigError(f"metrics_port must be in [0, 65535], got {cfg.metrics_port}")
    if cfg.log_default_flush_interval_ms is not None and cfg.log_default_flush_interval_ms < 0:
        raise ConfigError("log_default_flush_interval_ms must be >= 0")
    if cfg.log_retention_ms is not None and cfg.log_retention_ms < 0:
        raise ConfigError(f"log_retention_ms must be >= 0, got {cfg.log_retention_ms}")
    if not cfg.enable_zookeeper and cfg.min_insync_replicas != 1:
        raise ConfigError(f"min_insync_replicas above 1 needs replicas: this broker is standalone "
                          f"(got {cfg.min_insync_replicas})")
    if cfg.graceful_shutdown_timeout_s < 0 or cfg.retention_first_run_delay_s < 0:
        raise ConfigError("timeouts and delays must be >= 0")
    if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
        raise ConfigError(f"group_min_session_timeout_ms ({cfg.group_min_session_timeout_ms}) must be <= "
                          f"group_max_session_timeout_ms ({cfg.group_max_session_timeout_ms})")
    if not 0 <= cfg.min_cleanable_dirty_ratio <= 1:
        raise ConfigError(f"min_cleanable_dirty_ratio must be in [0, 1], got {cfg.min_cleanable_dirty_ratio}")
    _check_security(cfg)
    from trikafka.log.cleaner import parse_cleanup_policy

    for topic, policy in [("", cfg.log_cleanup_policy), *cfg.topic_cleanup_policy_map.items()]:
        try:
            parse_cleanup_policy(policy)
        except ValueError as exc:
            raise ConfigError(f"{topic + ': ' if topic else ''}{exc}") from None
    for topic, count in cfg.topic_partition_count_map.items():
        if count < 1:
            raise ConfigError(f"topic.partition.count.map: {topic} needs >= 1 partition, got {count}")


def _check_security(cfg: BrokerConfig) -> None:
    """The listeners' security protocols (§18.1); the files are read later (``security.TlsContexts``)."""
    from .security import SecurityProtocol

    protocols = {}
    for name in ("kafka_security_protocol", "port_security_protocol", "metrics_security_protocol"):
        try:
            protocols[name] = SecurityProtocol.parse(getattr(cfg, name))
        except ValueError as exc:
            raise ConfigError(f"{name.replace('_', '.')}: {exc}") from None
    if protocols["port_security_protocol"].sasl:
        raise ConfigError("port.security.protocol: the 0.7 port has no SASL (PLAINTEXT or SSL)")
    if protocols["metrics_security_protocol"].sasl:
        raise ConfigError("metrics.security.protocol: the metrics endpoint has no SASL (PLAINTEXT or SSL)")
    uses_tls = (protocols["port_security_protocol"].tls or (cfg.serves_kafka and protocols["kafka_security_protocol"].tls)
                or (cfg.metrics_port is not None and protocols["metrics_security_protocol"].tls))
    if uses_tls and not (cfg.ssl_certificate_location and cfg.ssl_key_location):
        raise ConfigError("TLS needs ssl.certificate.location (--tls-cert) and ssl.key.location (--tls-key)")
    _check_inter_broker(cfg, protocols["kafka_security_protocol"])


def _check_inter_broker(cfg: BrokerConfig, kafka: SecurityProtocol) -> None:
    """The inter-broker login (§18.5); its password is read at start (``peer_connector.inter_broker_login``)."""
    try:
        SaslMechanism.parse(cfg.sasl_mechanism_inter_broker_protocol)
    except ValueError as exc:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {exc}") from None
    try:
        if cfg.sasl_inter_broker_username is not None:
            check_user_name(cfg.sasl_inter_broker_username)
    except ValueError as exc:
        raise ConfigError(f"sasl.inter.broker.username: {exc}") from None
    joins_ensemble = cfg.enable_zookeeper and bool(cfg.zk_connect)
    if cfg.serves_kafka and kafka.sasl and joins_ensemble and not cfg.sasl_inter_broker_username:
        raise ConfigError(f"kafka.security.protocol {kafka.name} in a ZooKeeper cluster needs "
                          f"sasl.inter.broker.username (--inter-broker-sasl-username): brokers log in to each other")
