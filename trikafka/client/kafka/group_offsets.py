"""OffsetCommit and OffsetFetch bodies and answers of a group, sans I/O (docs/protocol.md §17.8).

One place for both the group consumer (its commits and starting offsets) and
the admin calls (a group's committed offsets).  Values go through
``schema.build``, so one set of values serves every version: OffsetFetch v8+
names groups, older versions one group at the top level.
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple

from kio.schema.errors import ErrorCode

from . import schema
from .errors import KafkaResponseError

NO_OFFSET = -1  # OffsetFetch's committed offset of a partition the group never committed


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


class ConsumerGroupMetadata(NamedTuple):
    """Who commits a group's offsets: what TxnOffsetCommit v3 checks as OffsetCommit does (§17.5, §19.8).

    ``generation_id`` -1 and ``member_id`` "" commit from outside the group.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition ids grouped by topic, each list sorted."""
    grouped: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def commit_values(group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                  offsets: Mapping[TopicPartition, int]) -> dict[str, object]:
    """OffsetCommit's (and TxnOffsetCommit's) values: the next offset to consume per partition (generation -1 and member
    "": a commit from outside the group, as the admin tools make)."""
    topics: dict[str, list[dict[str, object]]] = {}
    for tp, offset in sorted(offsets.items()):
        topics.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": offset, "committed_leader_epoch": -1,
            "commit_timestamp": -1, "committed_metadata": ""})
    return {"group_id": group_id, "generation_id_or_member_epoch": generation_id, "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def commit_errors(answer: object) -> dict[TopicPartition, ErrorCode]:
    """The partitions an OffsetCommit answer refused, with their error codes."""
    errors: dict[TopicPartition, ErrorCode] = {}
    for topic in schema.field(answer, "topics", ()):
        for part in topic.partitions:
            if int(part.error_code) != ErrorCode.none:
                errors[TopicPartition(str(topic.name), int(part.partition_index))] = ErrorCode(int(part.error_code))
    return errors


def fetch_values(group_id: str, partitions: Iterable[TopicPartition] | None) -> dict[str, object]:
    """OffsetFetch's values for ``partitions`` (None: every partition the group committed)."""
    topics = None if partitions is None else [
        {"name": name, "partition_indexes": ids} for name, ids in by_topic(partitions).items()]
    return {"group_id": group_id, "topics": topics, "require_stable": True,
            "groups": [{"group_id": group_id, "topics": topics}]}


def fetched_offsets(answer: object, group_id: str) -> dict[TopicPartition, int]:
    """The committed offset per partition of an OffsetFetch answer (``NO_OFFSET``: none).

    Raises ``KafkaResponseError`` for the group's error code or a partition's.
    """
    groups = schema.field(answer, "groups")
    found = next((g for g in groups if str(g.group_id) == group_id), None) if groups else answer
    if found is None:
        raise KafkaResponseError(ErrorCode.unknown_server_error, f"group {group_id}", "not in the OffsetFetch answer")
    code = int(schema.field(found, "error_code", 0))
    if code != ErrorCode.none:
        raise KafkaResponseError(code, f"offsets of group {group_id}")
    offsets: dict[TopicPartition, int] = {}
    for topic in schema.field(found, "topics", ()):
        for part in topic.partitions:
            tp = TopicPartition(str(topic.name), int(part.partition_index))
            if int(part.error_code) != ErrorCode.none:
                raise KafkaResponseError(int(part.error_code),
                                         f"offset of group {group_id} for {tp.topic}-{tp.partition}")
            offsets[tp] = int(part.committed_offset)
    return offsets
