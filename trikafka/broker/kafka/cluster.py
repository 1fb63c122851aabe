"""ApiVersions, Metadata, DescribeTopicPartitions and DescribeCluster (docs/protocol.md §16.3, §16.4, §16.5).

All four are answered from memory: the api table, the brokers that serve the
Kafka protocol, and the topics this broker knows.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from trikafka.kafka.apis import KafkaApi, api_versions_entries
from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import INTERNAL_TOPICS
from trikafka.kafka.topic_ids import NO_TOPIC_ID, names_by_id, topic_id

from .acl.table import AUTO_CREATE
from .entities import NO_THROTTLE, Reply
from ..engine.errors import EngineError
from .needs import ClusterApis
from .errors import kafka_error

# Kafka's "authorized operations not asked for" value.
OPERATIONS_NOT_ASKED = -2147483648
# DescribeCluster v1's endpoint type of brokers (2 is KRaft controllers').
BROKER_ENDPOINTS = 1


def new_cluster_id() -> str:
    """22 characters of URL-safe base64: 16 random bytes, as Kafka's cluster ids (§16.7)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def api_versions(service: ClusterApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    return reply.response(error_code=ErrorCode.none, api_keys=api_versions_entries(request.api_version),
                          throttle_time=NO_THROTTLE)


async def metadata(service: ClusterApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    asked = body.topics
    authorizer = service.authorizer
    unknown_ids: list[uuid.UUID] = []
    if asked is None or (request.api_version == 0 and not asked):
        # A listing of all topics leaves out those the principal may not describe (§18.3).
        names = [n for n in service.topic_names() if authorizer.denied(KafkaApi.METADATA, n) is None]
        auto_create = False
    else:
        names = [t.name for t in asked if t.name is not None]
        auto_create = getattr(body, "allow_auto_topic_creation", True)
        by_id = [t.topic_id for t in asked if t.name is None and t.topic_id not in (None, NO_TOPIC_ID)]
        if by_id:  # v12 names topics by id (§17.9): each id's topic, UNKNOWN_TOPIC_ID for none
            known = names_by_id(service.topic_names())
            unknown_ids = [i for i in by_id if i not in known]
            names += [known[i] for i in by_id if i in known]
    denied = {n: code for n in names if (code := authorizer.denied(KafkaApi.METADATA, n)) is not None}
    unknown = [n for n in names if n not in denied and service.topic_format(n) is None]
    creatable = [n for n in unknown if authorizer.allows(AUTO_CREATE, n)]
    created = await service.topics.auto_create(creatable) if auto_create and creatable else {}
    topics = tuple(_topic(service, reply, name, created.get(name), denied.get(name)) for name in names)
    topics += tuple(reply.nested("MetadataResponseTopic", error_code=ErrorCode.unknown_topic_id, name=None,
                                 topic_id=i, is_internal=False, partitions=(),
                                 topic_authorized_operations=OPERATIONS_NOT_ASKED)
                    for i in unknown_ids)
    brokers = tuple(reply.nested("MetadataResponseBroker", node_id=b.broker_id, host=b.host, port=b.port, rack=None)
                    for b in service.kafka_brokers())
    return reply.response(throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=service.cluster_id,
                          controller_id=service.controller_id(), topics=topics,
                          cluster_authorized_operations=OPERATIONS_NOT_ASKED)


def _topic(service: ClusterApis, reply: Reply, name: str, auto_created: ErrorCode | None,
           denied: ErrorCode | None) -> Any:
    """One topic's Metadata; ``auto_created``: the outcome of its auto-creation by this request, if tried."""
    def topic(error: ErrorCode, partitions: tuple[Any, ...] = ()) -> Any:
        return reply.nested("MetadataResponseTopic", error_code=error, name=name,
                            topic_id=topic_id(name) if error == ErrorCode.none else NO_TOPIC_ID,
                            is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                            topic_authorized_operations=OPERATIONS_NOT_ASKED)

    if denied is not None:
        return topic(denied)
    if auto_created == ErrorCode.none:
        return topic(ErrorCode.leader_not_available)  # §16.5: the client asks again
    if auto_created == ErrorCode.invalid_topic_exception:
        return topic(auto_created)  # §16.5: no topic may have the name, as Kafka's auto-creation answers
    if service.topic_format(name) is None:
        return topic(ErrorCode.unknown_topic_or_partition)
    described = service.engine.admin.topic_metadata(name, service.broker_id)
    if described.error != EngineError.NO_ERROR:
        return topic(kafka_error(described.error))
    partitions = tuple(
        reply.nested("MetadataResponsePartition", error_code=kafka_error(p.error),
                     partition_index=p.partition, leader_id=p.leader, leader_epoch=p.leader_epoch,
                     replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=())
        for p in described.partitions)
    return topic(ErrorCode.none, partitions)


def describe_topic_partitions(service: ClusterApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    authorizer = service.authorizer
    if body.topics:
        names = sorted({t.name for t in body.topics})
    else:  # every topic, as a Metadata listing: those the principal may not describe left out (§18.3)
        names = [n for n in service.topic_names() if authorizer.denied(KafkaApi.DESCRIBE_TOPIC_PARTITIONS, n) is None]
    cursor = body.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    live = {b.broker_id for b in service.kafka_brokers()}
    left = max(int(body.response_partition_limit), 1)
    topics, next_cursor = [], None

    def topic(name: str, error: ErrorCode, partitions: tuple[Any, ...] = ()) -> Any:
        return reply.nested("DescribeTopicPartitionsResponseTopic", error_code=error, name=name,
                            topic_id=topic_id(name) if error == ErrorCode.none else NO_TOPIC_ID,
                            is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                            topic_authorized_operations=OPERATIONS_NOT_ASKED)

    for name in names:
        if left == 0:  # the limit was reached at the end of the topic before: this one is next
            next_cursor = reply.nested("Cursor", topic_name=name, partition_index=0)
            break
        if (denied := authorizer.denied(KafkaApi.DESCRIBE_TOPIC_PARTITIONS, name)) is not None:
            topics.append(topic(name, denied))
            continue
        if service.topic_format(name) is None:
            topics.append(topic(name, ErrorCode.unknown_topic_or_partition))
            continue
        described = service.engine.admin.topic_metadata(name, service.broker_id)
        if described.error != EngineError.NO_ERROR:
            topics.append(topic(name, kafka_error(described.error)))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        views = [p for p in described.partitions if p.partition >= first]
        if len(views) > left:
            next_cursor = reply.nested("Cursor", topic_name=name, partition_index=views[left].partition)
            views = views[:left]
        left -= len(views)
        topics.append(topic(name, ErrorCode.none, tuple(
            reply.nested("DescribeTopicPartitionsResponsePartition", error_code=kafka_error(p.error),
                         partition_index=p.partition, leader_id=p.leader, leader_epoch=p.leader_epoch,
                         replica_nodes=p.replicas, isr_nodes=p.isr, eligible_leader_replicas=(),
                         last_known_elr=(), offline_replicas=tuple(r for r in p.replicas if r not in live))
            for p in views)))
        if next_cursor is not None:
            break
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(topics), next_cursor=next_cursor)


def describe_cluster(service: ClusterApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    # v1's endpoint type (v0 has none: brokers); every listener here is a broker's (§16.4).
    wanted = getattr(body, "endpoint_type", BROKER_ENDPOINTS)
    error = service.authorizer.denied(KafkaApi.DESCRIBE_CLUSTER)
    if error is None and wanted != BROKER_ENDPOINTS:
        error = ErrorCode.mismatched_endpoint_type
    if error is not None:
        return reply.response(throttle_time=NO_THROTTLE, error_code=error, error_message=None, cluster_id="",
                              controller_id=-1, brokers=(), cluster_authorized_operations=OPERATIONS_NOT_ASKED,
                              endpoint_type=i8(BROKER_ENDPOINTS))
    brokers = tuple(reply.nested("DescribeClusterBroker", broker_id=b.broker_id, host=b.host, port=b.port, rack=None)
                    for b in service.kafka_brokers())
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                          cluster_id=service.cluster_id, controller_id=service.controller_id(), brokers=brokers,
                          cluster_authorized_operations=OPERATIONS_NOT_ASKED,
                          endpoint_type=i8(BROKER_ENDPOINTS))
