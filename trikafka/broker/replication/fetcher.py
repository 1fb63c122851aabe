"""The follower's side of one replicated partition: truncate by epoch, then copy the leader.

``follow`` runs for one (partition, leader epoch): it walks the leader's epoch
ends (EPOCH_END_OFFSET) down to where the two logs agree, cuts its log there,
then fetches (REPLICA_FETCH) and appends the leader's bytes verbatim, recording
each new epoch before its first byte.  It returns when the leader fences it
or stops leading: replication starts it again on the next state read
from ZooKeeper.

The log and the leader are behind two small protocols so the loop is tested
in-process; ``StreamLeaderLink`` speaks the wire protocol over a Trio stream.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

import trio

from ...wire.errors import ErrorCode, RemoteProtocolError
from ...wire.framing import NEED_DATA, ResponseFrame, ResponseReader
from ...wire.replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, ReplicaFetchResult, decode_epoch_end_offset_response,
    decode_replica_fetch_response,
)
from ...wire.requests import encode_request
from .fetch_rules import Append, FollowerPartition, Nothing, TruncateFirst, WaitForState
from .truncation import AskLeader, TruncateTo, first_step, next_step

logger = logging.getLogger(__name__)

FETCH_MAX_BYTES = 1 << 20
FETCH_MAX_WAIT_MS = 500
RECEIVE_BYTES = 1 << 16


class ReplicaLog(Protocol):
    """What the follower needs from its local replica (the broker adapts its Log)."""

    @property
    def end_offset(self) -> int: ...
    @property
    def durable_end(self) -> int: ...
    @property
    def history(self): ...  # an EpochHistory (read-only here)
    @property
    def log_start_offset(self) -> int: ...  # a Kafka-format log's stored start; -1 for a 0.7 log

    async def assign_epoch(self, epoch: int, start_offset: int) -> None: ...  # fsynced
    async def truncate_to(self, offset: int) -> None: ...  # the log, then the epoch file
    async def append_verbatim(self, data: bytes) -> None: ...
    async def follow_log_start(self, offset: int) -> None: ...  # the leader's log start offset, stored (§12.4.1)


class LeaderLink(Protocol):
    """The two requests a follower sends its leader."""

    async def epoch_end_offset(self, epoch: int) -> tuple[ErrorCode, int, int]: ...
    async def replica_fetch(self, offset: int, durable_offset: int, max_bytes: int,
                            log_start_offset: int) -> ReplicaFetchResult: ...


class FollowerStopped(Exception):
    """The follower must wait for a new partition state (fenced, or the leader moved)."""

    def __init__(self, error: ErrorCode):
        super().__init__(error.name)
        self.error = error


async def truncate_by_epoch(log: ReplicaLog, link: LeaderLink) -> int:
    """Ask the leader until the logs agree, cut the local log there; the new end."""
    step = first_step(log.history, log.end_offset)
    while isinstance(step, AskLeader):
        error, epoch, end = await link.epoch_end_offset(step.epoch)
        if error != ErrorCode.NO_ERROR:
            raise FollowerStopped(error)
        step = next_step(log.history, log.end_offset, epoch, end)
    assert isinstance(step, TruncateTo)
    if step.offset < log.end_offset:
        logger.info("truncating to %d (was %d) by leader epoch", step.offset, log.end_offset)
    await log.truncate_to(min(step.offset, log.end_offset))
    return log.end_offset


async def follow(log: ReplicaLog, link: LeaderLink, state: FollowerPartition, *,
                 max_bytes: int = FETCH_MAX_BYTES, on_high_watermark: Callable[[int], None] | None = None) -> None:
    """Copy the leader until fenced; raises FollowerStopped with the reason.

    ``on_high_watermark`` hears each new HW learnt from the leader (consumers
    reading this replica wait on it), and the moment the follower caught up.
    """
    while True:
        if state.needs_truncation:
            await truncate_by_epoch(log, link)
            state.high_watermark = min(state.high_watermark, log.end_offset)
            state.needs_truncation = False
        offset = log.end_offset
        result = await link.replica_fetch(offset, log.durable_end, max_bytes, log.log_start_offset)
        before = (state.high_watermark, state.caught_up)
        action = state.on_response(result, offset)
        if isinstance(action, WaitForState):
            raise FollowerStopped(action.error)
        if isinstance(action, Append):
            if action.epoch > log.history.latest_epoch:
                await log.assign_epoch(action.epoch, action.offset)
            await log.append_verbatim(action.data)
        elif not isinstance(action, (TruncateFirst, Nothing)):
            raise AssertionError(action)
        if result.log_start_offset >= 0:  # a Kafka-format log's, moved by DeleteRecords or retention
            await log.follow_log_start(result.log_start_offset)
        # Caught up (§12.2): it holds all the leader held when elected (bytes of the leader's
        # epoch, or the leader's whole log: the answer's log_end) and the HW.
        holds_all = log.history.latest_epoch == state.leader_epoch or log.end_offset >= result.log_end
        state.caught_up = state.caught_up or (not isinstance(action, TruncateFirst) and holds_all
                                              and log.end_offset >= result.high_watermark)
        if on_high_watermark is not None and (state.high_watermark, state.caught_up) != before:
            on_high_watermark(state.high_watermark)


class StreamLeaderLink:
    """A ``LeaderLink`` over one connection to the leader (one request at a time)."""

    def __init__(self, stream: trio.abc.Stream, *, replica_id: int, leader_epoch: int, topic: str,
                 partition: int, max_wait_ms: int = FETCH_MAX_WAIT_MS, max_response_bytes: int = 2 * FETCH_MAX_BYTES):
        self._stream = stream
        self._reader = ResponseReader(max_response_bytes)
        self.replica_id, self.leader_epoch = replica_id, leader_epoch
        self.topic, self.partition, self.max_wait_ms = topic, partition, max_wait_ms

    async def _call(self, request) -> tuple[int, bytes]:
        await self._stream.send_all(encode_request(request))
        while (frame := self._reader.next_frame()) is NEED_DATA:
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise RemoteProtocolError("the leader closed the connection")
            self._reader.receive_data(data)
        assert isinstance(frame, ResponseFrame)  # the loop ends on a frame
        return int(frame.error_code), frame.payload

    async def epoch_end_offset(self, epoch: int) -> tuple[ErrorCode, int, int]:
        request = EpochEndOffsetRequest(self.replica_id, self.leader_epoch, self.topic, self.partition, epoch)
        return decode_epoch_end_offset_response(*await self._call(request))

    async def replica_fetch(self, offset: int, durable_offset: int, max_bytes: int,
                            log_start_offset: int) -> ReplicaFetchResult:
        request = ReplicaFetchRequest(self.replica_id, self.leader_epoch, self.max_wait_ms, self.topic,
                                      self.partition, offset, durable_offset, max_bytes, log_start_offset)
        return decode_replica_fetch_response(*await self._call(request))
