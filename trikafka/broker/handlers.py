"""Request handling (spec §6 for 0.7 requests, §16 for trikafka's extensions).

The handler is I/O-free apart from the log: it takes decoded requests and
returns what to send (``None``, ``bytes`` or a list of chunks), or raises
``CloseConnection`` for the conditions of spec §7.2.  Only the extension
requests wait (for a flush, or for data), so only they are coroutines.

The three topic rules meet here:

* 0.7 requests with a name that fails §16.3 close the connection (PRODUCE,
  OFFSETS) or answer -1 (FETCH parts, the §6.2 table);
* extension requests answer error 7;
* nothing is created on disk for a rejected name.

A new log is created in a worker thread (mkdir and directory fsyncs must not
block the loop); requests for that log wait for it, one creation per log,
while requests for other logs go on.
"""

from __future__ import annotations

import functools
import logging
import random
from typing import Any, Awaitable, Callable

import trio

from trikafka.log.errors import InvalidTopicError, OffsetOutOfRangeError
from trikafka.log.names import validate_topic
from trikafka.wire.errors import ErrorCode, InvalidMessageError, MessageError, MessageSizeTooLargeError
from trikafka.wire.requests import (
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
)
from trikafka.wire.responses import (
    Chunk,
    ChunkSequence,
    FileRegion,
    ProduceAckedResult,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_produce_acked_response,
)

from .metrics import BrokerMetrics
from .replication import serving as replicated
from .waiters import VisibleEndWaiters

from trikafka.wire import ACKS_APPENDED, ACKS_FLUSHED, OFFSETS_EARLIEST, OFFSETS_LATEST

logger = logging.getLogger(__name__)

# Valid topic names remembered so the hot path skips the regex; bounded because
# any client can send names (fetches of arbitrary valid topics create nothing).
MAX_CACHED_TOPICS = 100_000
OFFSETS_ATTEMPTS = 3  # an OFFSETS by time retried when retention deleted a segment mid-answer

FetchOutcome = tuple[ErrorCode, FileRegion | ChunkSequence | None]


class CloseConnection(Exception):
    """A spec §7.2 condition: close the connection without writing anything."""


class RequestHandler:
    """Applies requests to the logs of one broker; shared by every connection."""

    def __init__(self, *, log_manager: Any, flusher: Any, waiters: VisibleEndWaiters,
                 partitions: Callable[[str], int], max_topic_name_length: int = 255,
                 rng: random.Random | None = None, clock_ms: Callable[[], int],
                 metrics: BrokerMetrics | None = None,
                 run_blocking: Callable[..., Awaitable[Any]] = trio.to_thread.run_sync):
        self._log_manager = log_manager
        self._flusher = flusher
        self._waiters = waiters
        self._partitions = partitions
        self._max_topic_chars = max_topic_name_length
        self._rng = rng if rng is not None else random.Random()
        self._clock_ms = clock_ms
        self._topic_partitions: dict[str, int] = {}
        self._logs: dict[tuple[str, int], Any] = {}
        # Request types this broker closes the connection on, as a 0.7 broker does for
        # every extension: lets tests play a plain 0.7 broker (serve(refuse_requests=...)).
        self.refused_types: frozenset[int] = frozenset()
        self.admin: Any = None  # admin.TopicAdmin: METADATA and CREATE_TOPIC
        self.replicas: Any = None  # replication.manager.ReplicaManager (with ZooKeeper): replicated topics
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self._run_blocking = run_blocking  # how log creation leaves the loop (a worker thread)
        self._creating: dict[tuple[str, int], trio.Event] = {}  # logs being created right now

    # ----------------------------------------------------------------- topics and logs

    def partitions_if_valid(self, topic: str) -> int | None:
        """``partitions(topic)`` for a name trikafka accepts, None for a rejected one."""
        count = self._topic_partitions.get(topic)
        if count is not None:
            return count
        if self.replicas is not None and (count := self.replicas.partition_count(topic)) is not None:
            return count  # not cached: the replica manager's map is the cache
        try:
            validate_topic(topic)
        except InvalidTopicError:
            return None
        if len(topic) > self._max_topic_chars:
            return None
        count = self._partitions(topic)
        if len(self._topic_partitions) < MAX_CACHED_TOPICS:
            self._topic_partitions[topic] = count
        return count

    def forget_partition_count(self, topic: str) -> None:
        """Drop the cached count of ``topic`` (CREATE_TOPIC may have raised it)."""
        self._topic_partitions.pop(topic, None)

    def adopt(self, log: Any) -> Any:
        """Start watching ``log`` (called once per log: loaded or created)."""
        self._logs[(log.topic, log.partition)] = log
        log.add_visible_listener(self._waiters.on_visible)
        self._flusher.track(log)
        return log

    def existing_log(self, topic: str, partition: int) -> Any | None:
        log = self._logs.get((topic, partition))
        if log is None:
            log = self._log_manager.get(topic, partition)
            if log is not None:
                self.adopt(log)
        return log

    async def log_for_write(self, topic: str, partition: int) -> Any:
        """The log to append to, created if new; topic and partition already checked (§6.1 step 4).

        Returns without a checkpoint when the log exists.
        """
        key = (topic, partition)
        while (log := self.existing_log(topic, partition)) is None:
            creating = self._creating.get(key)
            if creating is not None:
                await creating.wait()  # someone else creates it; if that failed, try again
                continue
            self._log_manager.check_partition(topic, partition)
            creating = self._creating[key] = trio.Event()
            try:
                # Shielded: once the directory exists, the log is added, or its files
                # would stay open and unknown until a restart.
                with trio.CancelScope(shield=True):
                    new_log = await self._run_blocking(functools.partial(self._log_manager.make_log, topic,
                                                                         partition))
                    self._log_manager.add(new_log)
            finally:
                del self._creating[key]
                creating.set()
            return self.adopt(new_log)
        return log

    def _replicated(self, topic: str) -> bool:
        return self.replicas is not None and self.replicas.is_replicated(topic)

    def _resolve_partition(self, topic: str, partition: int) -> tuple[int | None, int]:
        """(partitions(topic) or None if the name is rejected, the concrete partition)."""
        count = self.partitions_if_valid(topic)  # a replicated topic's count comes from its assignment
        if count is not None and partition == -1:
            partition = self._rng.randrange(count)  # §6.1 step 1: once per request
        return count, partition

    # ----------------------------------------------------------------- PRODUCE / MULTIPRODUCE

    async def produce(self, part: ProducePart) -> None:
        """One PRODUCE (or MULTIPRODUCE part), spec §6.1; never answered."""
        count, partition = self._resolve_partition(part.topic, part.partition)
        if count is None:
            raise CloseConnection(f"produce to an invalid topic name {_short(part.topic)}")
        if not 0 <= partition < count:
            raise CloseConnection(f"produce to partition {partition} of {part.topic!r}, which has {count}")
        try:
            if self._replicated(part.topic):
                result, _hosted = await replicated.append(self.replicas, part.topic, partition, part.messages,
                                                          ACKS_APPENDED)
                log = None
            else:
                log = await self.log_for_write(part.topic, partition)
                await self._flusher.roll_if_due(log)  # the roll's fsync runs in a worker thread
                result = log.append(part.messages)
        except replicated.AppendRefused as exc:  # 0.7 produce at a follower (§12.6)
            raise CloseConnection(f"0.7 produce to {exc}") from None
        except MessageSizeTooLargeError as exc:
            # §6.1 step 5: the whole set is dropped, the connection stays open.
            logger.warning("dropped a message set for %s-%d: %s", part.topic, partition, exc)
            return
        except MessageError as exc:
            raise CloseConnection(f"invalid message set for {part.topic}-{partition}: {exc}") from None
        self.metrics.count_in(part.topic, result.message_count, result.next_offset - result.base_offset)
        if result.flush_due and log is not None:
            self._flusher.request_flush(log)

    async def multiproduce(self, request: MultiProduceRequest) -> None:
        """MULTIPRODUCE, spec §6.4: parts in order; a closing part aborts the rest."""
        for part in request.parts:
            await self.produce(part)

    # ----------------------------------------------------------------- FETCH / MULTIFETCH

    def fetch_part(self, part: FetchPart) -> FetchOutcome:
        """One FETCH or MULTIFETCH part, checked in the order of the §6.2 table."""
        count = self.partitions_if_valid(part.topic)
        if count is None:
            return ErrorCode.UNKNOWN, None
        if not 0 <= part.partition < count:
            return ErrorCode.WRONG_PARTITION, None
        if self._replicated(part.topic):
            return replicated.fetch(self.replicas, part)
        log = self.existing_log(part.topic, part.partition)
        if log is None:
            return ErrorCode.NO_ERROR, None
        if not log.start_offset <= part.offset <= log.visible_end:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if part.max_bytes < 0:
            return ErrorCode.INVALID_FETCH_SIZE, None  # [T] §6.2
        try:
            return ErrorCode.NO_ERROR, log.read(part.offset, part.max_bytes)
        except OffsetOutOfRangeError:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None

    def fetch(self, request: FetchRequest) -> list[Chunk]:
        outcome = self.fetch_part(request.part)
        self.metrics.count_out((request.part,), (outcome,))
        return encode_fetch_response(*outcome)

    def count_fetched(self, part: FetchPart, outcome: FetchOutcome) -> None:
        """Count one answer sent (FETCH_LOCAL, ``broker.short_circuit``, decides which)."""
        self.metrics.count_out((part,), (outcome,))

    def multifetch(self, request: MultiFetchRequest) -> list[Chunk]:
        outcomes = [self.fetch_part(p) for p in request.parts]
        self.metrics.count_out(request.parts, outcomes)
        return encode_multifetch_response(outcomes)

    # ----------------------------------------------------------------- OFFSETS

    async def offsets(self, request: OffsetsRequest) -> bytes:
        """OFFSETS, spec §6.5; it has no error code, so bad input closes the connection."""
        count = self.partitions_if_valid(request.topic)
        if count is None:
            raise CloseConnection(f"offsets for an invalid topic name {_short(request.topic)}")
        if not 0 <= request.partition < count:
            raise CloseConnection(f"offsets for partition {request.partition} of {request.topic!r}")
        end = None  # a replicated partition: offsets never pass its committed end
        if self._replicated(request.topic):
            target = replicated.offsets_target(self.replicas, request)
            if target is None:
                raise CloseConnection(f"offsets for {request.topic}-{request.partition}, which this broker "
                                      "holds no replica of")
            log, end = target
        else:
            log = self.existing_log(request.topic, request.partition)
            if log is None:
                special = request.time_ms in (OFFSETS_LATEST, OFFSETS_EARLIEST)
                return encode_offsets_response([0] if special else [])
        if request.max_offsets < 0:
            raise CloseConnection(f"offsets with maxNumOffsets {request.max_offsets}")
        found = await self._offsets_before(log, request)
        return encode_offsets_response(found if end is None else replicated.clamp_offsets(found, end))

    async def _offsets_before(self, log: Any, request: OffsetsRequest) -> list[int]:
        now_ms = self._clock_ms()
        if request.time_ms in (OFFSETS_LATEST, OFFSETS_EARLIEST):
            return log.offsets_before(request.time_ms, request.max_offsets, now_ms)  # no file is asked
        # A time compares every segment file's modification time: stats (maybe of a cold
        # directory) leave the loop.  Retention may unlink a segment meanwhile: ask again.
        for _attempt in range(OFFSETS_ATTEMPTS):
            try:
                return await self._run_blocking(functools.partial(
                    log.offsets_before, request.time_ms, request.max_offsets, now_ms))
            except FileNotFoundError:
                continue
        raise CloseConnection(f"offsets for {request.topic}-{request.partition}: segments kept vanishing")

    # ----------------------------------------------------------------- PRODUCE_ACKED (§16.1)

    async def produce_acked(self, request: ProduceAckedRequest) -> bytes:
        """Append every part independently, then wait for the requested acknowledgement."""
        if request.acks not in (ACKS_APPENDED, ACKS_FLUSHED):
            raise CloseConnection(f"PRODUCE_ACKED with unsupported acks {request.acks}")
        deadline = trio.current_time() + max(request.timeout_ms, 0) / 1000
        results: list[ProduceAckedResult] = []
        pending: list[tuple[int, Any]] = []  # (index in results, log) awaiting visibility
        committing: list[tuple[int, Any]] = []  # (index, replicated partition) awaiting its HW
        for part in request.parts:
            result, log, hosted = await self._produce_acked_part(part, request.acks)
            if request.acks == ACKS_FLUSHED:
                if log is not None:
                    pending.append((len(results), log))
                if hosted is not None:
                    committing.append((len(results), hosted))
            results.append(result)
        if pending:
            await self._await_visible(results, pending, deadline)
        for i, hosted in committing:
            results[i] = await replicated.wait_committed(results[i], hosted, deadline)
        await trio.lowlevel.checkpoint()
        return encode_produce_acked_response(results)

    async def _produce_acked_part(self, part: ProducePart,
                                  acks: int) -> tuple[ProduceAckedResult, Any | None, Any | None]:
        """Append one part: its result, and the log (unreplicated) or replicated partition written."""
        count, partition = self._resolve_partition(part.topic, part.partition)

        def failed(code: ErrorCode) -> tuple[ProduceAckedResult, None, None]:
            return ProduceAckedResult(part.topic, partition, code, -1, -1), None, None

        if count is None:
            return failed(ErrorCode.INVALID_TOPIC)
        if not 0 <= partition < count:
            return failed(ErrorCode.WRONG_PARTITION)
        log = hosted = None
        try:
            if self._replicated(part.topic):
                appended, hosted = await replicated.append(self.replicas, part.topic, partition, part.messages, acks)
            else:
                log = await self.log_for_write(part.topic, partition)
                await self._flusher.roll_if_due(log)
                appended = log.append(part.messages)
        except replicated.AppendRefused as exc:
            return failed(exc.error)
        except MessageSizeTooLargeError:
            return failed(ErrorCode.MESSAGE_SIZE_TOO_LARGE)
        except (InvalidMessageError, MessageError):
            return failed(ErrorCode.INVALID_MESSAGE)
        self.metrics.count_in(part.topic, appended.message_count, appended.next_offset - appended.base_offset)
        if appended.flush_due and log is not None:
            self._flusher.request_flush(log)  # a replicated partition's leader asked already
        result = ProduceAckedResult(part.topic, partition, ErrorCode.NO_ERROR,
                                    appended.base_offset, appended.next_offset)
        return result, log, hosted

    async def _await_visible(self, results: list[ProduceAckedResult],
                             pending: list[tuple[int, Any]], deadline: float) -> None:
        for _, log in pending:
            self._flusher.request_flush(log)  # don't wait for the timer: group commit now
        while True:
            waiting = [(i, log) for i, log in pending if log.visible_end < results[i].next_offset]
            if not waiting:
                await trio.lowlevel.checkpoint()
                return
            keys = [(log.topic, log.partition) for _, log in waiting]
            # Not woken by shutdown: the flusher keeps running while the broker drains.
            if not await self._waiters.wait_any(keys, deadline, wake_on_close=False):
                break
        for i, log in pending:
            if log.visible_end < results[i].next_offset:
                r = results[i]
                results[i] = ProduceAckedResult(r.topic, r.partition, ErrorCode.REQUEST_TIMED_OUT, -1, -1)

    # ----------------------------------------------------------------- FETCH_WAIT (§16.2)

    async def fetch_wait(self, request: FetchWaitRequest) -> list[Chunk]:
        """A MULTIFETCH that waits for ``min_bytes`` visible bytes or ``max_wait_ms``.

        Woken by flushes of the requested partitions (no polling).  A part with
        an error answers at once: waiting cannot fix it.
        """
        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
        keys = [(p.topic, p.partition) for p in request.parts]
        while True:
            outcomes = [self.fetch_part(p) for p in request.parts]
            available = sum(len(data) for _, data in outcomes if data is not None)
            if (available >= request.min_bytes or self._waiters.closing
                    or any(code != ErrorCode.NO_ERROR for code, _ in outcomes)
                    or trio.current_time() >= deadline):
                break
            del outcomes  # the regions are recomputed after the wait
            if not await self._waiters.wait_any(keys, deadline):
                outcomes = [self.fetch_part(p) for p in request.parts]
                break
        await trio.lowlevel.checkpoint()
        self.metrics.count_out(request.parts, outcomes)
        return encode_multifetch_response(outcomes)


def _short(topic: str, limit: int = 40) -> str:
    text = repr(topic)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(topic)} chars)"
