"""Both ends of REPLICA_FETCH as decisions without I/O (docs/protocol.md §12.4.1).

``serve_replica_fetch`` is the leader's: check fencing, record the follower's
ends, and say which bytes to send (cut at the next epoch boundary, so one
response never spans two epochs).  ``FollowerPartition`` is the follower's:
turn a response into the whole messages to append verbatim (and the epoch to
record first), its new high watermark, or what to do about an error.
The broker does the reads, the sends and the appends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...log.epochs import UNDEFINED_EPOCH, EpochHistory
from ...wire.errors import ErrorCode
from ...wire.messageset import scan_valid_prefix
from ...wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest, ReplicaFetchResult
from .isr import LeaderPartition


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    """What the leader sends: an error, or ``max_bytes`` from ``offset`` written in ``chunk_epoch``."""

    error: ErrorCode
    leader_epoch: int
    chunk_epoch: int = UNDEFINED_EPOCH
    offset: int = 0
    max_bytes: int = 0
    high_watermark: int = -1
    log_end: int = -1
    isr: tuple[int, ...] = ()


def serve_replica_fetch(request: ReplicaFetchRequest, *, leader: LeaderPartition | None, leader_epoch: int,
                        history: EpochHistory, log_end: int, now_ms: int, ack_fsync: bool) -> ReplicaFetchAnswer:
    """The leader's answer to one REPLICA_FETCH; records the follower's ends as a side effect.

    ``leader`` is None when this broker does not lead the partition (in ``leader_epoch``).
    """
    if leader is None:
        return ReplicaFetchAnswer(ErrorCode.NOT_LEADER_FOR_PARTITION, leader_epoch)
    if request.replica_id not in leader.replicas or request.replica_id == leader.leader_id:
        return ReplicaFetchAnswer(ErrorCode.NOT_REPLICA, leader_epoch)
    if request.leader_epoch < leader_epoch:
        return ReplicaFetchAnswer(ErrorCode.FENCED_LEADER_EPOCH, leader_epoch)
    if request.leader_epoch > leader_epoch:
        return ReplicaFetchAnswer(ErrorCode.UNKNOWN_LEADER_EPOCH, leader_epoch)
    offset = request.fetch_offset
    if not 0 <= offset <= log_end:
        return ReplicaFetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, leader_epoch, log_end=log_end)
    leader.on_follower_fetch(request.replica_id, offset, now_ms,
                             durable_offset=request.durable_offset if ack_fsync else None,
                             log_start_offset=request.log_start_offset)
    stop = log_end
    boundary = history.next_boundary(offset)
    if boundary is not None:
        stop = min(stop, boundary)
    max_bytes = max(0, min(request.max_bytes, stop - offset))
    return ReplicaFetchAnswer(ErrorCode.NO_ERROR, leader_epoch, history.epoch_at(offset), offset, max_bytes,
                              leader.high_watermark, log_end, leader.isr)


def serve_epoch_end_offset(request: EpochEndOffsetRequest, *, leader: LeaderPartition | None, leader_epoch: int,
                           history: EpochHistory, log_end: int) -> tuple[ErrorCode, int, int]:
    """The leader's answer to EPOCH_END_OFFSET: ``(error, epoch, end offset)`` (KIP-101)."""
    if leader is None:
        return ErrorCode.NOT_LEADER_FOR_PARTITION, UNDEFINED_EPOCH, -1
    if request.replica_id not in leader.replicas or request.replica_id == leader.leader_id:
        return ErrorCode.NOT_REPLICA, UNDEFINED_EPOCH, -1
    if request.leader_epoch != leader_epoch:
        error = ErrorCode.FENCED_LEADER_EPOCH if request.leader_epoch < leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
        return error, UNDEFINED_EPOCH, -1
    return (ErrorCode.NO_ERROR, *history.end_offset_for(request.requested_epoch, log_end))


@dataclass(frozen=True, slots=True)
class Append:
    """Append ``data`` verbatim at the log end; record ``(epoch, offset)`` first when new."""

    data: bytes
    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFirst:
    """The leader says our fetch offset is past its end: truncate by epoch again."""


@dataclass(frozen=True, slots=True)
class WaitForState:
    """Fenced or not the leader: wait for the next state from ZooKeeper, then retry."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class Nothing:
    """Nothing new; fetch again (the leader already held the request up to max_wait_ms)."""


FollowerAction = Append | TruncateFirst | WaitForState | Nothing


class FollowerPartition:
    """A follower's fetch state for one partition and one leader epoch."""

    def __init__(self, leader_id: int, leader_epoch: int, high_watermark: int = 0, *,
                 whole_prefix_bytes: Callable[[bytes], int] = scan_valid_prefix):
        """``whole_prefix_bytes``: the valid whole entries at the start of a chunk, in the log's
        record format (0.7 messages, or v2 batches for a Kafka-format log, §16.6)."""
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.high_watermark = high_watermark
        self.needs_truncation = True  # always truncate by epoch before the first fetch
        # Holds every byte committed so far: bytes of this epoch (so all the leader had when it
        # was elected) and the leader's HW (set by ``fetcher.follow``).
        self.caught_up = False
        self._whole_prefix_bytes = whole_prefix_bytes

    def on_response(self, result: ReplicaFetchResult, fetch_offset: int) -> FollowerAction:
        """What to do with the response to a fetch made at ``fetch_offset``."""
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.needs_truncation = True
            return TruncateFirst()
        if result.error != ErrorCode.NO_ERROR:
            return WaitForState(result.error)
        whole = self._whole_prefix_bytes(result.data)  # a chunk may end inside a message or batch
        # The HW we may show consumers: never past what we hold.
        self.high_watermark = max(self.high_watermark, min(result.high_watermark, fetch_offset + whole))
        if whole == 0:
            return Nothing()
        return Append(bytes(result.data[:whole]), result.chunk_epoch, fetch_offset)
