"""Produce (docs/protocol.md §16.4, §16.6): v2 batches numbered by the leader, acks 0, 1, -1.

Every partition of a request is appended first, in order; then, for acks -1,
one wait covers them all (the ISR's acknowledgement, §12.6), bounded by the
request's timeout.  Acks 0 is never answered.  A compacted topic refuses a
record without a key (``INVALID_RECORD``, §16.6.1), as Kafka does.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Awaitable, Callable

import trio
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.batch import HEADER_BYTES, read_header
from trikafka.kafka.errors import CorruptRecords
from trikafka.kafka.framing import Request, encode_response
from trikafka.kafka.group_records import INTERNAL_TOPICS
from trikafka.kafka.records import decode_batches
from trikafka.wire.responses import Chunk

from ..engine.errors import EngineError
from ..engine.engine import ACKS_ALL, AppendOutcome, Appending, PartitionWrite
from ..engine.partition import KafkaAppend
from ..quotas import REQUEST_CHARGE
from ..seams import AppendResult
from .entities import Reply, kio_time
from .errors import kafka_error, refused_set_error
from .needs import PartitionWrites
from .transactions.verification import Verification, retriable_for, verify_partition


logger = logging.getLogger(__name__)

ACKS = (0, 1, -1)
LOG_APPEND_TIME = "LogAppendTime"
RECORD_ERRORS_VERSION = 8  # KIP-467: a part's record_errors and error_message


# The rest of an acks -1 Produce once its batches are appended: wait for the ISR, then answer.
Deferred = Callable[[], Awaitable[list[Chunk]]]


class Acknowledged:
    """An acks -1 Produce's answer once the ISR acknowledged it (a ``Deferred``); ``when_ready``
    lets the connection leave its sender asleep until the answer is ready (§16.2)."""

    __slots__ = ("_appending", "_answer")

    def __init__(self, appending: Appending, answer: Callable[[list[AppendOutcome]], list[Chunk]]):
        self._appending, self._answer = appending, answer

    async def __call__(self) -> list[Chunk]:
        return self._answer(await self._appending.acknowledged())

    def when_ready(self, callback: Callable[[], None]) -> float | None:
        """Call ``callback()`` once awaiting this answer no longer waits, unless its deadline (returned,
        on Trio's clock) passes first: awaiting it then answers REQUEST_TIMED_OUT.  ``cancel`` drops it.
        None, calling nothing, when it is ready now."""
        return self._appending.deadline if self._appending.when_acknowledged(callback) else None

    def cancel(self) -> None:
        self._appending.cancel_when_acknowledged()


async def produce(service: PartitionWrites, request: Request) -> list[Chunk] | None | Deferred:
    """Append every partition's batches; the answer, or (acks -1) what waits for it (§16.4).

    An acks -1 request returns as soon as its batches are appended, so the
    connection can append the requests that follow before the ISR acknowledges
    this one: one follower round and one high-watermark advance then cover them
    all, and the answers still leave in request order (§16.2).
    """
    body: Any = request.body  # Any: this api's request class at the request's version
    reply = Reply(request.api_key, request.api_version)
    throttle_ms = REQUEST_CHARGE.get().produced()  # producer_byte_rate (§20.2)
    acks = body.acks
    deadline = trio.current_time() + max(body.timeout.total_seconds(), 0.0)
    # (topic, partition index, error, base offset, log start, append time ms, record errors, error message)
    results: list[list[Any]] = []
    writes: list[tuple[int, PartitionWrite]] = []  # (index in results, the partition's write)
    for topic_data in body.topic_data:
        topic = topic_data.name
        for part in topic_data.partition_data:
            row: list[Any] = [topic, part.index, ErrorCode.none, -1, -1, -1, (), None]
            results.append(row)
            if acks not in ACKS:
                row[2] = ErrorCode.invalid_required_acks
                continue
            if (denied := service.authorizer.denied(KafkaApi.PRODUCE, topic)) is not None:
                row[2] = denied
                continue
            verified: Verification | None = None
            if body.transactional_id is not None:
                verified = await _verify(service, body.transactional_id, topic, part.index, part.records)
                row[2] = verified.error
                if row[2] != ErrorCode.none:
                    continue
            write = await _write(service, topic, part.index, part.records, row, verified)
            if write is not None:
                writes.append((len(results) - 1, write))
    appending = await service.engine.append_pipelined([w for _, w in writes], acks, deadline)
    for (i, write), outcome in zip(writes, appending.outcomes):
        _appended(service, results[i], write, outcome)
    if acks == 0:
        return None
    if acks != ACKS_ALL or not writes:
        return _answer(request, reply, results, throttle_ms)

    def answer(outcomes: list[AppendOutcome]) -> list[Chunk]:
        for (i, _), outcome in zip(writes, outcomes):
            if isinstance(outcome, EngineError):
                results[i][2] = kafka_error(outcome)
                results[i][3] = -1
        return _answer(request, reply, results, throttle_ms)

    # Acknowledged at the append (nothing to wait for): answered now, as acks 1 is (§12.6, §16.2).
    if (outcomes := appending.acknowledged_now()) is not None:
        return answer(outcomes)

    return Acknowledged(appending, answer)


def _answer(request: Request, reply: Reply, results: list[list[Any]], throttle_ms: int) -> list[Chunk]:
    responses = []
    if request.api_version < RECORD_ERRORS_VERSION:  # the part's error code alone says it
        results = [row[:6] + [(), None] for row in results]
    for topic, rows in _by_topic(results):
        partitions = tuple(reply.nested("PartitionProduceResponse", index=index, error_code=error, base_offset=base,
                                        log_append_time_ms=append_ms, log_append_time=kio_time(append_ms),
                                        log_start_offset=start, error_message=message, record_errors=tuple(
                                            reply.nested("BatchIndexAndErrorMessage", batch_index=i32(i),
                                                         batch_index_error_message=why) for i, why in bad))
                           for _, index, error, base, start, append_ms, bad, message in rows)
        responses.append(reply.nested("TopicProduceResponse", name=topic, partition_responses=partitions))
    return [encode_response(request, reply.response(responses=tuple(responses),
                                                    throttle_time=datetime.timedelta(milliseconds=throttle_ms)))]


async def _verify(service: PartitionWrites, transactional_id: str, topic: str, index: int,
                  records: bytes | None) -> Verification:
    """A transactional Produce's partition, checked with its coordinator before anything is appended
    (KIP-890, §19.5.7); TRANSACTIONAL_ID_AUTHORIZATION_FAILED while no coordinator serves (§19.1)."""
    if service.verifier is None:
        return Verification(ErrorCode.transactional_id_authorization_failed, None)
    if not records or len(records) < HEADER_BYTES:
        return Verification(ErrorCode.corrupt_message, None)
    header = read_header(records)
    verified = await verify_partition(service, service.verifier, transactional_id, header.producer_id,
                                      header.producer_epoch, topic, index)
    return verified._replace(error=retriable_for(KafkaApi.PRODUCE, verified.error))


async def _write(service: PartitionWrites, topic: str, index: int, records: bytes | None,
                 row: list[Any], verified: Verification | None = None) -> PartitionWrite | None:
    """One partition's batches checked: the write to append, or None with ``row``'s error set.
    ``verified``: a transactional Produce's verification, whose guard the append presents (§19.5.7)."""
    if topic in INTERNAL_TOPICS:  # only the broker writes them (§17.1)
        row[2] = ErrorCode.invalid_topic_exception
        return None
    target = await service.partition_for(topic, index, write=True)
    if isinstance(target, ErrorCode):
        row[2] = target
        return None
    if not records:
        row[2] = ErrorCode.corrupt_message
        return None
    if service.compacts(topic) and (keyless := _null_key_indexes(records)):
        logger.info("produce to %s-%d refused: a record without a key on a compacted topic", topic, index)
        why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}."
        row[2], row[6], row[7] = ErrorCode.invalid_record, tuple((i, why) for i in keyless), why
        return None
    append_time_ms = service.clock_ms() if service.timestamp_type(topic) == LOG_APPEND_TIME else None
    row[5] = -1 if append_time_ms is None else append_time_ms
    kafka = KafkaAppend(append_time_ms, transactional=verified is not None,
                        guard=None if verified is None else verified.guard)
    return PartitionWrite(target, bytearray(records), kafka)


def _appended(service: PartitionWrites, row: list[Any], write: PartitionWrite, outcome: AppendOutcome) -> None:
    """Fill ``row`` with one partition's append: its offsets, or its error."""
    if isinstance(outcome, AppendResult):
        row[3] = outcome.logical_offset
        row[4] = service.log_start_offset(write.partition)
        return
    row[5] = -1
    if isinstance(outcome, EngineError):
        row[2] = kafka_error(outcome)
        return
    logger.info("produce to %s-%d refused: %s", row[0], row[1], outcome)
    row[2] = refused_set_error(outcome)


def _null_key_indexes(records: bytes) -> list[int]:
    """The indexes (among the records, in order) of the records of ``records`` with a null key, as
    KIP-467's ``batch_index``; none for bytes that do not decode (the append's own checks answer those)."""
    try:
        keys = [r.key for _, batch in decode_batches(records, check_crc=False) for r in batch]
    except CorruptRecords:
        return []
    return [i for i, key in enumerate(keys) if key is None]


def _by_topic(results: list[list[Any]]) -> list[tuple[str, list[list[Any]]]]:
    grouped: dict[str, list[list[Any]]] = {}
    for row in results:
        grouped.setdefault(row[0], []).append(row)
    return list(grouped.items())
