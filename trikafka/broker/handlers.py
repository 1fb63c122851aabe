"""The 0.7 listener's request handling (docs/protocol.md §5 for 0.7 requests, §9 for trikafka's extensions).

The handler is I/O-free apart from the log: it takes decoded requests and
returns what to send (``None``, ``bytes`` or a list of chunks), or raises
``CloseConnection`` for the conditions of §2.  Only the extension
requests wait (for a flush, or for data), so only they are coroutines.

This is the 0.7 listener's side of the engine (``broker/engine/``): the
handler checks a request's topic and partition, then asks the engine's
``PartitionDirectory`` for the ``Partition`` and calls it: an unreplicated
log, or a replicated topic's replica (§12.6); it does not branch on which.
METADATA and CREATE_TOPIC are the engine's ``TopicAdmin``'s answers, encoded.

The three topic rules meet here:

* 0.7 requests with a name that fails §9.7 close the connection (PRODUCE,
  OFFSETS) or answer -1 (FETCH parts, the §5.2 table);
* extension requests answer error 7;
* nothing is created on disk for a rejected name.
"""

from __future__ import annotations

import functools
import logging
import random
from typing import Callable

import trio

from trikafka.wire import ACKS_APPENDED, ACKS_FLUSHED, OFFSETS_EARLIEST, OFFSETS_LATEST
from trikafka.wire.errors import ErrorCode, MessageError, MessageSizeTooLargeError
from trikafka.wire.metadata import (
    CreateTopicResult,
    Metadata,
    PartitionMetadata,
    TopicMetadata,
    encode_create_topic_response,
    encode_metadata_response,
)
from trikafka.wire.requests import (
    CreateTopicRequest,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
)
from trikafka.wire.responses import (
    Chunk,
    FetchData,
    ProduceAckedResult,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_produce_acked_response,
)

from .engine.engine import Engine, PartitionWrite
from .engine.errors import EngineError
from .engine.metadata import TopicView
from .engine.partition import Partition, Refused
from .seams import AppendResult, BrokerLog, RunBlocking

logger = logging.getLogger(__name__)

OFFSETS_ATTEMPTS = 3  # an OFFSETS by time retried when retention deleted a segment mid-answer

# The one table from the engine's errors to the 0.7 listener's codes (§6, §9, §12.5).
ENGINE_TO_07: dict[EngineError, ErrorCode] = {
    EngineError.NO_ERROR: ErrorCode.NO_ERROR,
    EngineError.OFFSET_OUT_OF_RANGE: ErrorCode.OFFSET_OUT_OF_RANGE,
    EngineError.WRONG_PARTITION: ErrorCode.WRONG_PARTITION,
    EngineError.INVALID_FETCH_SIZE: ErrorCode.INVALID_FETCH_SIZE,
    EngineError.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    EngineError.INVALID_TOPIC: ErrorCode.INVALID_TOPIC,
    EngineError.UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC,
    EngineError.TOPIC_ALREADY_EXISTS: ErrorCode.TOPIC_ALREADY_EXISTS,
    EngineError.INVALID_PARTITIONS: ErrorCode.INVALID_PARTITIONS,
    EngineError.INVALID_CONFIG: ErrorCode.INVALID_CONFIG,
    EngineError.SETTINGS_NOT_KEPT: ErrorCode.UNKNOWN,  # created, settings not kept (§9.5)
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.NOT_LEADER_FOR_PARTITION,
    EngineError.LEADER_NOT_AVAILABLE: ErrorCode.LEADER_NOT_AVAILABLE,
    EngineError.NOT_ENOUGH_REPLICAS: ErrorCode.NOT_ENOUGH_REPLICAS,
    EngineError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}


class CloseConnection(Exception):
    """A §2 condition: close the connection without writing anything."""


class RequestHandler:
    """Applies 0.7 requests to the engine of one broker; shared by every connection of the 0.7 listener."""

    def __init__(self, *, engine: Engine, clock_ms: Callable[[], int], rng: random.Random | None = None,
                 run_blocking: RunBlocking = trio.to_thread.run_sync, refused_types: frozenset[int] = frozenset()):
        self.engine = engine
        self._directory = engine.directory  # the hot path skips one attribute lookup
        self._metrics = engine.metrics
        self._waiters = engine.waiters
        self._rng = rng if rng is not None else random.Random()
        self._clock_ms = clock_ms
        # Request types this broker closes the connection on, as a 0.7 broker does for
        # every extension: lets tests play a plain 0.7 broker (serve(refuse_requests=...)).
        self.refused_types = refused_types
        self._run_blocking = run_blocking

    def _resolve_partition(self, topic: str, partition: int) -> tuple[int | None, int]:
        """(partitions(topic) or None if the name is rejected, the concrete partition)."""
        count = self._directory.partitions_if_valid(topic)  # a replicated topic's count comes from its assignment
        if count is not None and partition == -1:
            partition = self._rng.randrange(count)  # §5.1 step 1: once per request
        return count, partition

    # ----------------------------------------------------------------- PRODUCE / MULTIPRODUCE

    async def produce(self, part: ProducePart) -> None:
        """One PRODUCE (or MULTIPRODUCE part), §5.1; never answered."""
        count, partition = self._resolve_partition(part.topic, part.partition)
        if count is None:
            raise CloseConnection(f"produce to an invalid topic name {_short(part.topic)}")
        if not 0 <= partition < count:
            raise CloseConnection(f"produce to partition {partition} of {part.topic!r}, which has {count}")
        if self._directory.kafka_format(part.topic):  # PRODUCE has no answer to carry WrongFormat (§16.6)
            raise CloseConnection(f"0.7 produce to the Kafka-format topic {_short(part.topic)}")
        try:
            target = await self._directory.partition_for_write(part.topic, partition)
            result = await target.append(part.messages, ACKS_APPENDED)
        except Refused as exc:  # 0.7 produce at a follower (§12.6)
            raise CloseConnection(f"0.7 produce to {exc}") from None
        except MessageSizeTooLargeError as exc:
            # §5.1 step 4: the whole set is dropped, the connection stays open.
            logger.warning("dropped a message set for %s-%d: %s", part.topic, partition, exc)
            return
        except MessageError as exc:
            raise CloseConnection(f"invalid message set for {part.topic}-{partition}: {exc}") from None
        self._metrics.count_in(part.topic, result.message_count, result.next_offset - result.base_offset)

    async def multiproduce(self, request: MultiProduceRequest) -> None:
        """MULTIPRODUCE, §5.4: parts in order; a closing part aborts the rest."""
        for part in request.parts:
            await self.produce(part)

    # ----------------------------------------------------------------- FETCH / MULTIFETCH

    def fetch_part(self, part: FetchPart) -> tuple[ErrorCode, FetchData]:
        """One FETCH or MULTIFETCH part, checked in the order of the §5.2 table."""
        count = self._directory.partitions_if_valid(part.topic)
        if count is None:
            return ErrorCode.UNKNOWN, None
        if not 0 <= part.partition < count:
            return ErrorCode.WRONG_PARTITION, None
        if self._directory.kafka_format(part.topic):
            return ErrorCode.WRONG_FORMAT, None
        code, data = self._directory.partition(part.topic, part.partition).fetch(part.offset, part.max_bytes)
        return ENGINE_TO_07[code], data

    def fetch(self, request: FetchRequest) -> list[Chunk]:
        outcome = self.fetch_part(request.part)
        self._metrics.count_out((request.part,), (outcome,))
        return encode_fetch_response(*outcome)

    def count_fetched(self, part: FetchPart, outcome: tuple[ErrorCode, FetchData]) -> None:
        """Count one answer sent (FETCH_LOCAL, ``broker.short_circuit``, decides which)."""
        self._metrics.count_out((part,), (outcome,))

    def multifetch(self, request: MultiFetchRequest) -> list[Chunk]:
        outcomes = [self.fetch_part(p) for p in request.parts]
        self._metrics.count_out(request.parts, outcomes)
        return encode_multifetch_response(outcomes)

    # ----------------------------------------------------------------- OFFSETS

    async def offsets(self, request: OffsetsRequest) -> bytes:
        """OFFSETS, §5.5; it has no error code, so bad input closes the connection."""
        count = self._directory.partitions_if_valid(request.topic)
        if count is None:
            raise CloseConnection(f"offsets for an invalid topic name {_short(request.topic)}")
        if not 0 <= request.partition < count:
            raise CloseConnection(f"offsets for partition {request.partition} of {request.topic!r}")
        if self._directory.kafka_format(request.topic):  # OFFSETS has no error code (§16.6)
            raise CloseConnection(f"0.7 offsets of the Kafka-format topic {_short(request.topic)}")
        try:
            partition = self._directory.partition(request.topic, request.partition)
            found = await partition.offsets(request.time_ms, request.max_offsets,
                                            functools.partial(self._offsets_before, request=request))
        except Refused as exc:  # a replicated partition this broker holds no replica of (§12.6)
            raise CloseConnection(f"offsets for {exc}") from None
        return encode_offsets_response(found)

    async def _offsets_before(self, log: BrokerLog, request: OffsetsRequest) -> list[int]:
        if request.max_offsets < 0:
            raise CloseConnection(f"offsets with maxNumOffsets {request.max_offsets}")
        now_ms = self._clock_ms()
        if request.time_ms in (OFFSETS_LATEST, OFFSETS_EARLIEST):
            return log.offsets_before(request.time_ms, request.max_offsets, now_ms)  # no file is asked
        # A time compares every segment file's modification time: stats (maybe of a cold
        # directory) leave the loop.  Retention may unlink a segment meanwhile: ask again.
        for _attempt in range(OFFSETS_ATTEMPTS):
            lease = log.passes.take()  # the stats are a pass a deletion waits for (§16.4)
            if lease is None:
                return []  # being deleted: as for a partition with no log
            try:
                with lease:
                    found: list[int] = await self._run_blocking(functools.partial(
                        log.offsets_before, request.time_ms, request.max_offsets, now_ms))
                return found
            except FileNotFoundError:
                continue
        raise CloseConnection(f"offsets for {request.topic}-{request.partition}: segments kept vanishing")

    # ----------------------------------------------------------------- PRODUCE_ACKED (§9.2)

    async def produce_acked(self, request: ProduceAckedRequest) -> bytes:
        """Append every part independently, then wait for the requested acknowledgement.

        Returns without a checkpoint of its own when it waited for none: the answer's send
        (``send_chunks``) is the request's checkpoint, and an acks -1 wait was one already.
        """
        if request.acks not in (ACKS_APPENDED, ACKS_FLUSHED):
            raise CloseConnection(f"PRODUCE_ACKED with unsupported acks {request.acks}")
        deadline = trio.current_time() + max(request.timeout_ms, 0) / 1000
        results: list[ProduceAckedResult] = []
        writes: list[tuple[int, PartitionWrite]] = []  # (index in results, the part's write)
        for part in request.parts:
            result, target = await self._produce_acked_part(part)
            if target is not None:
                writes.append((len(results), PartitionWrite(target, part.messages)))
            results.append(result)
        outcomes = await self.engine.append([w for _, w in writes], request.acks, deadline)
        for (i, _), outcome in zip(writes, outcomes):
            row = results[i]
            if isinstance(outcome, AppendResult):
                results[i] = ProduceAckedResult(row.topic, row.partition, ErrorCode.NO_ERROR,
                                                outcome.base_offset, outcome.next_offset)
            else:
                results[i] = _failed(row, _append_error(outcome))
        return encode_produce_acked_response(results)

    async def _produce_acked_part(self, part: ProducePart) -> tuple[ProduceAckedResult, Partition | None]:
        """One part checked: its result so far, and the partition to append it to (None: refused)."""
        count, partition = self._resolve_partition(part.topic, part.partition)

        def failed(code: ErrorCode) -> tuple[ProduceAckedResult, None]:
            return ProduceAckedResult(part.topic, partition, code, -1, -1), None

        if count is None:
            return failed(ErrorCode.INVALID_TOPIC)
        if not 0 <= partition < count:
            return failed(ErrorCode.WRONG_PARTITION)
        if self._directory.kafka_format(part.topic):
            return failed(ErrorCode.WRONG_FORMAT)
        try:
            target = await self._directory.partition_for_write(part.topic, partition)
        except Refused as exc:
            return failed(ENGINE_TO_07[exc.error])
        return ProduceAckedResult(part.topic, partition, ErrorCode.NO_ERROR, -1, -1), target

    # ----------------------------------------------------------------- FETCH_WAIT (§9.3)

    async def fetch_wait(self, request: FetchWaitRequest) -> list[Chunk]:
        """A MULTIFETCH that waits for ``min_bytes`` visible bytes or ``max_wait_ms``.

        Woken by flushes of the requested partitions (no polling).  A part with
        an error answers at once: waiting cannot fix it.
        """
        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000

        async def attempt() -> list[tuple[ErrorCode, FetchData]]:
            return [self.fetch_part(p) for p in request.parts]

        def ready(outcomes: list[tuple[ErrorCode, FetchData]]) -> bool:
            return (sum(len(data) for _, data in outcomes if data is not None) >= request.min_bytes
                    or any(code != ErrorCode.NO_ERROR for code, _ in outcomes))

        outcomes = await self._waiters.long_poll([(p.topic, p.partition) for p in request.parts], deadline,
                                                 attempt, ready)
        await trio.lowlevel.checkpoint()
        self._metrics.count_out(request.parts, outcomes)
        return encode_multifetch_response(outcomes)


    # ----------------------------------------------------------------- METADATA, CREATE_TOPIC (§9.4, §9.5)

    def metadata(self, request: MetadataRequest) -> bytes:
        """The METADATA response: every topic this broker knows, or those asked."""
        admin = self.engine.admin
        brokers, topics = admin.metadata(request.topics)
        return encode_metadata_response(Metadata(admin.max_message_size, brokers, tuple(map(_topic_07, topics))))

    async def create_topic(self, request: CreateTopicRequest) -> bytes:
        """CREATE_TOPIC: the topic's logs created here (a replicated one: only its count checked)."""
        created = await self.engine.admin.create_topic(request.topic, request.partitions, dict(request.settings))
        return encode_create_topic_response(CreateTopicResult(ENGINE_TO_07[created.error], created.partitions))


def _topic_07(topic: TopicView) -> TopicMetadata:
    """The engine's view of a topic in METADATA's terms (§9.4)."""
    return TopicMetadata(topic.name, tuple(
        PartitionMetadata(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, ENGINE_TO_07[p.error])
        for p in topic.partitions), ENGINE_TO_07[topic.error])


def _failed(result: ProduceAckedResult, code: ErrorCode) -> ProduceAckedResult:
    return ProduceAckedResult(result.topic, result.partition, code, -1, -1)


# A message set the log refused (nothing appended): its code; any other bad set is INVALID_MESSAGE.
_BAD_SET_TO_07: dict[type, ErrorCode] = {MessageSizeTooLargeError: ErrorCode.MESSAGE_SIZE_TOO_LARGE}


def _append_error(outcome: EngineError | Exception) -> ErrorCode:
    """The code a part answers for an append the engine refused (§9.2)."""
    if isinstance(outcome, EngineError):
        return ENGINE_TO_07[outcome]
    return _BAD_SET_TO_07.get(type(outcome), ErrorCode.INVALID_MESSAGE)


def _short(topic: str, limit: int = 40) -> str:
    text = repr(topic)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(topic)} chars)"
