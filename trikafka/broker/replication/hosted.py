"""One replicated partition this broker holds a replica of: its log, epoch file and role.

A ``HostedPartition`` is owned by ``Replication``, which feeds it every
state read from ZooKeeper (``apply_state``) and runs its follower task.  The
listeners ask it (through the engine) to append as leader, to wait for an acks -1 commit,
where consumers' reads end (the high watermark), and to answer REPLICA_FETCH
and EPOCH_END_OFFSET (docs/protocol.md §12).

Roles: *leader* of the current leader epoch (a ``LeaderPartition`` holds the
followers' ends, the HW and the ISR), *follower* (a ``FollowerPartition`` holds
the HW learnt from the leader), or *none* (offline partition, or a state this
broker must not act on).  Every blocking step (epoch-file fsyncs, truncation)
runs through ``run_blocking``; role changes and truncations of one partition
are serialised by its lock.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import trio

from ...log.epochs import UNDEFINED_EPOCH, EpochFile
from ...log.record_format import FORMAT_V2, record_format
from ...wire.errors import ErrorCode
from ...wire.replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, encode_epoch_end_offset_response, encode_replica_fetch_response,
)
from ...wire.responses import Chunk
from ...zk.replication_values import PartitionState, TopicConfig
from ...log.epochs import EpochHistory
from ..engine.errors import EngineError
from ..engine.partition import LocalPartition
from ..seams import KafkaAppend
from ..seams import AppendResult, BrokerLog, Flusher, RunBlocking
from ..engine.waiters import VisibleEndWaiters
from .fetch_rules import FollowerPartition, ReplicaFetchAnswer, serve_epoch_end_offset, serve_replica_fetch
from .fetcher import FollowerStopped
from .isr import LeaderPartition

logger = logging.getLogger(__name__)


class NotLeaderError(Exception):
    """This broker does not lead the partition (any more)."""


class HostedPartition:
    """This broker's replica of one replicated partition."""

    def __init__(self, topic: str, partition: int, broker_id: int, log: BrokerLog, epochs: EpochFile, *,
                 flusher: Flusher, waiters: VisibleEndWaiters, run_blocking: RunBlocking,
                 clock_ms: Callable[[], int]):
        self.topic, self.partition, self.broker_id = topic, partition, broker_id
        self.key = (topic, partition)  # the waiters' key: consumers and acks -1 wake on it
        self.end_key = (topic, partition, "log-end")  # followers' long polls wake on appends
        self.log = log
        self.local = LocalPartition(log, flusher)  # every append to the log goes through it
        self.epochs = epochs
        self._flusher, self._waiters = flusher, waiters
        self._run_blocking = run_blocking
        self._clock_ms = clock_ms
        self.state: PartitionState | None = None
        self.version = -1  # of the state znode last applied
        self.replicas: tuple[int, ...] = ()
        self.config = TopicConfig()
        self.leader: LeaderPartition | None = None
        self.follower: FollowerPartition | None = None
        self._known_hw = 0  # kept across roles: a new leader or follower starts from it
        # Set when this broker came back from a reboot without a clean stop: the first truncation
        # as a follower cuts at least to here, and the leader's bytes replace the rest.
        self.copy_again_from: int | None = None
        self.lock = trio.Lock()  # role changes, epoch-file writes and truncations
        log.add_visible_listener(self._on_visible)
        # Compaction stays below the HW: bytes above it may be truncated by epoch, and
        # every replica then cleans only committed, byte-identical segments (§12, §11).
        log.cleanable_end = lambda: self.high_watermark

    # ----------------------------------------------------------------- what others read

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else UNDEFINED_EPOCH

    @property
    def high_watermark(self) -> int:
        if self.leader is not None:
            return self.leader.high_watermark
        if self.follower is not None:
            return self.follower.high_watermark
        return self._known_hw

    def consumer_end(self) -> int:
        """Where consumers' reads end: committed (the HW), flushed or not, as far as this replica has it (§12.6)."""
        return min(self.log.end_offset, self.high_watermark)

    # ----------------------------------------------------------------- state changes

    async def apply_state(self, state: PartitionState, version: int, replicas: tuple[int, ...],
                          config: TopicConfig, *, may_lead: bool = True) -> str:
        """Act on a state read from ZooKeeper; the resulting role (``leader``/``follower``/``none``)."""
        async with self.lock:
            same_replicas = tuple(replicas) == self.replicas
            if (version <= self.version and self.state is not None and state.leader_epoch == self.leader_epoch
                    and same_replicas):
                return self.role  # an older read of what we already applied
            if self.state is not None and state.leader_epoch < self.state.leader_epoch:
                return self.role  # stale (a watch fired late)
            old = self.state
            self.state, self.version, self.replicas, self.config = state, version, tuple(replicas), config
            if state.leader == self.broker_id and not may_lead:
                # §12.7: a state from before this incarnation registered; the controller re-elects.
                self._stop_leading()
                self.follower = None
            elif state.leader == self.broker_id:
                if self.leader is not None and old is not None and old.leader_epoch == state.leader_epoch:
                    if not same_replicas and self.broker_id in self.replicas:
                        self.leader.update_replicas(self.replicas, self._clock_ms())
                    if self.broker_id in state.isr:
                        self.leader.apply_isr(state.isr)  # our own (or the controller's) ISR write
                    self._wake()
                    return "leader"
                await self._become_leader(state)
            elif state.leader >= 0 and self.broker_id in self.replicas:
                if (self.follower is None or self.follower.leader_epoch != state.leader_epoch
                        or self.follower.leader_id != state.leader):
                    self._stop_leading()
                    self.follower = FollowerPartition(
                        state.leader, state.leader_epoch, self.high_watermark,
                        whole_prefix_bytes=record_format(self.log.record_format).scan_valid_prefix)
            else:
                self._stop_leading()
                self.follower = None
            self._wake()
            return self.role

    async def retire(self) -> None:
        """Stop leading and following for good: the topic was deleted (§16.4).  Waiting acks -1
        appends and long polls wake and find no leader."""
        async with self.lock:
            self._stop_leading()
            self.follower = None
            self.state, self.replicas = None, ()
            self._wake()

    @property
    def role(self) -> str:
        return "leader" if self.leader is not None else "follower" if self.follower is not None else "none"

    async def _become_leader(self, state: PartitionState) -> None:
        hw = self.high_watermark
        self.follower = None
        self._stop_leading()
        latest = self.epochs.history.latest_epoch
        if latest >= state.leader_epoch:
            # §12.7: never resume leading an epoch our own file already holds (we restarted
            # or were paused); the controller will elect again with a new epoch.
            logger.warning("%s-%d: not leading epoch %d, which this replica's epoch file already holds",
                           self.topic, self.partition, state.leader_epoch)
            return
        end = self.log.end_offset
        with trio.CancelScope(shield=True):  # the epoch is durable before any byte of it
            await self._run_blocking(functools.partial(self.epochs.assign, state.leader_epoch, end))
        now_ms = self._clock_ms()
        ack_fsync = self.config.replica_ack_fsync
        self.leader = LeaderPartition(
            self.broker_id, self.replicas, state.isr if self.broker_id in state.isr else (self.broker_id,),
            epoch_start=end, high_watermark=hw, lag_time_max_ms=self.config.replica_lag_time_max_ms,
            min_insync_replicas=self.config.min_insync_replicas, now_ms=now_ms,
            durable_end=self.log.visible_end if ack_fsync else None)
        self.leader.on_local_append(end, durable_end=self.log.visible_end if ack_fsync else None)
        # At DEBUG: replication counts the partitions that start leading (a restart leads
        # them all at once).
        logger.debug("%s-%d: leader in epoch %d from offset %d (isr %s)", self.topic, self.partition,
                     state.leader_epoch, end, list(state.isr))

    def _stop_leading(self) -> None:
        if self.leader is not None:
            self._known_hw = self.leader.high_watermark
            self.leader = None

    def _wake(self) -> None:
        self._waiters.notify(self.key)
        self._waiters.notify(self.end_key)

    def _on_visible(self, log: BrokerLog) -> None:
        # ack-fsync topics count the leader's fsynced end, which a flush advances.
        if self.leader is not None and self.config.replica_ack_fsync:
            self.leader.on_local_append(log.end_offset, durable_end=log.visible_end)
            self._waiters.notify(self.key)

    def note_follower_hw(self, high_watermark: int) -> None:
        """The follower learnt a new HW: consumers waiting here may read further."""
        self._known_hw = max(self._known_hw, high_watermark)
        self._waiters.notify(self.key)

    # ----------------------------------------------------------------- leader: writes

    async def append_as_leader(self, messages: bytes | bytearray, *, kafka: KafkaAppend | None = None) -> AppendResult:
        """Append a validated message set as leader; the log's AppendResult.

        Raises NotLeaderError when this broker does not lead the partition, and
        the log's MessageError subclasses for a bad set (nothing appended).
        """
        leader = self.leader
        if leader is None:
            raise NotLeaderError()

        def still_leading() -> None:  # a roll may have waited: the role may have changed meanwhile
            if self.leader is not leader:
                raise NotLeaderError()

        ack_fsync = self.config.replica_ack_fsync
        # v2 batches carry the epoch of the leader that numbered them (§16.6).
        assign = None if kafka is None else kafka.assignment(self.leader_epoch)
        result = await self.local.write(messages, check=still_leading, flush=ack_fsync, assign=assign)
        high_watermark = leader.high_watermark
        leader.on_local_append(self.log.end_offset, durable_end=self.log.visible_end if ack_fsync else None)
        self._waiters.notify(self.end_key)  # followers' long polls
        if leader.high_watermark != high_watermark:  # an ISR of the leader alone: committed at once
            self._waiters.notify(self.key)
        return result

    def check_acks_all(self) -> EngineError:
        """Before an acks -1 append: NO_ERROR, NOT_LEADER_FOR_PARTITION or NOT_ENOUGH_REPLICAS."""
        if self.leader is None:
            return EngineError.NOT_LEADER_FOR_PARTITION
        return self.leader.check_acks_all()

    # ----------------------------------------------------------------- leader: serving followers

    async def replica_fetch(self, request: ReplicaFetchRequest) -> list[Chunk]:
        """Answer a follower's REPLICA_FETCH, holding it up to ``max_wait_ms`` when nothing is new."""
        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000

        async def attempt() -> ReplicaFetchAnswer:
            # Every pass records the fetch (the follower's end and time, §12.6), the last one too.
            leader = self.leader
            before = (leader.high_watermark, leader.log_start_of(request.replica_id)) if leader is not None else None
            answer = serve_replica_fetch(request, leader=leader, leader_epoch=self.leader_epoch,
                                         history=self.epochs.history, log_end=self.log.end_offset,
                                         now_ms=self._clock_ms(), ack_fsync=self.config.replica_ack_fsync)
            if leader is not None and answer.error == ErrorCode.NO_ERROR and (
                    leader.high_watermark, leader.log_start_of(request.replica_id)) != before:
                self._waiters.notify(self.key)  # acks -1, consumers, and DeleteRecords (§16.4)
            return answer

        def ready(answer: ReplicaFetchAnswer) -> bool:
            return answer.error != ErrorCode.NO_ERROR or answer.max_bytes > 0 or self._log_start_ahead_of(request)

        answer = await self._waiters.long_poll([self.end_key], deadline, attempt, ready)
        data = None
        if answer.max_bytes > 0:
            data = self.log.read(answer.offset, answer.max_bytes, end=self.log.end_offset)
        # No checkpoint here: the caller's send of the answer is one.
        log_start = -1
        if answer.error == ErrorCode.NO_ERROR and self.log.record_format == FORMAT_V2.name:
            log_start = self.log.kafka_offsets.start_offset  # followers take it (§12.4.1)
        return encode_replica_fetch_response(answer.error, leader_epoch=answer.leader_epoch,
                                             chunk_epoch=answer.chunk_epoch, high_watermark=answer.high_watermark,
                                             log_end=answer.log_end, isr=answer.isr, data=data,
                                             log_start_offset=log_start)

    def _log_start_ahead_of(self, request: ReplicaFetchRequest) -> bool:
        """Whether this leader's log start is above the one the follower reported: the answer
        carries it at once rather than after the long poll (DeleteRecords waits for it, §16.4)."""
        log = self.log
        return log.record_format == FORMAT_V2.name and log.kafka_offsets.start_offset > request.log_start_offset

    def log_start_moved(self) -> None:
        """DeleteRecords raised the log start: wake the followers' long polls to take it (§12.4.1)."""
        self._waiters.notify(self.end_key)

    def epoch_end_offset(self, request: EpochEndOffsetRequest) -> bytes:
        """Answer EPOCH_END_OFFSET from this replica's epoch history."""
        error, epoch, end = serve_epoch_end_offset(request, leader=self.leader, leader_epoch=self.leader_epoch,
                                                   history=self.epochs.history, log_end=self.log.end_offset)
        return encode_epoch_end_offset_response(error, epoch, end)

    # ----------------------------------------------------------------- follower: truncation

    async def truncate_log(self, offset: int) -> None:
        """Cut the log at ``offset``, then the epoch file (§12.4.3), off the loop; caller holds the lock."""
        if offset < self.log.start_offset:
            # Retention removed the bytes below the start; the epochs say nothing about them.
            logger.warning("%s-%d: asked to truncate to %d, below the log start %d; truncating to the start",
                           self.topic, self.partition, offset, self.log.start_offset)
            offset = self.log.start_offset
        if offset >= self.log.end_offset:
            return
        with trio.CancelScope(shield=True):
            await self._flusher.truncate(self.log, offset)
            self.local.forget_roll_bounds()
            await self._run_blocking(functools.partial(self.epochs.truncate_from, offset))
        self._known_hw = min(self._known_hw, offset)


class FollowerLog:
    """The ``ReplicaLog`` one follower task writes through (``fetcher.follow``).

    Every write first checks, under the partition's lock, that the task's
    ``FollowerPartition`` is still the partition's: once the role changed
    (a new epoch, or this broker now leads), a late write of the old task is
    refused instead of landing in the new epoch's log.
    """

    def __init__(self, hosted: HostedPartition, follower: FollowerPartition):
        self._hosted, self._follower = hosted, follower

    @property
    def end_offset(self) -> int:
        return self._hosted.log.end_offset

    @property
    def durable_end(self) -> int:
        return self._hosted.log.visible_end

    @property
    def history(self) -> EpochHistory:
        return self._hosted.epochs.history

    @property
    def log_start_offset(self) -> int:
        log = self._hosted.log
        return log.kafka_offsets.start_offset if log.record_format == FORMAT_V2.name else -1

    def _check(self) -> None:
        if self._hosted.follower is not self._follower:
            raise FollowerStopped(ErrorCode.FENCED_LEADER_EPOCH)

    async def assign_epoch(self, epoch: int, start_offset: int) -> None:
        hosted = self._hosted
        async with hosted.lock:
            self._check()
            with trio.CancelScope(shield=True):
                await hosted._run_blocking(functools.partial(hosted.epochs.assign, epoch, start_offset))

    async def truncate_to(self, offset: int) -> None:
        hosted = self._hosted
        async with hosted.lock:
            self._check()
            if hosted.copy_again_from is not None:
                # A torn write can flip the attributes byte, which the 0.7 CRC does not cover.
                offset = min(offset, hosted.copy_again_from)
                hosted.copy_again_from = None
            await hosted.truncate_log(offset)

    async def follow_log_start(self, offset: int) -> None:
        """Take the leader's log start offset when above this replica's, stored before the next
        fetch (§12.4.1, §16.6); a 0.7 log has none, a log being deleted takes none (§16.4)."""
        log = self._hosted.log
        if log.record_format != FORMAT_V2.name:
            return
        # The store writes into the partition directory: a pass its deletion waits for (§16.4).
        lease = log.passes.take()
        if lease is None:
            return  # being deleted
        log_start = log.kafka_offsets.log_start
        with lease, trio.CancelScope(shield=True):
            if log_start.raise_to(offset):
                await self._hosted._run_blocking(log_start.store)

    async def append_verbatim(self, data: bytes) -> None:
        hosted = self._hosted
        # The roll's fsync runs before the lock: a role change need not wait for it.  The
        # write under the lock rolls only if one came due meanwhile, and then appends with
        # no checkpoint between the check and the append.
        await hosted.local.roll_if_due()
        async with hosted.lock:
            self._check()
            await hosted.local.write(data, flush=hosted.config.replica_ack_fsync)
