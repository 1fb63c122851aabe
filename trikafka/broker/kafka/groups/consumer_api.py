"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: Kafka 4's consumer groups (docs/protocol.md §17.9)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import INTERNAL_TOPICS
from trikafka.kafka.topic_ids import names_by_id, topic_id

from ..needs import ConsumerGroupApis
from ..entities import NO_THROTTLE, Reply
from .access import group_partition, topic_denied
from .assignors import Assignment, TopicsMetadata
from .consumer_group import JOIN_EPOCH, ConsumerGroup, Heartbeat, HeartbeatAnswer, from_topic_partitions, to_topic_partitions
from .membership_api import client_host

SERVER_NAMES_MEMBER_BEFORE = 1  # v0: an empty member id is given one by the coordinator (v1: KIP-1082)
NO_REBALANCE_TIMEOUT_MS = -1
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1's member_type: a consumer-protocol member


def broker_topics(service: ConsumerGroupApis) -> TopicsMetadata:
    """The broker's Kafka-format topics (internal ones left out) as the assignors take them:
    name -> (topic id, partition count)."""
    topics: dict[str, tuple[Any, int]] = {}
    for name in service.topic_names():
        if name in INTERNAL_TOPICS or service.topic_format(name) is None:
            continue
        count = service.engine.directory.partitions_if_valid(name)
        if count:
            topics[name] = (topic_id(name), count)
    return topics


async def consumer_group_heartbeat(service: ConsumerGroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    refused = HeartbeatAnswer(ErrorCode.none, body.member_id, body.member_epoch)
    groups = await group_partition(service, request.api, body.group_id)
    if isinstance(groups, ErrorCode):
        return _heartbeat_reply(reply, service, _with(refused, groups))
    for name in body.subscribed_topic_names or ():
        if (denied := topic_denied(service, request.api, name)) is not None:
            return _heartbeat_reply(reply, service, _with(refused, denied, f"topic {name!r} is not authorized"))
    if body.member_epoch == JOIN_EPOCH and (clash := await service.groups.clash(body.group_id)) is not None:
        return _heartbeat_reply(reply, service, _with(refused, ErrorCode.inconsistent_group_protocol, clash))
    group = groups.group_or_new(body.group_id)
    if group.is_classic:
        groups.forget_if_empty(body.group_id)
        return _heartbeat_reply(reply, service, _with(refused, ErrorCode.group_id_not_found,
                                                      f"Group {body.group_id} is not a consumer group."))
    consumer = group.consumer_or_new()
    membership = service.groups.membership
    rebalance_ms = int(body.rebalance_timeout.total_seconds() * 1000) if body.rebalance_timeout is not None \
        else NO_REBALANCE_TIMEOUT_MS
    owned = None if body.topic_partitions is None else from_topic_partitions(
        tuple((t.topic_id, tuple(t.partitions)) for t in body.topic_partitions))
    heartbeat = Heartbeat(body.member_id, body.member_epoch, body.instance_id, body.rack_id, rebalance_ms,
                          None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
                          getattr(body, "subscribed_topic_regex", None), body.server_assignor, owned,
                          request.client_id or "", client_host(),
                          request.api_version < SERVER_NAMES_MEMBER_BEFORE)
    answer = consumer.heartbeat(membership.now_ms(), heartbeat, broker_topics(service))
    error = await membership.store_consumer(groups, group)
    membership.poke()  # a new member's session may end before the timer task's next wake
    groups.forget_if_empty(body.group_id)
    if error != ErrorCode.none:
        answer = _with(answer, error)
    return _heartbeat_reply(reply, service, answer)


def _with(answer: HeartbeatAnswer, error: ErrorCode, message: str | None = None) -> HeartbeatAnswer:
    return HeartbeatAnswer(error, answer.member_id, answer.member_epoch, None, message)


def _heartbeat_reply(reply: Reply, service: ConsumerGroupApis, answer: HeartbeatAnswer) -> Any:
    assignment = None if answer.assignment is None else reply.nested("Assignment", topic_partitions=tuple(
        reply.nested("TopicPartitions", topic_id=topic, partitions=partitions)
        for topic, partitions in to_topic_partitions(answer.assignment)))
    interval_ms = service.config.group_consumer_heartbeat_interval_ms
    return reply.response(throttle_time=NO_THROTTLE, error_code=answer.error, error_message=answer.message,
                          member_id=answer.member_id or None, member_epoch=answer.member_epoch,
                          heartbeat_interval=datetime.timedelta(milliseconds=interval_ms), assignment=assignment)


async def consumer_group_describe(service: ConsumerGroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    names = names_by_id(service.topic_names())
    described = [await _describe(service, reply, request, group_id, names) for group_id in body.group_ids]
    return reply.response(throttle_time=NO_THROTTLE, groups=tuple(described))


async def _describe(service: ConsumerGroupApis, reply: Reply, request: Request, group_id: str,
                    names: dict[Any, str]) -> Any:
    groups = await group_partition(service, request.api, group_id)
    group = None if isinstance(groups, ErrorCode) else groups.group(group_id)
    consumer: ConsumerGroup | None = None if group is None or group.is_classic else group.consumer
    if consumer is None:
        error = groups if isinstance(groups, ErrorCode) else ErrorCode.group_id_not_found
        message = None if isinstance(groups, ErrorCode) else f"Group {group_id} is not a consumer group."
        return reply.nested("DescribedGroup", error_code=error, error_message=message, group_id=group_id,
                            group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=())

    def assignment(partitions: Assignment) -> Any:
        return reply.nested("Assignment", topic_partitions=tuple(
            reply.nested("TopicPartitions", topic_id=topic, topic_name=names.get(topic, ""), partitions=indexes)
            for topic, indexes in to_topic_partitions(partitions)))

    members = tuple(reply.nested(
        "Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
        subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assigned),
        target_assignment=assignment(consumer.target.get(m.member_id, {})), member_type=i8(CONSUMER_MEMBER_TYPE))
        for m in consumer.members.values())
    return reply.nested("DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
                        group_state=consumer.state, group_epoch=consumer.group_epoch,
                        assignment_epoch=consumer.assignment_epoch, assignor_name=consumer.assignor, members=members)
