"""Administration over the Apache Kafka protocol: topics, offsets, configs (docs/protocol.md §16.4), groups (§17.8),
transactions (§19.5.4), client quotas and broker settings (§20).

``KafkaAdmin`` wraps a ``KafkaClient``: ``create_topics`` goes to the
controller, ``list_offsets`` to each partition's leader, ``describe_configs``,
``incremental_alter_configs``, the client quota calls and ``metadata`` to any broker; ``list_groups`` and ``list_transactions`` to
every broker, the other group calls to the group's coordinator and
``describe_transactions`` to each transactional id's.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.consumer_protocol import PROTOCOL_TYPE, Assignment, decode_assignment
from trikafka.kafka.errors import KafkaCodecError

from . import schema
from .client import ClusterMetadata, KafkaClient
from .connection import KafkaConnection, UnsupportedApi
from .errors import KafkaResponseError, check
from .group_offsets import TopicPartition, fetch_values, fetched_offsets
from .coordinators import find_coordinator
from .membership import COORDINATOR_KEY_TYPE_GROUP, COORDINATOR_KEY_TYPE_TRANSACTION, group_api

# ListOffsets' special timestamps (§16.4).
LATEST = -1  # the high watermark: the offset the next record gets
EARLIEST = -2  # the log start offset
MAX_TIMESTAMP = -3  # the record with the largest timestamp (ListOffsets v7)
DEFAULT_ADMIN_TIMEOUT_S = 30.0
# DescribeConfigs' resource types and the config_source that means "the default".
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_DEFAULT_CONFIG_SOURCE = 5
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs' config_operation


@dataclass(frozen=True)
class NewTopic:
    """A topic for ``create_topics``; -1 partitions or replication factor: the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


class OffsetAt(NamedTuple):
    """A ListOffsets answer: the offset, and the timestamp it was found by (-1 when none)."""

    offset: int
    timestamp_ms: int


class ConfigValue(NamedTuple):
    """One setting of a DescribeConfigs answer."""

    value: str | None
    is_default: bool
    read_only: bool


class GroupListing(NamedTuple):
    """One group as ListGroups names it; ``state`` is empty from a broker older than ListGroups v4."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class GroupMemberDescription:
    """One member as DescribeGroups shows it; ``assignment`` decoded for a ``consumer`` group
    (None where the bytes are another protocol's or do not decode)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: Assignment | None


@dataclass(frozen=True)
class GroupDescription:
    """One group as DescribeGroups shows it: state, protocol type, the assignor chosen, members."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMemberDescription, ...]
    group_epoch: int | None = None  # a Kafka 4 consumer group's (§17.9); None for a classic group


class TransactionListing(NamedTuple):
    """One transactional id as ListTransactions names it; ``state`` by Kafka's name (``Ongoing``)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """One transactional id at its coordinator (DescribeTransactions): ``start_time_ms`` is -1 when no
    transaction has started; ``partitions`` those of the open (or completing) transaction."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]


class QuotaEntity(NamedTuple):
    """A client quota entity (§20.1): its (entity type, name) pairs, ``user`` before ``client-id``; a
    name None is the default of its type."""

    components: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str | None]]) -> "QuotaEntity":
        return cls(tuple(sorted(pairs, key=lambda pair: pair[0] != "user")))


class QuotaFilter(NamedTuple):
    """One DescribeClientQuotas component: ``match_type`` 0 exact (``match``), 1 the default, 2 any name."""

    entity_type: str
    match_type: int = 2
    match: str | None = None


class KafkaAdmin:
    """Administrative calls through ``client``."""

    def __init__(self, client: KafkaClient, *, timeout_s: float = DEFAULT_ADMIN_TIMEOUT_S):
        self.client = client
        self.timeout_s = timeout_s

    async def metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """Brokers, controller, cluster id and ``topics`` (None: every topic), asked afresh."""
        return await self.client.refresh_metadata(topics)

    async def create_topics(self, topics: Iterable[NewTopic], *,
                            validate_only: bool = False) -> dict[str, KafkaResponseError | None]:
        """Create ``topics`` on the controller; per topic name, None or the error it answered."""
        listed = list(topics)
        connection = await self.client.controller_connection()
        answer = await connection.request(
            KafkaApi.CREATE_TOPICS, extra_wait_s=self.timeout_s, timeout=datetime.timedelta(seconds=self.timeout_s),
            validate_only=validate_only,
            topics=[{"name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                     "assignments": (), "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}
                    for t in listed])
        results: dict[str, KafkaResponseError | None] = {}
        for result in schema.field(answer, "topics", ()):
            code = int(result.error_code)
            results[str(result.name)] = None if code == ErrorCode.none else KafkaResponseError(
                code, f"topic {result.name}", schema.field(result, "error_message"))
        self.client.metadata.topics.clear()  # the next call asks for the new topics' leaders
        return results

    async def list_offsets(self, topic: str, partitions: Mapping[int, int], *,
                           read_committed: bool = False) -> dict[int, OffsetAt]:
        """For each partition, the offset at a timestamp: ``LATEST``, ``EARLIEST``, ``MAX_TIMESTAMP``
        or a time in ms (the first offset whose batch's max timestamp is at or after it; -1: none).
        ``read_committed``: ``LATEST`` is the last stable offset (§19.7)."""
        found: dict[int, OffsetAt] = {}
        for partition, timestamp_ms in partitions.items():
            async def ask(connection: KafkaConnection, partition: int = partition,
                          timestamp_ms: int = timestamp_ms) -> OffsetAt:
                return await self._list_offset(connection, topic, partition, timestamp_ms, read_committed)
            found[partition] = await self.client.call_leader(topic, partition, ask)
        return found

    async def _list_offset(self, connection: KafkaConnection, topic: str, partition: int,
                           timestamp_ms: int, read_committed: bool) -> OffsetAt:
        answer = await connection.request(
            KafkaApi.LIST_OFFSETS, replica_id=-1, isolation_level=int(read_committed),
            topics=[{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp_ms,
                                                    "current_leader_epoch": -1}]}])
        for topic_answer in schema.field(answer, "topics", ()):
            for part in topic_answer.partitions:
                if int(part.partition_index) == partition:
                    check(part.error_code, f"list offsets of {topic}-{partition}")
                    return OffsetAt(int(part.offset), int(schema.field(part, "timestamp", -1)))
        raise KafkaResponseError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")

    async def describe_configs(self, name: str, *, resource_type: int = RESOURCE_TOPIC) -> dict[str, ConfigValue]:
        """Every setting of a topic (or, with ``RESOURCE_BROKER``, a broker id, asked of that broker) with its
        value."""
        connection = await self._configs_connection(name, resource_type)
        answer = await connection.request(
            KafkaApi.DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
            resources=[{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}])
        settings: dict[str, ConfigValue] = {}
        for result in schema.field(answer, "results", ()):
            check(result.error_code, f"configs of {name}", schema.field(result, "error_message"))
            for entry in result.configs:
                source = schema.field(entry, "config_source")
                is_default = (source == _DEFAULT_CONFIG_SOURCE if source is not None
                              else bool(schema.field(entry, "is_default", False)))
                settings[str(entry.name)] = ConfigValue(entry.value, is_default, bool(entry.read_only))
        return settings

    async def incremental_alter_configs(self, name: str, changes: Mapping[str, str | None], *,
                                        resource_type: int = RESOURCE_TOPIC, validate_only: bool = False) -> None:
        """SET (a value) or DELETE (None) settings of a topic, or with ``RESOURCE_BROKER`` of a broker id or
        ``""``, every broker's default (§20.4, which confluent-kafka and kafka-python cannot name)."""
        connection = await self._configs_connection(name, resource_type)
        answer = await connection.request(
            KafkaApi.INCREMENTAL_ALTER_CONFIGS, validate_only=validate_only,
            resources=[{"resource_type": resource_type, "resource_name": name,
                        "configs": [{"name": k, "config_operation": _SET if v is not None else _DELETE, "value": v}
                                    for k, v in changes.items()]}])
        for result in schema.field(answer, "responses", ()):
            check(result.error_code, f"configs of {name!r}", schema.field(result, "error_message"))

    async def _configs_connection(self, name: str, resource_type: int) -> KafkaConnection:
        """A broker resource's own broker (a broker describes only itself, §20.4), else any broker."""
        if resource_type != RESOURCE_BROKER or not name.isdigit():
            return await self.client.any_connection()
        if int(name) not in self.client.metadata.brokers:
            await self.client.refresh_metadata()
        return await self.client.node_connection(int(name))

    # ------------------------------------------------------------------ client quotas (§20.3)

    async def describe_client_quotas(self, components: Iterable[QuotaFilter] = (), *,
                                     strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The stored quotas of the entities matching every filter, by entity (see ``QuotaEntity``)."""
        connection = await self.client.any_connection()
        answer = await connection.request(
            KafkaApi.DESCRIBE_CLIENT_QUOTAS, strict=strict,
            components=[{"entity_type": f.entity_type, "match_type": f.match_type, "match": f.match}
                        for f in components])
        check(schema.field(answer, "error_code"), "describe client quotas", schema.field(answer, "error_message"))
        return {QuotaEntity.of((str(e.entity_type), e.entity_name) for e in entry.entity):
                {str(v.key): float(v.value) for v in entry.values}
                for entry in schema.field(answer, "entries", None) or ()}

    async def alter_client_quotas(self, changes: Mapping[QuotaEntity, Mapping[str, float | None]], *,
                                  validate_only: bool = False) -> dict[QuotaEntity, KafkaResponseError | None]:
        """Set (a value) or remove (None) quota keys of each entity; per entity, None or its error."""
        connection = await self.client.any_connection()
        answer = await connection.request(
            KafkaApi.ALTER_CLIENT_QUOTAS, validate_only=validate_only,
            entries=[{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.components],
                      "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                              for k, v in ops.items()]}
                     for entity, ops in changes.items()])
        results: dict[QuotaEntity, KafkaResponseError | None] = {}
        for entry in schema.field(answer, "entries", ()):
            entity = QuotaEntity.of((str(e.entity_type), e.entity_name) for e in entry.entity)
            code = int(entry.error_code)
            results[entity] = None if code == ErrorCode.none else KafkaResponseError(
                code, f"client quotas of {entity}", schema.field(entry, "error_message"))
        return results

    # ------------------------------------------------------------------ groups (§17.8)

    async def group_coordinator(self, group_id: str) -> KafkaConnection:
        """The connection to ``group_id``'s coordinator (FindCoordinator, retried while none is available)."""
        return await self._coordinator(group_id, COORDINATOR_KEY_TYPE_GROUP, "group")

    async def _coordinator(self, key: str, key_type: int, what: str) -> KafkaConnection:
        for attempt in range(self.client.max_retries + 1):
            try:
                coordinator = await find_coordinator(self.client, key, key_type, what=f"coordinator of {what} {key}")
            except KafkaResponseError as exc:
                if not exc.retriable or attempt == self.client.max_retries:
                    raise
            else:
                return await self.client.connection_to(coordinator.host, coordinator.port)
            await trio.sleep(self.client.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable: the last attempt raises")

    async def list_groups(self) -> list[GroupListing]:
        """Every group of every broker (each broker lists the groups it coordinates), by group id."""
        await self.client.refresh_metadata()
        found: dict[str, GroupListing] = {}
        for node_id in sorted(self.client.metadata.brokers):
            connection = await self.client.node_connection(node_id)
            answer = await connection.request(group_api("LIST_GROUPS"), states_filter=(), types_filter=())
            check(schema.field(answer, "error_code", 0), f"groups of broker {node_id}")
            for group in schema.field(answer, "groups", ()):
                found[str(group.group_id)] = GroupListing(str(group.group_id), str(group.protocol_type),
                                                          str(schema.field(group, "group_state", "")))
        return [found[name] for name in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """Each group's state and members, asked of its coordinator; raises for a group's error code.

        A Kafka 4 consumer group is described by ConsumerGroupDescribe, any other by DescribeGroups
        (which answers a consumer group as Dead), as Kafka's admin client does (§17.8).
        """
        described: dict[str, GroupDescription] = {}
        for group_id in group_ids:
            connection = await self.group_coordinator(group_id)
            consumer_group = await _consumer_group(connection, group_id)
            if consumer_group is not None:
                described[group_id] = consumer_group
                continue
            answer = await connection.request(group_api("DESCRIBE_GROUPS"), groups=(group_id,),
                                              include_authorized_operations=False)
            for group in schema.field(answer, "groups", ()):
                check(group.error_code, f"group {group.group_id}", schema.field(group, "error_message"))
                consumer = group.protocol_type in (PROTOCOL_TYPE, "")
                described[str(group.group_id)] = GroupDescription(
                    str(group.group_id), str(group.group_state), str(group.protocol_type), str(group.protocol_data),
                    tuple(GroupMemberDescription(
                        str(m.member_id), schema.field(m, "group_instance_id"), str(m.client_id), str(m.client_host),
                        _assignment(bytes(m.member_assignment)) if consumer else None) for m in group.members))
        return described

    async def list_group_offsets(self, group_id: str,
                                 partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The group's committed offset per partition (None: every partition it committed; -1: none)."""
        connection = await self.group_coordinator(group_id)
        answer = await connection.request(group_api("OFFSET_FETCH"), extra_wait_s=0.0, **fetch_values(
            group_id, None if partitions is None else list(partitions)))
        return fetched_offsets(answer, group_id)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaResponseError | None]:
        """Delete empty groups at their coordinators; per group id, None or the error it answered
        (NON_EMPTY_GROUP while members remain)."""
        results: dict[str, KafkaResponseError | None] = {}
        for group_id in group_ids:
            connection = await self.group_coordinator(group_id)
            answer = await connection.request(group_api("DELETE_GROUPS"), groups_names=(group_id,))
            for result in schema.field(answer, "results", ()):
                code = int(result.error_code)
                results[str(result.group_id)] = None if code == ErrorCode.none else KafkaResponseError(
                    code, f"group {result.group_id}")
        return results

    # ------------------------------------------------------------------ transactions (§19.5.4)

    async def list_transactions(self, *, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """The transactional ids of every broker (each lists those it coordinates), by id; ``states``
        (Kafka's names) and ``producer_ids`` keep only those matching, when given."""
        await self.client.refresh_metadata()
        wanted_states, wanted_producers = tuple(states), tuple(producer_ids)
        found: dict[str, TransactionListing] = {}
        for node_id in sorted(self.client.metadata.brokers):
            connection = await self.client.node_connection(node_id)
            answer = await connection.request(group_api("LIST_TRANSACTIONS"), state_filters=wanted_states,
                                              producer_id_filters=wanted_producers)
            check(schema.field(answer, "error_code", 0), f"transactions of broker {node_id}")
            for listed in schema.field(answer, "transaction_states", ()):
                found[str(listed.transactional_id)] = TransactionListing(
                    str(listed.transactional_id), int(listed.producer_id), str(listed.transaction_state))
        return [found[name] for name in sorted(found)]

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each id's state at its coordinator; raises for an id's error (TRANSACTIONAL_ID_NOT_FOUND
        for an id the coordinator does not hold)."""
        described: dict[str, TransactionDescription] = {}
        for tid in transactional_ids:
            connection = await self._coordinator(tid, COORDINATOR_KEY_TYPE_TRANSACTION, "transactional id")
            answer = await connection.request(group_api("DESCRIBE_TRANSACTIONS"), transactional_ids=(tid,))
            for state in schema.field(answer, "transaction_states", ()):
                check(state.error_code, f"transactional id {state.transactional_id}")
                started = state.transaction_start_time
                start_ms = int(started.timestamp() * 1000) if started is not None else -1
                described[str(state.transactional_id)] = TransactionDescription(
                    str(state.transactional_id), str(state.transaction_state), int(state.producer_id),
                    int(state.producer_epoch), state.transaction_timeout // _ONE_MS,
                    start_ms if start_ms > 0 else -1,
                    tuple(TopicPartition(str(topic.topic), int(p)) for topic in state.topics for p in topic.partitions))
        return described


_ONE_MS = datetime.timedelta(milliseconds=1)


async def _consumer_group(connection: KafkaConnection, group_id: str) -> GroupDescription | None:
    """``group_id`` as ConsumerGroupDescribe shows it; None for no consumer group (GROUP_ID_NOT_FOUND)
    or where the broker does not serve the api."""
    try:
        answer = await connection.request(group_api("CONSUMER_GROUP_DESCRIBE"), group_ids=(group_id,),
                                          include_authorized_operations=False)
    except UnsupportedApi:
        return None
    group = next((g for g in schema.field(answer, "groups", ()) if str(g.group_id) == group_id), None)
    if group is None or int(group.error_code) == ErrorCode.group_id_not_found:
        return None
    check(group.error_code, f"group {group_id}", schema.field(group, "error_message"))
    return GroupDescription(group_id, str(group.group_state), PROTOCOL_TYPE, str(group.assignor_name), tuple(
        GroupMemberDescription(str(m.member_id), m.instance_id, str(m.client_id), str(m.client_host), Assignment(
            {str(t.topic_name): tuple(map(int, t.partitions)) for t in m.assignment.topic_partitions}))
        for m in group.members), int(group.group_epoch))


def _assignment(data: bytes) -> Assignment | None:
    try:
        return decode_assignment(data)[1]
    except KafkaCodecError:
        return None
