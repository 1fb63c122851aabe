"""DescribeLogDirs and AlterReplicaLogDirs (docs/protocol.md §16.4): a broker's one log directory.

Both read only the log manager's list of logs, in memory: a partition's size
is its byte range (segments are contiguous, §7.1), nothing is stat'ed; DescribeLogDirs
v4 asks the directory's file system its sizes (``statvfs``, in a worker thread).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from ..seams import BrokerLog, RunBlocking
from .entities import NO_THROTTLE, Reply

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from .acl.authorizer import Authorizer

# A current log's lag (Kafka: high watermark minus log end, at least 0) is never positive here: no
# replica's high watermark passes its own log end (§12.6); no log is a future one being moved.
CURRENT_LOG_LAG = 0


# DescribeLogDirs v4's sizes when the file system cannot tell them (Kafka's "no value").
UNKNOWN_BYTES = -1
STATVFS_FROM_VERSION = 4


class LogDirsOwner(Protocol):
    """What the log-directory apis need of their broker: the ACL check, its logs (the engine's), a
    worker thread for the file system's sizes."""

    authorizer: Authorizer

    @property
    def engine(self) -> Engine: ...

    @property
    def run_blocking(self) -> RunBlocking: ...


def volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system ``path`` is on (Java's ``getTotalSpace`` and
    ``getUsableSpace``); both UNKNOWN_BYTES when it cannot be read. Blocking: run it in a thread."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return UNKNOWN_BYTES, UNKNOWN_BYTES
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


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
    if (denied := service.authorizer.denied(KafkaApi.DESCRIBE_LOG_DIRS)) is not None:
        return reply.response(throttle_time=NO_THROTTLE, error_code=denied, results=())
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
    own = _own_dir(service)
    total_bytes, usable_bytes = UNKNOWN_BYTES, UNKNOWN_BYTES
    if request.api_version >= STATVFS_FROM_VERSION:
        total_bytes, usable_bytes = await service.run_blocking(volume_bytes, own)
    result = reply.nested("DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=own, topics=tuple(topics),
                          total_bytes=total_bytes, usable_bytes=usable_bytes)
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
