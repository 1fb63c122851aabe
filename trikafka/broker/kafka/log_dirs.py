"""DescribeLogDirs and AlterReplicaLogDirs (docs/protocol.md §16.4): a broker's one log directory.

Both read only the log manager's list of logs, in memory: a partition's size
is its byte range (segments are contiguous, §7.1), nothing is stat'ed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from ..seams import BrokerLog
from .entities import NO_THROTTLE, Reply

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from .acl.authorizer import Authorizer

# A current log's lag (Kafka: high watermark minus log end, at least 0) is never positive here: no
# replica's high watermark passes its own log end (§12.6); no log is a future one being moved.
CURRENT_LOG_LAG = 0


class LogDirsOwner(Protocol):
    """What the log-directory apis need of their broker: the ACL check and its logs (the engine's)."""

    authorizer: Authorizer

    @property
    def engine(self) -> Engine: ...


def _own_dir(service: LogDirsOwner) -> str:
    return os.path.abspath(service.engine.directory.log_manager.log_dir)


def _held(service: LogDirsOwner) -> dict[str, dict[int, BrokerLog]]:
    """Topic -> partition -> log, of every log this broker holds."""
    held: dict[str, dict[int, BrokerLog]] = defaultdict(dict)
    for log in service.engine.directory.log_manager.logs():
        held[log.topic][log.partition] = log
    return held


async def describe_log_dirs(service: LogDirsOwner, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    if service.authorizer.denied(KafkaApi.DESCRIBE_LOG_DIRS) is not None:
        return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                              results=())
    held = _held(service)
    asked: Iterable[tuple[str, tuple[int, ...] | None]] = (
        ((t, None) for t in sorted(held)) if body.topics is None else ((t.topic, t.partitions) for t in body.topics))
    topics = []
    for name, partitions in asked:
        logs = held.get(name, {})
        indexes = sorted(logs) if partitions is None else [p for p in partitions if p in logs]
        if indexes:
            topics.append(reply.nested("DescribeLogDirsTopic", name=name, partitions=tuple(
                reply.nested("DescribeLogDirsPartition", partition_index=p,
                             partition_size=logs[p].end_offset - logs[p].start_offset,
                             offset_lag=CURRENT_LOG_LAG, is_future_key=False)
                for p in indexes)))
    result = reply.nested("DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=_own_dir(service),
                          topics=tuple(topics))
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))


async def alter_replica_log_dirs(service: LogDirsOwner, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    denied = service.authorizer.denied(KafkaApi.ALTER_REPLICA_LOG_DIRS)
    own, held = _own_dir(service), _held(service)
    answers: dict[str, list[Any]] = defaultdict(list)
    for wanted in body.dirs:
        elsewhere = os.path.normpath(wanted.path) != own
        for topic in wanted.topics:
            for p in topic.partitions:
                error = (denied if denied is not None else ErrorCode.log_dir_not_found if elsewhere
                         else ErrorCode.none if p in held.get(topic.name, {})
                         else ErrorCode.unknown_topic_or_partition)
                answers[topic.name].append(reply.nested("AlterReplicaLogDirPartitionResult", partition_index=p,
                                                        error_code=error))
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(
        reply.nested("AlterReplicaLogDirTopicResult", topic_name=name, partitions=tuple(parts))
        for name, parts in answers.items()))
