"""Client requests on replicated partitions (docs/protocol.md §12.6).

The engine's directory asks ``partition(manager, topic, partition)`` for every
partition of a replicated topic and gets one of two ``Partition``s
(``broker/engine/partition.py``): the replica this broker holds, or ``NotHosted``.
Their answers follow §12.6: writes only at the leader (the 0.7 PRODUCE at a
follower closes the connection, PRODUCE_ACKED answers NOT_LEADER), acks -1
waits for the high watermark, and consumers on any replica read up to the
high watermark.  Unreplicated topics never reach this module.
"""

from __future__ import annotations

from ...log.errors import OffsetOutOfRangeError
from ...wire import ACKS_FLUSHED, OFFSETS_LATEST
from ...wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest
from ...wire.responses import Chunk
from ..engine.errors import EngineError
from ..engine.partition import (AckWait, FetchOutcome, KafkaAppend, OffsetsReader, Partition, ReadView, Refused,
                         TopicPartition)
from ..seams import AppendResult, Replica, Replicas
from .hosted import NotLeaderError
from .isr import LeaderPartition
from .unserved import not_a_replica


def partition(manager: Replicas, topic: str, partition: int) -> Partition:
    """The ``Partition`` of a replicated topic's ``topic``-``partition`` on this broker."""
    hosted = manager.hosted.get((topic, partition))
    if hosted is None:
        return NotHosted(manager, (topic, partition))
    return ReplicatedPartition(manager, hosted)


class ReplicatedPartition:
    """This broker's replica of a replicated partition, serving clients (§12.6)."""

    __slots__ = ("key", "_manager", "_hosted")

    def __init__(self, manager: Replicas, hosted: Replica):
        self.key: TopicPartition = hosted.key
        self._manager, self._hosted = manager, hosted

    async def append(self, messages: bytes | bytearray, acks: int, *, kafka: KafkaAppend | None = None) -> AppendResult:
        """Append at the leader; ``Refused`` when this broker does not lead the partition,
        or (acks -1) when the ISR is below ``min.insync.replicas``."""
        hosted = self._hosted
        if acks == ACKS_FLUSHED:
            code = hosted.check_acks_all()
            if code != EngineError.NO_ERROR:
                raise Refused(code, f"{_name(self.key)}: {code.name}")
        try:
            return await hosted.append_as_leader(messages, kafka=kafka)
        except NotLeaderError:
            raise _not_led(self._manager, self.key) from None

    def read_view(self) -> ReadView:
        """Kafka-protocol reads are served by the leader only (§16.4), up to the high watermark."""
        hosted = self._hosted
        if hosted.leader is None:
            raise _not_led(self._manager, self.key)
        return ReadView(hosted.log, hosted.consumer_end(), hosted.leader_epoch, hosted.epochs.history)

    def ack_wait(self, next_offset: int) -> AckWait:
        return _Committed(self.key, self._hosted, next_offset)

    def log_start_wait(self, offset: int) -> AckWait:
        if self._hosted.leader is None:
            raise _not_led(self._manager, self.key)
        self._hosted.log_start_moved()
        return _IsrLogStart(self.key, self._hosted, offset)

    def fetch(self, offset: int, max_bytes: int) -> FetchOutcome:
        """A consumer's read: served by any replica, up to the high watermark."""
        hosted = self._hosted
        log, end = hosted.log, hosted.consumer_end()
        # Above the HW but within the log: committed elsewhere, committed here soon; past the log
        # end, only the acting leader knows the offset does not exist (docs/protocol.md §12.6).
        log_end = max(end, log.end_offset)
        if offset > log_end and hosted.leader is None:
            return EngineError.NOT_LEADER_FOR_PARTITION, None
        if not log.start_offset <= offset <= max(log_end, log.start_offset):
            return EngineError.OFFSET_OUT_OF_RANGE, None
        if max_bytes < 0:
            return EngineError.INVALID_FETCH_SIZE, None
        if offset >= end:
            return EngineError.NO_ERROR, None
        try:
            return EngineError.NO_ERROR, log.read(offset, max_bytes, end=end)
        except OffsetOutOfRangeError:
            return EngineError.OFFSET_OUT_OF_RANGE, None

    async def offsets(self, time_ms: int, max_offsets: int, read: OffsetsReader) -> list[int]:
        """The replica's OFFSETS answer, never past the committed end (taken before the read);
        ``latest`` is that end, which consumers read to whether or not it was flushed (§12.6)."""
        end = self._hosted.consumer_end()
        found = await read(self._hosted.log)
        if time_ms == OFFSETS_LATEST and max_offsets > 0:
            # The log's own answer starts at its flushed end; the replica's at the committed one.
            return clamp_offsets([end, *(o for o in found if o < end)], end)[:max_offsets]
        return clamp_offsets(found, end)


class _Committed:
    """An acks -1 part waits for the high watermark of the leader that appended it (§12.6)."""

    __slots__ = ("key", "_hosted", "_leader", "_next_offset")

    def __init__(self, key: TopicPartition, hosted: Replica, next_offset: int):
        self.key, self._hosted, self._next_offset = key, hosted, next_offset
        self._leader: LeaderPartition | None = hosted.leader

    def status(self) -> EngineError | None:
        leader = self._leader
        if leader is None or self._hosted.leader is not leader:
            return EngineError.NOT_LEADER_FOR_PARTITION
        return leader.commit_status(self._next_offset)


class _IsrLogStart:
    """DeleteRecords waits until each follower of the ISR reported the new log start (§12.4.1, §16.4);
    woken on the partition's key, which a follower's fetch raising its log start and ISR changes notify."""

    __slots__ = ("key", "_hosted", "_leader", "_offset")

    def __init__(self, key: TopicPartition, hosted: Replica, offset: int):
        self.key, self._hosted, self._offset = key, hosted, offset
        self._leader: LeaderPartition | None = hosted.leader

    def status(self) -> EngineError | None:
        leader = self._leader
        if leader is None or self._hosted.leader is not leader:
            return EngineError.NOT_LEADER_FOR_PARTITION
        return EngineError.NO_ERROR if leader.isr_holds_log_start(self._offset) else None


class NotHosted:
    """A replicated partition this broker holds no replica of (§12.6)."""

    __slots__ = ("key", "_manager")

    def __init__(self, manager: Replicas, key: TopicPartition):
        self.key, self._manager = key, manager

    async def append(self, messages: bytes | bytearray, acks: int, *, kafka: KafkaAppend | None = None) -> AppendResult:
        raise _not_led(self._manager, self.key)

    def read_view(self) -> ReadView:
        raise _not_led(self._manager, self.key)

    def ack_wait(self, next_offset: int) -> AckWait:
        raise AssertionError(f"{_name(self.key)}: nothing was appended")

    def log_start_wait(self, offset: int) -> AckWait:
        raise _not_led(self._manager, self.key)

    def fetch(self, offset: int, max_bytes: int) -> FetchOutcome:
        return EngineError.NOT_LEADER_FOR_PARTITION, None

    async def offsets(self, time_ms: int, max_offsets: int, read: OffsetsReader) -> list[int]:
        raise Refused(EngineError.NOT_LEADER_FOR_PARTITION, f"{_name(self.key)}, which this broker holds no replica of")


def _not_led(manager: Replicas, key: TopicPartition) -> Refused:
    state = manager.states.get(key)
    code = EngineError.LEADER_NOT_AVAILABLE if state is None or state.leader < 0 else EngineError.NOT_LEADER_FOR_PARTITION
    return Refused(code, f"{_name(key)}, which this broker does not lead")


def _name(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"


def clamp_offsets(found: list[int], end: int) -> list[int]:
    """OFFSETS answers of a replica, newest first, never past the committed ``end``."""
    return sorted({min(o, end) for o in found}, reverse=True)


async def replica_fetch(manager: Replicas, request: ReplicaFetchRequest) -> list[Chunk]:
    hosted = manager.hosted.get((request.topic, request.partition))
    if hosted is None:
        return not_a_replica(request)
    return await hosted.replica_fetch(request)


def epoch_end_offset(manager: Replicas, request: EpochEndOffsetRequest) -> list[Chunk]:
    hosted = manager.hosted.get((request.topic, request.partition))
    if hosted is None:
        return not_a_replica(request)
    return [hosted.epoch_end_offset(request)]
