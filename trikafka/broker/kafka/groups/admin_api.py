"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (docs/protocol.md §17.5, §17.6)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import ConsumerKey, ConsumerRecord, GroupKey, OffsetKey, RecordKey, RecordValue

from trikafka.kafka.apis import KafkaApi

from ..needs import GroupApis
from ..entities import NO_THROTTLE, Reply
from .access import group_denied, group_partition, lists_every_group, topic_denied
from .group import CONSUMER_GROUP_TYPE, Group, GroupState

OPERATIONS_NOT_ASKED = -2147483648  # Kafka's "authorized operations not asked for"
# States whose members' metadata and assignment DescribeGroups shows (Kafka shows them only then).
_DESCRIBED_WITH_ASSIGNMENTS = (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)


def list_groups(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    wanted = {state.lower() for state in getattr(body, "states_filter", ()) or ()}
    types = {kind.lower() for kind in getattr(body, "types_filter", ()) or ()}
    every = lists_every_group(service, request.api)
    listed = [group for groups in service.groups.loaded() for group in groups.groups.values()
              if group.state is not GroupState.DEAD and (not wanted or group.listed_state.lower() in wanted)
              and (not types or group.group_type in types)
              and (every or group_denied(service, request.api, group.group_id) is None)]
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(
        reply.nested("ListedGroup", group_id=group.group_id, protocol_type=_protocol_type(group),
                     group_state=group.listed_state, group_type=group.group_type)
        for group in sorted(listed, key=lambda g: g.group_id)))


def _protocol_type(group: Group) -> str:
    return CONSUMER_GROUP_TYPE if group.group_type == CONSUMER_GROUP_TYPE else group.protocol_type or ""


async def describe_groups(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    described = []
    for group_id in body.groups:
        groups = await group_partition(service, request.api, group_id)
        if isinstance(groups, ErrorCode):
            described.append(_described(reply, group_id, groups, None))
        else:
            group = groups.group(group_id)  # a consumer group is not one DescribeGroups describes (§17.9)
            described.append(_described(reply, group_id, ErrorCode.none,
                                        None if group is None or group.group_type == CONSUMER_GROUP_TYPE else group))
    return reply.response(throttle_time=NO_THROTTLE, groups=tuple(described))


def _described(reply: Reply, group_id: str, error: ErrorCode, group: Group | None) -> Any:
    if group is None:
        return reply.nested("DescribedGroup", error_code=error, group_id=group_id, group_state=GroupState.DEAD.value,
                            protocol_type="", protocol_data="", members=(),
                            authorized_operations=OPERATIONS_NOT_ASKED)
    full = group.state in _DESCRIBED_WITH_ASSIGNMENTS
    members = tuple(reply.nested("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                                 client_id=m.client_id, client_host=m.client_host,
                                 member_metadata=m.metadata_for(group.protocol) if full else b"",
                                 member_assignment=m.assignment if full else b"")
                    for m in group.members.values())
    return reply.nested("DescribedGroup", error_code=error, group_id=group_id, group_state=group.state.value,
                        protocol_type=group.protocol_type or "", protocol_data=(group.protocol or "") if full else "",
                        members=members, authorized_operations=OPERATIONS_NOT_ASKED)


async def delete_groups(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    results = []
    for group_id in body.groups_names:
        results.append(reply.nested("DeletableGroupResult", group_id=group_id,
                                    error_code=await _delete_group(service, request.api, group_id)))
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(results))


async def _delete_group(service: GroupApis, api: KafkaApi, group_id: str) -> ErrorCode:
    groups = await group_partition(service, api, group_id)
    if isinstance(groups, ErrorCode):
        return groups
    group = groups.group(group_id)
    if group is None or group.state is GroupState.DEAD:
        return ErrorCode.group_id_not_found
    if group.members or group.state is not GroupState.EMPTY or group.is_consumer:
        return ErrorCode.non_empty_group
    records: list[tuple[RecordKey, RecordValue | None]] = [
        (OffsetKey(group_id, topic, partition), None) for topic, partition in group.offsets]
    records.append((GroupKey(group_id), None))
    if group.consumer is not None:  # an Empty consumer group's own records, in Kafka 4's order (§17.9)
        records += [(ConsumerKey(kind, group_id), None) for kind in (
            ConsumerRecord.TARGET_METADATA, ConsumerRecord.PARTITION_METADATA, ConsumerRecord.GROUP_METADATA)]
    error = await service.groups.write(groups, records)
    if error == ErrorCode.none:
        group.consumer = None
        group.delete()
        groups.forget_if_empty(group_id)
    return error


async def offset_delete(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    errors = {key: ErrorCode.none for key in asked}
    error = ErrorCode.none
    groups = await group_partition(service, request.api, body.group_id)
    group = None if isinstance(groups, ErrorCode) else groups.group(body.group_id)
    if isinstance(groups, ErrorCode):
        error = groups
    elif group is None or group.state is GroupState.DEAD:
        error = ErrorCode.group_id_not_found
    else:
        subscribed = group.subscribed_topics() if group.members or group.is_consumer else set()
        if subscribed is None:
            error = ErrorCode.non_empty_group  # members of a protocol whose subscriptions the broker cannot read
        else:
            for topic, partition in asked:
                if (denied := topic_denied(service, request.api, topic)) is not None:
                    errors[(topic, partition)] = denied
                elif topic in subscribed:
                    errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
            records: list[tuple[RecordKey, RecordValue | None]] = [
                (OffsetKey(body.group_id, topic, partition), None) for topic, partition in asked
                if errors[(topic, partition)] == ErrorCode.none and group.offsets.get((topic, partition)) is not None]
            if records:
                written = await service.groups.write(groups, records)
                if written != ErrorCode.none:
                    error = written
    topics = tuple(reply.nested("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
        reply.nested("OffsetDeleteResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(t.name, p.partition_index)]) for p in t.partitions)) for t in body.topics)
    return reply.response(throttle_time=NO_THROTTLE, error_code=error, topics=topics if error == ErrorCode.none else ())
