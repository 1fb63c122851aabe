"""FindCoordinator, OffsetCommit and OffsetFetch (docs/protocol.md §17.3, §17.5)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import OffsetKey, OffsetValue, RecordKey, RecordValue

from trikafka.kafka.apis import KafkaApi

from ..acl.model import ResourceType
from ..needs import GroupApis
from ..entities import NO_THROTTLE, Reply
from .access import group_partition, topic_denied

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes (§17.5)
NO_OFFSET = -1
NO_LEADER_EPOCH = -1
NO_MEMBER_EPOCH = -1  # OffsetFetch v9: no member named (§17.9)
NO_METADATA = ""
FIRST_GROUP_LEVEL_ERROR_VERSION = 2  # OffsetFetch: v1 answers a group's error in each partition


async def find_coordinator(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
    keys = list(body.coordinator_keys) if request.api_version >= 4 else [body.key]
    found = [await _coordinator(service, request.api, key, key_type) for key in keys]
    if request.api_version >= 4:
        return reply.response(throttle_time=NO_THROTTLE, coordinators=tuple(
            reply.nested("Coordinator", key=key, node_id=node, host=host, port=port, error_code=error,
                         error_message=message)
            for key, (error, message, node, host, port) in zip(keys, found)))
    error, message, node, host, port = found[0]
    return reply.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message, node_id=node,
                          host=host, port=port)


async def _coordinator(service: GroupApis, api: KafkaApi, key: str,
                       key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of ``key`` (§17.3, §18.3)."""
    resource = ResourceType.GROUP if key_type == KEY_TYPE_GROUP else ResourceType.TRANSACTIONAL_ID
    if (denied := service.authorizer.denied(api, key, resource)) is not None:
        return denied, f"{api.label} of {key!r} is not authorized", -1, "", -1
    if key_type == KEY_TYPE_GROUP:
        address = await service.groups.coordinator_of(key)
    elif key_type == KEY_TYPE_TRANSACTION and service.transactions is not None:
        address = await service.transactions.coordinator_of(key)
    else:
        return ErrorCode.invalid_request, f"key type {key_type} is not served", -1, "", -1
    if isinstance(address, ErrorCode):
        return address, None, -1, "", -1
    return ErrorCode.none, None, address.broker_id, address.host, address.port


async def offset_commit(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    asked = [(t.name, p) for t in body.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    groups = await group_partition(service, request.api, body.group_id)
    if isinstance(groups, ErrorCode):
        errors = {(name, p.partition_index): groups for name, p in asked}
        return _commit_answer(reply, body, errors)
    group = groups.group_or_new(body.group_id)
    refused = group.check_commit(body.member_id, body.generation_id_or_member_epoch,
                                 getattr(body, "group_instance_id", None), service.groups.membership.now_ms(),
                                 request.api_version)
    records: list[tuple[RecordKey, RecordValue | None]] = []
    for name, part in asked:
        errors[(name, part.partition_index)] = commit_record(service, request.api, body.group_id, name, part,
                                                             refused, records)
    if records:
        group.offsets.pending += 1
        try:
            written = await service.groups.write(groups, records)
        finally:
            group.offsets.pending -= 1
            groups.forget_if_empty(body.group_id)
        if written != ErrorCode.none:
            for key in errors:
                if errors[key] == ErrorCode.none:
                    errors[key] = written
    return _commit_answer(reply, body, errors)


def commit_record(service: GroupApis, api: KafkaApi, group_id: str, topic: str, part: Any, refused: ErrorCode,
                  records: list[tuple[RecordKey, RecordValue | None]]) -> ErrorCode:
    """One partition of an OffsetCommit or TxnOffsetCommit (``part``, Any: its request entity at the
    request's version): its error, and when NONE its record appended to ``records`` (§17.5).
    ``refused``: the group's answer to the member's commit, NONE when it may write."""
    count = service.partition_count(topic)
    if (denied := topic_denied(service, api, topic)) is not None:
        return denied
    if refused != ErrorCode.none:
        return refused
    if count is None or not 0 <= part.partition_index < count:
        return ErrorCode.unknown_topic_or_partition
    if part.committed_metadata is not None and len(part.committed_metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
        return ErrorCode.offset_metadata_too_large
    records.append((OffsetKey(group_id, topic, part.partition_index),
                    OffsetValue(part.committed_offset, getattr(part, "committed_leader_epoch", NO_LEADER_EPOCH),
                                part.committed_metadata or NO_METADATA, service.clock_ms())))
    return ErrorCode.none


def _commit_answer(reply: Reply, body: Any, errors: dict[tuple[str, int], ErrorCode]) -> Any:
    topics = tuple(reply.nested("OffsetCommitResponseTopic", name=t.name, partitions=tuple(
        reply.nested("OffsetCommitResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(t.name, p.partition_index)])
        for p in t.partitions)) for t in body.topics)
    return reply.response(throttle_time=NO_THROTTLE, topics=topics)


async def offset_fetch(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    require_stable = getattr(body, "require_stable", False)
    if request.api_version >= 8:
        answers = [await _fetch_group(service, reply, request, g.group_id, g.topics, require_stable,
                                      getattr(g, "member_id", None), getattr(g, "member_epoch", NO_MEMBER_EPOCH))
                   for g in body.groups]
        return reply.response(throttle_time=NO_THROTTLE, groups=tuple(
            reply.nested("OffsetFetchResponseGroup", group_id=g.group_id, topics=topics, error_code=error)
            for g, (topics, error) in zip(body.groups, answers)))
    topics, error = await _fetch_group(service, reply, request, body.group_id, body.topics,
                                       require_stable)
    return reply.response(throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def _fetch_group(service: GroupApis, reply: Reply, request: Request, group_id: str, asked: Any,
                       require_stable: bool, member_id: str | None = None,
                       member_epoch: int = NO_MEMBER_EPOCH) -> tuple[tuple[Any, ...], ErrorCode]:
    """One group's answer: its topics and its group-level error (§17.5).  ``asked`` (Any: this
    version's request entities) None means every partition the group has an offset for, of the
    topics the principal may describe (§18.3).  v9's member of a consumer group (an epoch not -1)
    is checked as a commit's (§17.9)."""
    version = request.api_version
    topic_class, partition_class = _FETCH_CLASSES[version >= 8]
    groups = await group_partition(service, request.api, group_id)
    group = None if isinstance(groups, ErrorCode) else groups.group(group_id)
    error = groups if isinstance(groups, ErrorCode) else ErrorCode.none
    if member_epoch != NO_MEMBER_EPOCH and group is not None and group.consumer is not None and group.is_consumer:
        error = group.consumer.check_commit(member_id or "", member_epoch)
        if error != ErrorCode.none:
            return (), error
    if asked is None:
        wanted: dict[str, list[int]] = {}
        for topic, index in sorted(group.offsets if group is not None else ()):
            if topic_denied(service, request.api, topic) is None:
                wanted.setdefault(topic, []).append(index)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in asked}
    if require_stable and group is not None and group.offsets.pending > 0:
        partition_error = ErrorCode.unstable_offset_commit
    elif version < FIRST_GROUP_LEVEL_ERROR_VERSION:
        partition_error = error
    else:
        partition_error = ErrorCode.none

    def partition(topic: str, index: int) -> Any:
        committed = group.offsets.get((topic, index)) if group is not None else None
        # An offset of an open transaction (§19.5.4) makes its partition unstable until the marker.
        unstable = require_stable and not isinstance(groups, ErrorCode) \
            and groups.txn_offsets.unstable(group_id, (topic, index))
        error_code = topic_denied(service, request.api, topic) or (
            ErrorCode.unstable_offset_commit if unstable else partition_error)
        if committed is None or error_code != ErrorCode.none:
            return reply.nested(partition_class, partition_index=index, committed_offset=NO_OFFSET,
                                committed_leader_epoch=NO_LEADER_EPOCH, metadata=NO_METADATA,
                                error_code=error_code)
        value = committed.value
        return reply.nested(partition_class, partition_index=index, committed_offset=value.offset,
                            committed_leader_epoch=value.leader_epoch, metadata=value.metadata,
                            error_code=ErrorCode.none)

    topics = tuple(reply.nested(topic_class, name=name, partitions=tuple(partition(name, i) for i in indexes))
                   for name, indexes in wanted.items())
    return topics, error


# OffsetFetch's nested classes: v8 (batched groups) names them in the plural.
_FETCH_CLASSES = {False: ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"),
                  True: ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions")}
