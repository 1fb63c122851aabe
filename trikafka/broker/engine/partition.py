"""The ``Partition`` seam: one topic-partition as both listeners use it.

A listener checks a request's topic and partition (docs/protocol.md §5.1,
§5.2, §9.2, §16.4), asks the engine's directory for the partition
(``PartitionDirectory.partition`` to read, ``partition_for_write`` to append)
and calls it; which kind it is decides the rest:

* ``LocalPartition``: an unreplicated log, of 0.7 message sets or of v2
  batches (§5, §7.2, §16.6).  Appends roll,
  append and request a flush here; reads and OFFSETS stop at the visible end.
* ``NoLog``: a valid partition this broker has no log of yet: a fetch is
  empty without error, OFFSETS answers ``[0]`` or ``[]`` (§5.2, §5.5).
* ``replication.serving.ReplicatedPartition`` and ``NotHosted``: a
  replicated topic's partition (§12.6).

``LocalPartition.write`` is the one place where bytes reach a broker's log:
the replicated leader and the follower's copy write through it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Protocol

from trikafka.log.epochs import EpochHistory
from trikafka.log.errors import OffsetOutOfRangeError
from trikafka.log.record_format import OffsetAssignment
from trikafka.wire import OFFSETS_EARLIEST, OFFSETS_LATEST
from trikafka.wire.responses import ChunkSequence, FileRegion

from ..seams import AppendResult, BrokerLog, Flusher, KafkaAppend
from ..topic_settings import FORMAT_V2
from .errors import EngineError

TopicPartition = tuple[str, int]
FetchOutcome = tuple[EngineError, FileRegion | ChunkSequence | None]
# How OFFSETS reads a log's answer (the 0.7 handler's: off the loop, retried while retention
# deletes segments); the partition chooses the log and clamps what it returns.
OffsetsReader = Callable[[BrokerLog], Awaitable[list[int]]]


class Refused(Exception):
    """This broker may not serve the request on this partition (§12.6); ``error`` says why."""

    def __init__(self, error: EngineError, detail: str):
        super().__init__(detail)
        self.error = error


UNREPLICATED_EPOCH = 0  # an unreplicated partition's leader epoch, for ever (§16.4)


@dataclass(frozen=True, slots=True)
class ReadView:
    """What a Kafka-protocol reader may see of a partition (§16.6): its log, the byte end
    of what consumers may read (the high watermark), the current leader epoch and the
    leader-epoch history (§12.3; None for an unreplicated partition: epoch 0 from offset 0)."""

    log: BrokerLog
    end: int
    leader_epoch: int
    epochs: EpochHistory | None = None


class AckWait(Protocol):
    """An acks -1 acknowledgement in progress (§9.2, §12.6); ``key`` is the waiters' key that wakes it."""

    key: TopicPartition

    def status(self) -> EngineError | None:
        """None while pending; then NO_ERROR or the error the part answers (it never changes again)."""


class Partition(Protocol):
    """One topic-partition of a broker, whatever serves it."""

    key: TopicPartition

    async def append(self, messages: bytes | bytearray, acks: int, *, kafka: KafkaAppend | None = None) -> AppendResult:
        """Append a message set (acks as in §9.2; 0.7 PRODUCE appends with acks 0), or with
        ``kafka`` v2 record batches that this leader numbers (§16.6).

        Raises ``Refused`` when this broker may not append here, and the log's
        ``MessageError`` subclasses (``BatchError`` for batches) for a bad set (nothing appended).
        """

    def read_view(self) -> ReadView:
        """The log and high watermark a Kafka-protocol reader sees; ``Refused`` where this broker
        does not serve reads of the partition (§16.4: only the leader does)."""

    def ack_wait(self, next_offset: int) -> AckWait:
        """Start the acks -1 wait for the bytes below ``next_offset``, after ``append``."""

    def log_start_wait(self, offset: int) -> AckWait:
        """Start DeleteRecords' wait until every replica in the ISR stored a log start of at least
        ``offset`` (§16.4), after the leader stored its own; ``Refused`` where this broker does not lead."""

    def fetch(self, offset: int, max_bytes: int) -> FetchOutcome:
        """A consumer's read of up to ``max_bytes`` from ``offset`` (topic and partition checked already)."""

    async def offsets(self, time_ms: int, max_offsets: int, read: OffsetsReader) -> list[int]:
        """The offsets before ``time_ms`` (§5.5: at most ``max_offsets``), ``read`` from the log this
        partition chooses; raises ``Refused`` where this broker cannot answer."""


class LocalPartition:
    """A broker's log with its roll and flush policy (§7.2): the unreplicated partition.

    The roll check runs before every append, so it is kept to integer compares:
    ``_roll_end`` and ``_roll_at_ms`` bound when a roll can next be due (the
    active segment's start plus ``segment_bytes``; its first append plus
    ``roll_ms``), and ``_end`` is the log end after this partition's last
    append.  Only the flusher's ``roll_if_due`` (the exact rule,
    ``Log.roll_due``) decides a roll, and it runs whenever a bound is passed,
    the log's config was replaced, or a roll or truncation is in flight.
    The bounds may only be early, never late: a roll by someone else (retention)
    starts a segment that rolls later; a truncation moves the end back, so
    ``forget_roll_bounds`` must follow it; every append to the log goes through
    ``write``.

    ``ack_fsync`` is the broker's ``acks.all.fsync`` (§12.6): False lets a
    Kafka-format log answer acks -1 at the append, True waits for a flush.
    """

    def __init__(self, log: BrokerLog, flusher: Flusher, *, ack_fsync: bool = True):
        self.log = log
        self.key: TopicPartition = (log.topic, log.partition)
        # acks -1 never runs ahead of what readers see (§12.6): a Kafka-format log's readers see its
        # end at once (§16.6), a 0.7 log's only what a flush covered, whatever the setting says.
        self._acked_at_append = Settled(self.key) if not ack_fsync and log.record_format == FORMAT_V2 else None
        self._flusher = flusher
        self._clock_ms = flusher.log_clock_ms
        self._config: object = None  # the log config the bounds were computed with
        self._end = 0
        self._roll_end = -1  # below any end: the first write asks the flusher
        self._roll_at_ms = -math.inf

    async def write(self, data: bytes | bytearray | memoryview, *, check: Callable[[], None] | None = None,
                    flush: bool = False, assign: OffsetAssignment | None = None) -> AppendResult:
        """Roll if due (off the loop), run ``check``, append, request a flush if due or ``flush``.

        ``check`` runs right before the append and may raise to refuse it (the
        leader checks it still leads after waiting for a roll).  ``assign``: the
        leader numbers v2 batches in place, right before they are written (§16.6).
        Returns without a checkpoint when no roll was due.
        """
        log = self.log
        asked = self._roll_maybe_due()
        if asked:
            await self._flusher.roll_if_due(log)
        if check is not None:
            check()
        result = log.append(data) if assign is None else log.append(data, assign=assign)
        self._end = result.next_offset
        if asked:
            self._learn_roll_bounds()
        if result.flush_due or flush:
            self._flusher.request_flush(log)
        return result

    async def roll_if_due(self) -> None:
        """Roll now if the next append must roll (``write`` checks again: it may be due by then)."""
        if self._roll_maybe_due():
            await self._flusher.roll_if_due(self.log)

    def _roll_maybe_due(self) -> bool:
        """False when the bounds show no roll is due: the exact rule need not be asked."""
        return (self._end > self._roll_end or self.log.config is not self._config
                or self._flusher.restructuring(self.log) or self._clock_ms() > self._roll_at_ms)

    def _learn_roll_bounds(self) -> None:
        log = self.log
        config = log.config
        active = log.segments.segments[-1]
        first_ms = active.first_append_ms
        self._config = config
        self._end = log.end_offset
        self._roll_end = active.start + config.segment_bytes
        # Before the segment's first append its age rule has no start: ask again next time.
        self._roll_at_ms = -math.inf if first_ms is None else first_ms + config.roll_ms

    def forget_roll_bounds(self) -> None:
        """The log end moved back (a truncation): the next write asks the flusher."""
        self._roll_end = -1

    # ----------------------------------------------------------------- Partition

    def append(self, messages: bytes | bytearray, acks: int, *,
               kafka: KafkaAppend | None = None) -> Coroutine[Any, Any, AppendResult]:
        # ``write``'s own coroutine, not one around it: every 0.7 PRODUCE passes here.
        if kafka is None:
            return self.write(messages)
        return self.write(messages, assign=kafka.assignment(UNREPLICATED_EPOCH))

    def read_view(self) -> ReadView:
        log = self.log
        # A Kafka-format partition with one replica is readable to its log end, as in Kafka (§16.6).
        return ReadView(log, log.end_offset if log.record_format == FORMAT_V2 else log.visible_end, UNREPLICATED_EPOCH)

    def ack_wait(self, next_offset: int) -> AckWait:
        if self._acked_at_append is not None:
            return self._acked_at_append  # the flush follows §7.2's count and interval rules
        self._flusher.request_flush(self.log)  # don't wait for the timer: group commit now
        return _Visible(self.key, self.log, next_offset)

    def log_start_wait(self, offset: int) -> AckWait:
        return Settled(self.key)  # one replica, which stored the start before asking

    def fetch(self, offset: int, max_bytes: int) -> FetchOutcome:
        log = self.log
        if not log.start_offset <= offset <= log.visible_end:
            return EngineError.OFFSET_OUT_OF_RANGE, None
        if max_bytes < 0:
            return EngineError.INVALID_FETCH_SIZE, None  # (trikafka) §5.2
        try:
            return EngineError.NO_ERROR, log.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            return EngineError.OFFSET_OUT_OF_RANGE, None

    async def offsets(self, time_ms: int, max_offsets: int, read: OffsetsReader) -> list[int]:
        return await read(self.log)


class Settled:
    """A wait with nothing left to wait for."""

    __slots__ = ("key",)

    def __init__(self, key: TopicPartition):
        self.key = key

    def status(self) -> EngineError | None:
        return EngineError.NO_ERROR


class _Visible:
    """An unreplicated part is acknowledged once a flush made it visible (§9.2)."""

    __slots__ = ("key", "_log", "_next_offset")

    def __init__(self, key: TopicPartition, log: BrokerLog, next_offset: int):
        self.key, self._log, self._next_offset = key, log, next_offset

    def status(self) -> EngineError | None:
        return EngineError.NO_ERROR if self._log.visible_end >= self._next_offset else None


class NoLog:
    """A valid unreplicated partition without a log here (§5.2, §5.5); writes create the log first."""

    def __init__(self, key: TopicPartition):
        self.key = key

    async def append(self, messages: bytes | bytearray, acks: int, *, kafka: KafkaAppend | None = None) -> AppendResult:
        raise AssertionError(f"{self.key}: append before the log exists (partition_for_write creates it)")

    def read_view(self) -> ReadView:
        raise Refused(EngineError.WRONG_PARTITION, f"{self.key[0]}-{self.key[1]} has no log on this broker")

    def ack_wait(self, next_offset: int) -> AckWait:
        raise AssertionError(f"{self.key}: nothing was appended")

    def log_start_wait(self, offset: int) -> AckWait:
        raise Refused(EngineError.WRONG_PARTITION, f"{self.key[0]}-{self.key[1]} has no log on this broker")

    def fetch(self, offset: int, max_bytes: int) -> FetchOutcome:
        return EngineError.NO_ERROR, None

    async def offsets(self, time_ms: int, max_offsets: int, read: OffsetsReader) -> list[int]:
        return [0] if time_ms in (OFFSETS_LATEST, OFFSETS_EARLIEST) else []
