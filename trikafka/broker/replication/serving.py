"""Client requests on replicated partitions (docs/protocol.md §12.6).

The request handler sends every request for a replicated topic here; the
answers follow §12.6: writes only at the leader (the 0.7 PRODUCE at a
follower closes the connection, PRODUCE_ACKED answers NOT_LEADER), acks -1
waits for the high watermark, and consumers on any replica read up to the
high watermark.  Unreplicated topics never reach this module.
"""

from __future__ import annotations

from typing import Any

from ...log.errors import OffsetOutOfRangeError
from ...wire import ACKS_FLUSHED
from ...wire.errors import ErrorCode
from ...wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest
from ...wire.requests import FetchPart, OffsetsRequest
from ...wire.responses import Chunk, ProduceAckedResult
from .hosted import HostedPartition, NotLeaderError
from .manager import ReplicaManager
from .unserved import not_a_replica


class AppendRefused(Exception):
    """This broker may not append the part (§12.6); ``error`` says why."""

    def __init__(self, error: ErrorCode, detail: str):
        super().__init__(detail)
        self.error = error


async def append(manager: ReplicaManager, topic: str, partition: int, messages: bytes,
                 acks: int) -> tuple[Any, HostedPartition]:
    """Append a message set at the leader; the log's AppendResult and the partition.

    Raises AppendRefused when this broker does not lead the partition, or (acks -1)
    when the ISR is below ``min.insync.replicas``; the log's MessageErrors for a bad set.
    """
    hosted = manager.hosted.get((topic, partition))
    if hosted is not None and acks == ACKS_FLUSHED:
        code = hosted.check_acks_all()
        if code != ErrorCode.NO_ERROR:
            raise AppendRefused(code, f"{topic}-{partition}: {code.name}")
    try:
        if hosted is None:
            raise NotLeaderError()
        return await hosted.append_as_leader(messages), hosted
    except NotLeaderError:
        raise AppendRefused(_no_replica_error(manager, topic, partition),
                            f"{topic}-{partition}, which this broker does not lead") from None


async def wait_committed(result: ProduceAckedResult, hosted: HostedPartition, deadline: float) -> ProduceAckedResult:
    """The acks -1 outcome of an appended part: unchanged once committed, else its error."""
    code = await hosted.wait_committed(result.next_offset, deadline)
    if code == ErrorCode.NO_ERROR:
        return result
    return ProduceAckedResult(result.topic, result.partition, code, -1, -1)


def _no_replica_error(manager: ReplicaManager, topic: str, partition: int) -> ErrorCode:
    state = manager.states.get((topic, partition))
    return ErrorCode.LEADER_NOT_AVAILABLE if state is None or state.leader < 0 else ErrorCode.NOT_LEADER_FOR_PARTITION


def fetch(manager: ReplicaManager, part: FetchPart) -> tuple[ErrorCode, Any]:
    """A consumer's FETCH part: served by any replica, up to the high watermark."""
    hosted = manager.hosted.get((part.topic, part.partition))
    if hosted is None:
        return ErrorCode.NOT_LEADER_FOR_PARTITION, None
    log, end = hosted.log, hosted.consumer_end()
    # Above the HW but within the log: committed elsewhere, committed here soon; past the log
    # end, only the acting leader knows the offset does not exist (docs/protocol.md §12.6).
    log_end = max(end, log.end_offset)
    if part.offset > log_end and hosted.leader is None:
        return ErrorCode.NOT_LEADER_FOR_PARTITION, None
    if not log.start_offset <= part.offset <= max(log_end, log.start_offset):
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    if part.max_bytes < 0:
        return ErrorCode.INVALID_FETCH_SIZE, None
    if part.offset >= end:
        return ErrorCode.NO_ERROR, None
    try:
        return ErrorCode.NO_ERROR, log.read(part.offset, part.max_bytes, end=end)
    except OffsetOutOfRangeError:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None


def offsets_target(manager: ReplicaManager, request: OffsetsRequest) -> tuple[Any, int] | None:
    """The replica's log OFFSETS reads and the end its answers stop at (None: no replica here)."""
    hosted = manager.hosted.get((request.topic, request.partition))
    if hosted is None:
        return None
    return hosted.log, hosted.consumer_end()


def clamp_offsets(found: list[int], end: int) -> list[int]:
    """OFFSETS answers of a replica, newest first, never past the committed ``end``."""
    return sorted({min(o, end) for o in found}, reverse=True)


async def replica_fetch(manager: ReplicaManager, request: ReplicaFetchRequest) -> list[Chunk]:
    hosted = manager.hosted.get((request.topic, request.partition))
    if hosted is None:
        return not_a_replica(request)
    return await hosted.replica_fetch(request)


def epoch_end_offset(manager: ReplicaManager, request: EpochEndOffsetRequest) -> list[Chunk]:
    hosted = manager.hosted.get((request.topic, request.partition))
    if hosted is None:
        return not_a_replica(request)
    return [hosted.epoch_end_offset(request)]
