"""Administration over the Apache Kafka protocol: topics, offsets, configs (docs/protocol.md §16.4).

``KafkaAdmin`` wraps a ``KafkaClient``: ``create_topics`` goes to the
controller, ``list_offsets`` to each partition's leader, ``describe_configs``
and ``metadata`` to any broker.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi

from . import schema
from .client import ClusterMetadata, KafkaClient
from .connection import KafkaConnection
from .errors import KafkaResponseError, check

# ListOffsets' special timestamps (§16.4).
LATEST = -1  # the high watermark: the offset the next record gets
EARLIEST = -2  # the log start offset
MAX_TIMESTAMP = -3  # the record with the largest timestamp (ListOffsets v7)
DEFAULT_ADMIN_TIMEOUT_S = 30.0
# DescribeConfigs' resource types and the config_source that means "the default".
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_DEFAULT_CONFIG_SOURCE = 5


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

    async def list_offsets(self, topic: str, partitions: Mapping[int, int]) -> dict[int, OffsetAt]:
        """For each partition, the offset at a timestamp: ``LATEST``, ``EARLIEST``, ``MAX_TIMESTAMP``
        or a time in ms (the first offset whose batch's max timestamp is at or after it; -1: none)."""
        found: dict[int, OffsetAt] = {}
        for partition, timestamp_ms in partitions.items():
            async def ask(connection: KafkaConnection, partition: int = partition,
                          timestamp_ms: int = timestamp_ms) -> OffsetAt:
                return await self._list_offset(connection, topic, partition, timestamp_ms)
            found[partition] = await self.client.call_leader(topic, partition, ask)
        return found

    async def _list_offset(self, connection: KafkaConnection, topic: str, partition: int,
                           timestamp_ms: int) -> OffsetAt:
        answer = await connection.request(
            KafkaApi.LIST_OFFSETS, replica_id=-1, isolation_level=0,
            topics=[{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp_ms,
                                                    "current_leader_epoch": -1}]}])
        for topic_answer in schema.field(answer, "topics", ()):
            for part in topic_answer.partitions:
                if int(part.partition_index) == partition:
                    check(part.error_code, f"list offsets of {topic}-{partition}")
                    return OffsetAt(int(part.offset), int(schema.field(part, "timestamp", -1)))
        raise KafkaResponseError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")

    async def describe_configs(self, name: str, *, resource_type: int = RESOURCE_TOPIC) -> dict[str, ConfigValue]:
        """Every setting of a topic (or, with ``RESOURCE_BROKER``, a broker id) with its value."""
        connection = await self.client.any_connection()
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
