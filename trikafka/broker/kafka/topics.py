"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and the topic side of the
Alter*Configs apis (docs/protocol.md §16.4, §16.5).

Topics created here are Kafka-format (``record.format=v2``, §16.6).  A
standalone broker keeps their settings in its settings file (§9.5) and creates
every partition's log before it answers; with ZooKeeper a topic is a
replicated topic (§12.12.2) of the requested replication factor, whose
replicas create their logs when they see it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import INTERNAL_TOPICS
from trikafka.kafka.topic_ids import NO_TOPIC_ID, topic_id

from ..config import BrokerConfig
from ..engine.errors import EngineError
from ..engine.topic_admin import MAX_CREATED_PARTITIONS
from ..topic_settings import (CLEANUP_POLICY, DELETE_RETENTION_MS, FORMAT_V2, MAX_MESSAGE_BYTES,
                              MESSAGE_TIMESTAMP_TYPE, MIN_COMPACTION_LAG_MS, RECORD_FORMAT, RETENTION_BYTES, RETENTION_MS, SEGMENT_BYTES,
                              TopicConfigError, check_topic_config, log_overrides)
from .acl.model import CLUSTER_NAME, ResourceType
from .entities import CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_STATIC, CONFIG_SOURCE_TOPIC, NO_THROTTLE, ConfigRow, Reply
from .needs import Authorizing, ConfigsHost, TopicAdministration, TopicRegistry

if TYPE_CHECKING:
    from ..dynamic_config import BrokerSettings
    from ..engine.engine import Engine

logger = logging.getLogger(__name__)

MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_ELECTION = "unclean.leader.election.enable"
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SETTINGS_SEEN_TIMEOUT_S = 5.0  # how long an alter waits for this broker's view to show what it stored


def _broker_values(config: BrokerConfig, topic: str) -> dict[str, str]:
    """Each key CreateTopics accepts (§16.4), with the value a topic gets when it is not set."""
    log = config.log_config(topic)
    return {
        CLEANUP_POLICY: config.topic_cleanup_policy_map.get(topic, config.log_cleanup_policy),
        RETENTION_MS: str(log.retention_ms),
        RETENTION_BYTES: str(log.retention_bytes),
        SEGMENT_BYTES: str(log.segment_bytes),
        MAX_MESSAGE_BYTES: str(log.max_message_size),
        MIN_INSYNC_REPLICAS: str(config.min_insync_replicas),
        DELETE_RETENTION_MS: str(config.topic_delete_retention_ms_map.get(topic, config.delete_retention_ms)),
        MIN_COMPACTION_LAG_MS: str(config.topic_min_compaction_lag_ms_map.get(topic, config.min_compaction_lag_ms)),
        UNCLEAN_ELECTION: "false",
        MESSAGE_TIMESTAMP_TYPE: "CreateTime",
    }


# Read-only facts DescribeConfigs lists beside the settings.
_READ_ONLY: dict[str, Callable[[BrokerConfig], str]] = {
    RECORD_FORMAT: lambda config: "v2",
}
# What a broker started with no setting of its own answers: a value that differs came from its
# settings (file or flags), DescribeConfigs' STATIC_BROKER_CONFIG.
_BUILT_IN = BrokerConfig()

# DescribeConfigs' config_type codes (v3+) and each topic key's type and documentation, as Kafka
# types them (include_documentation, §16.4).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
CONFIG_DOCS: dict[str, tuple[int, str]] = {
    CLEANUP_POLICY: (LIST, "delete, compact or both: whether old segments are deleted by retention, "
                           "compacted to each key's latest record, or both"),
    RETENTION_MS: (LONG, "How long a segment is kept after its last record, in ms, before retention deletes it"),
    RETENTION_BYTES: (LONG, "The size a partition may reach before retention deletes its oldest segments "
                            "(-1: no limit)"),
    SEGMENT_BYTES: (INT, "The size at which a partition rolls to a new segment file"),
    MIN_INSYNC_REPLICAS: (INT, "The in-sync replicas an acks=all produce needs, else NOT_ENOUGH_REPLICAS"),
    DELETE_RETENTION_MS: (LONG, "How long compaction keeps a tombstone (a null value), in ms"),
    MIN_COMPACTION_LAG_MS: (LONG, "The age a record must reach, in ms, before compaction may remove it"),
    UNCLEAN_ELECTION: (BOOLEAN, "Whether a replica outside the ISR may become leader when no in-sync replica "
                                "is left (acknowledged records may be lost)"),
    MESSAGE_TIMESTAMP_TYPE: (STRING, "CreateTime (the producer's stamp) or LogAppendTime (the broker's)"),
    MAX_MESSAGE_BYTES: (INT, "The largest record batch a Produce may append to the topic"),
    RECORD_FORMAT: (STRING, "trikafka's own: v2 (Kafka record batches) or 0.7; fixed at creation"),
}

# Each broker key's type (§20.4) as Kafka types it; a topic key's is CONFIG_DOCS'.
BROKER_CONFIG_TYPES = {
    "log.segment.bytes": INT, "log.roll.hours": INT, "log.retention.ms": LONG, "log.retention.hours": INT,
    "log.retention.bytes": LONG, "log.flush.interval.messages": LONG, "log.flush.interval.ms": LONG,
    "log.cleanup.policy": LIST, "log.cleaner.delete.retention.ms": LONG, "log.cleaner.min.compaction.lag.ms": LONG,
    "log.cleaner.min.cleanable.ratio": DOUBLE, "min.insync.replicas": INT, "quota.window.num": INT,
    "quota.window.size.seconds": INT, "broker.id": INT, "message.max.bytes": INT, "num.partitions": INT,
    "log.dirs": STRING,
}


def _config_type(name: str) -> int:
    return CONFIG_DOCS[name][0] if name in CONFIG_DOCS else BROKER_CONFIG_TYPES[name]


# Each topic key's broker-wide synonym, under Kafka's broker setting name (DescribeConfigs' synonyms, §16.4).
BROKER_SYNONYMS = {
    CLEANUP_POLICY: "log.cleanup.policy",
    RETENTION_MS: "log.retention.ms",
    RETENTION_BYTES: "log.retention.bytes",
    SEGMENT_BYTES: "log.segment.bytes",
    MIN_INSYNC_REPLICAS: "min.insync.replicas",
    DELETE_RETENTION_MS: "log.cleaner.delete.retention.ms",
    MIN_COMPACTION_LAG_MS: "log.cleaner.min.compaction.lag.ms",
    UNCLEAN_ELECTION: "unclean.leader.election.enable",
    MESSAGE_TIMESTAMP_TYPE: "log.message.timestamp.type",
    MAX_MESSAGE_BYTES: "message.max.bytes",
}


class TopicError(Exception):
    """A topic that cannot be created or changed; ``code`` answers it."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class TopicHost(Protocol):
    """What ``TopicService`` needs of its broker: the settings, the engine's topic admin and
    directory, the topics it knows, and (ZooKeeper mode) the registry and its watch."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def registry(self) -> TopicRegistry | None: ...

    def topic_format(self, topic: str) -> str | None: ...

    def stored_settings(self, topic: str) -> dict[str, str]: ...

    async def wait_settings_seen(self, topic: str, settings: dict[str, str], timeout_s: float) -> None: ...

    @property
    def broker_settings(self) -> BrokerSettings: ...  # a synonym's dynamic source (§20.4)


class TopicService:
    """Creates and changes Kafka-format topics for one broker."""

    def __init__(self, service: TopicHost):
        self._service = service

    def check_settings(self, topic: str, settings: dict[str, str], replicated: bool) -> dict[str, str]:
        """The settings a new topic stores, ``record.format=v2`` added; TopicError(INVALID_CONFIG) on a bad one."""
        return {**self._checked(topic, settings, replicated), RECORD_FORMAT: FORMAT_V2}

    def _checked(self, topic: str, settings: dict[str, str], replicated: bool) -> dict[str, str]:
        """``settings`` as a topic stores them (standalone: without the replication keys); TopicError on a bad one."""
        allowed = set(_broker_values(self._service.config, topic))
        for key in settings:
            if key not in allowed:
                raise TopicError(ErrorCode.invalid_config, f"unknown or unsupported topic config {key!r} "
                                                            f"(accepted: {', '.join(sorted(allowed))})")
        stored = {k: v for k, v in settings.items() if v is not None}
        if not replicated:  # a standalone topic accepts the replication keys' defaults and stores none
            if stored.get(MIN_INSYNC_REPLICAS, "1") != "1":
                raise TopicError(ErrorCode.invalid_config, f"{MIN_INSYNC_REPLICAS} above 1 needs replicas: this "
                                                            "broker is standalone")
            stored = {k: v for k, v in stored.items() if k not in (MIN_INSYNC_REPLICAS, UNCLEAN_ELECTION)}
        try:
            log_overrides(stored)  # raises on a value that does not parse
            check_topic_config(stored, replicated=replicated)
        except TopicConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        return stored

    def check_alterable(self, topic: str, key: str) -> None:
        """TopicError(INVALID_CONFIG) unless an Alter*Configs may name ``key`` for ``topic`` (§16.4)."""
        if key in _READ_ONLY:
            raise TopicError(ErrorCode.invalid_config, f"topic config {key!r} is read-only")
        allowed = _broker_values(self._service.config, topic)
        if key not in allowed:
            raise TopicError(ErrorCode.invalid_config, f"unknown or unsupported topic config {key!r} "
                                                        f"(accepted: {', '.join(sorted(allowed))})")

    def effective(self, topic: str, settings: dict[str, str], key: str) -> str:
        """``key``'s value for ``topic`` given its stored ``settings``: the stored one, else the broker's."""
        return settings.get(key, _broker_values(self._service.config, topic)[key])

    async def alter(self, topic: str, edit: Callable[[dict[str, str]], dict[str, str]], *,
                    validate_only: bool) -> None:
        """Alter*Configs on a topic (§16.4): its stored settings become ``edit(current)``, checked as
        CreateTopics checks them, stored where `trikafka topics alter` keeps them.  Raises TopicError."""
        service = self._service
        _refuse_internal(topic)
        fmt = service.topic_format(topic)
        if fmt is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")
        if fmt != FORMAT_V2:
            raise TopicError(ErrorCode.unsupported_for_message_format,
                             f"{topic!r} is a 0.7 topic: change its settings with `trikafka topics alter`")
        replicated = service.config.enable_zookeeper  # with ZooKeeper a Kafka-format topic is replicated

        def change(current: dict[str, str], _replicated: bool = replicated) -> dict[str, str]:
            edited = edit({k: v for k, v in current.items() if k != RECORD_FORMAT})
            return {**self._checked(topic, edited, replicated), RECORD_FORMAT: current.get(RECORD_FORMAT, FORMAT_V2)}

        if validate_only:
            change(service.stored_settings(topic))
            return
        if service.registry is None:
            await service.engine.admin.settings.update(topic, change)
        else:
            stored = await service.registry.alter_topic_config(topic, change)
            await service.wait_settings_seen(topic, stored, SETTINGS_SEEN_TIMEOUT_S)
        logger.info("topic %s: settings altered over the Kafka protocol", topic)

    async def create(self, topic: str, partitions: int, replication_factor: int, settings: dict[str, str], *,
                     validate_only: bool = False) -> tuple[int, int]:
        """Create a Kafka-format topic; (partitions, replication factor).  Raises TopicError."""
        service = self._service
        _refuse_internal(topic)
        if service.engine.directory.partitions_if_valid(topic) is None:
            raise TopicError(ErrorCode.invalid_topic_exception, f"{topic!r} is not a valid topic name")
        if service.topic_format(topic) is not None:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {topic!r} already exists")
        if partitions == -1:
            partitions = service.config.partitions(topic)
        if not 1 <= partitions <= MAX_CREATED_PARTITIONS:
            raise TopicError(ErrorCode.invalid_partitions, f"{partitions} partitions: the range is 1 to "
                                                            f"{MAX_CREATED_PARTITIONS}")
        replicated = service.config.enable_zookeeper
        stored = self.check_settings(topic, settings, replicated)
        if not replicated:
            if replication_factor not in (-1, 1):
                raise TopicError(ErrorCode.invalid_replication_factor,
                                 f"replication factor {replication_factor}: a standalone broker holds one replica")
            if validate_only:
                return partitions, 1
            await self._create_local(topic, partitions, stored)
            return partitions, 1
        registry = service.registry
        assert registry is not None, "a broker with ZooKeeper registers its Kafka listener before serving"
        return await registry.create_topic(topic, partitions, replication_factor, stored,
                                           validate_only=validate_only)

    async def create_internal(self, topic: str, partitions: int, replication_factor: int,
                              settings: dict[str, str]) -> None:
        """Create an internal topic (§17.1) with ``settings`` as given (they are the broker's own, so
        none is refused); standalone, the replication keys are dropped.  Raises TopicError."""
        service = self._service
        if service.topic_format(topic) is not None:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {topic!r} already exists")
        stored = {**settings, RECORD_FORMAT: "v2"}
        if not service.config.enable_zookeeper:
            stored = {k: v for k, v in stored.items() if k not in (MIN_INSYNC_REPLICAS, UNCLEAN_ELECTION)}
            await self._create_local(topic, partitions, stored)
            return
        registry = service.registry
        assert registry is not None, "a broker with ZooKeeper registers its Kafka listener before serving"
        await registry.create_topic(topic, partitions, replication_factor, stored, validate_only=False)

    async def _create_local(self, topic: str, partitions: int, stored: dict[str, str]) -> None:
        error = await self._service.engine.admin.create_kafka_topic(topic, partitions, stored)
        if error != EngineError.NO_ERROR:
            raise _local_change_error(error, topic)

    async def auto_create(self, topics: list[str]) -> dict[str, ErrorCode]:
        """§16.5: create the unknown ``topics`` with the defaults; per topic tried, ``ErrorCode.none`` when
        created, else the error that refused it (none tried while auto-creation is off)."""
        if not self._service.config.auto_create_topics_enable:
            return {}
        outcome: dict[str, ErrorCode] = {}
        for topic in topics:
            try:
                await self.create(topic, -1, -1, {})
            except TopicError as exc:
                logger.info("auto-creation of %r refused: %s", topic, exc)
                outcome[topic] = exc.code
                continue
            outcome[topic] = ErrorCode.none
        return outcome

    async def add_partitions(self, topic: str, count: int, *, validate_only: bool) -> None:
        """CreatePartitions: raise ``topic``'s count to ``count``.  Raises TopicError."""
        service = self._service
        _refuse_internal(topic)
        fmt = service.topic_format(topic)
        if fmt is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")
        if fmt != "v2":
            raise TopicError(ErrorCode.unsupported_for_message_format, f"{topic!r} is a 0.7 topic")
        current = service.engine.directory.partitions_if_valid(topic) or 0
        if count <= current:
            raise TopicError(ErrorCode.invalid_partitions, f"{topic!r} has {current} partitions; the count can "
                                                            f"only grow")
        if count > MAX_CREATED_PARTITIONS:
            raise TopicError(ErrorCode.invalid_partitions, f"{count} partitions: at most {MAX_CREATED_PARTITIONS}")
        if validate_only:
            return
        if service.config.enable_zookeeper:
            assert service.registry is not None
            await service.registry.add_partitions(topic, count)
            return
        error = await service.engine.admin.add_partitions(topic, count)
        if error != EngineError.NO_ERROR:
            raise _local_change_error(error, topic)

    def describe(self, topic: str, keys: tuple[str, ...] | None) -> list[ConfigRow]:
        """``topic``'s settings as DescribeConfigs lists them (§16.4), with Kafka's synonyms."""
        service = self._service
        stored = service.stored_settings(topic)
        built_in = _broker_values(_BUILT_IN, topic)
        values = [(k, default, False) for k, default in _broker_values(service.config, topic).items()]
        values += [(k, value(service.config), True) for k, value in _READ_ONLY.items()]
        built_in.update((k, value(_BUILT_IN)) for k, value in _READ_ONLY.items())
        rows = []
        for key, default, read_only in values:
            if keys is not None and key not in keys:
                continue
            synonyms: tuple[tuple[str, str, int], ...] = (
                ((key, stored[key], CONFIG_SOURCE_TOPIC),) if key in stored and not read_only else ())
            broker_source = service.broker_settings.level_source(BROKER_SYNONYMS.get(key, key)) or (
                CONFIG_SOURCE_DEFAULT if default == built_in[key] else CONFIG_SOURCE_STATIC)
            if key in BROKER_SYNONYMS:
                synonyms += ((BROKER_SYNONYMS[key], default, broker_source),)
            value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (default, broker_source)
            rows.append(ConfigRow(key, value, read_only, source, synonyms))
        return rows


# What the topic admin's refusal of a standalone creation or growth answers (§16.4).
_LOCAL_CHANGE_ERRORS: dict[EngineError, tuple[ErrorCode, str]] = {
    EngineError.TOPIC_ALREADY_EXISTS: (ErrorCode.topic_already_exists, "topic {!r} already exists"),
    EngineError.SETTINGS_NOT_KEPT: (ErrorCode.unknown_server_error, "the settings of {!r} could not be stored"),
    EngineError.INVALID_PARTITIONS: (ErrorCode.invalid_partitions, "{!r} has that many partitions already"),
}


def _local_change_error(error: EngineError, topic: str) -> TopicError:
    code, message = _LOCAL_CHANGE_ERRORS[error]
    return TopicError(code, message.format(topic))


def _refuse_internal(topic: str) -> None:
    if topic in INTERNAL_TOPICS:
        raise TopicError(ErrorCode.invalid_request, f"{topic!r} is internal: the broker keeps it (§17.1)")


def authorize(service: Authorizing, api: KafkaApi, name: str,
               resource_type: ResourceType = ResourceType.TOPIC) -> None:
    """Raise TopicError with the table's denial unless the principal may do ``api`` on ``name`` (§18.3)."""
    if (denied := service.authorizer.denied(api, name, resource_type)) is not None:
        raise TopicError(denied, f"{api.label} on {name!r} is not authorized")


def _error(exc: TopicError) -> tuple[ErrorCode, str]:
    return exc.code, str(exc)


async def create_topics(service: TopicAdministration, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    results = []
    validate_only = getattr(body, "validate_only", False)
    for topic in body.topics:
        code, message, partitions, factor = ErrorCode.none, None, -1, -1
        try:
            authorize(service, KafkaApi.CREATE_TOPICS, topic.name)
            if topic.assignments:
                raise TopicError(ErrorCode.invalid_request, "manual replica assignments are not served")
            partitions, factor = await service.topics.create(
                topic.name, topic.num_partitions, topic.replication_factor,
                {c.name: c.value for c in topic.configs}, validate_only=validate_only)
        except TopicError as exc:
            code, message = _error(exc)
        results.append(reply.nested("CreatableTopicResult", name=topic.name,
                                    topic_id=topic_id(topic.name) if code == ErrorCode.none else NO_TOPIC_ID,
                                    error_code=code,
                                    error_message=message, topic_config_error_code=0, num_partitions=partitions,
                                    replication_factor=factor, configs=None))
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(results))


async def delete_topics(service: TopicAdministration, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    names = list(getattr(body, "topic_names", ()) or ()) + [t.name for t in getattr(body, "topics", ()) or ()]
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
            authorize(service, KafkaApi.DELETE_TOPICS, name)
            _refuse_internal(name)
            await service.delete_topic(name)
        except TopicError as exc:
            code, message = _error(exc)
        results.append(reply.nested("DeletableTopicResult", name=name, topic_id=NO_TOPIC_ID, error_code=code,
                                    error_message=message))
    return reply.response(throttle_time=NO_THROTTLE, responses=tuple(results))


async def create_partitions(service: TopicAdministration, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    results = []
    for topic in body.topics:
        code, message = ErrorCode.none, None
        try:
            authorize(service, KafkaApi.CREATE_PARTITIONS, topic.name)
            if topic.assignments:
                raise TopicError(ErrorCode.invalid_request, "manual replica assignments are not served")
            await service.topics.add_partitions(topic.name, topic.count, validate_only=body.validate_only)
        except TopicError as exc:
            code, message = _error(exc)
        results.append(reply.nested("CreatePartitionsTopicResult", name=topic.name, error_code=code,
                                    error_message=message))
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(results))


def describe_configs(service: ConfigsHost, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    results = []
    synonyms = getattr(body, "include_synonyms", False)
    documentation = getattr(body, "include_documentation", False)
    for resource in body.resources:
        keys = resource.configuration_keys
        code, message, configs = ErrorCode.none, None, []
        checked = {RESOURCE_TOPIC: ResourceType.TOPIC, RESOURCE_BROKER: ResourceType.CLUSTER}.get(
            resource.resource_type)
        if checked is not None and (denied := service.authorizer.denied(
                KafkaApi.DESCRIBE_CONFIGS, resource.resource_name if checked is ResourceType.TOPIC else CLUSTER_NAME,
                checked)) is not None:
            code, message = denied, f"DescribeConfigs on {resource.resource_name!r} is not authorized"
        elif resource.resource_type == RESOURCE_TOPIC:
            fmt = service.topic_format(resource.resource_name)
            if fmt is None:
                code, message = ErrorCode.unknown_topic_or_partition, f"no topic {resource.resource_name!r}"
            else:
                configs = service.topics.describe(resource.resource_name, keys)
        elif resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name not in ("", str(service.broker_id)):
                code, message = ErrorCode.invalid_request, (f"broker {resource.resource_name!r} is described by "
                                                            f"itself; this is broker {service.broker_id}")
            else:
                configs = service.broker_settings.describe(resource.resource_name, keys)
        else:
            code, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not served"
        results.append(reply.nested(
            "DescribeConfigsResult", error_code=code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=tuple(reply.nested(
                "DescribeConfigsResourceResult", name=row.name, value=row.value, read_only=row.read_only,
                is_default=row.is_default, config_source=row.source, is_sensitive=False,
                synonyms=tuple(reply.nested("DescribeConfigsSynonym", name=name, value=value, source=source)
                               for name, value, source in row.synonyms) if synonyms else (),
                config_type=_config_type(row.name),
                documentation=CONFIG_DOCS[row.name][1] if documentation and row.name in CONFIG_DOCS else None)
                for row in configs)))
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(results))
