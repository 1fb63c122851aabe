"""Fetch (docs/protocol.md §16.4): whole batches from the one holding the fetch offset, by sendfile.

A partition's answer starts at the batch that holds the fetch offset (or the
first after it) and ends at a batch boundary within the partition's budget and
what the request's budget leaves after the partitions before it (KIP-74): only
the first partition with records gets at least one batch, however large; on a compacted topic the padding runs between retained batches
are left out (docs/protocol.md §16.6.1), the records then being several file
regions back to back.  The request waits, woken by appends and high-watermark advances
(no polling), until ``min_bytes`` are available or ``max_wait_ms`` passes;
an error in any partition answers at once.  A read_committed fetch stops at
the last stable offset and lists the aborted transactions its batches
overlap (§19.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sized

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.fetch import FetchPartition, encode_fetch_response
from trikafka.kafka.framing import Request
from trikafka.log.errors import OffsetOutOfRangeError
from trikafka.log.kafka_offsets import KafkaOffsets
from trikafka.wire.responses import Chunk, ChunkSequence

from ..quotas import REQUEST_CHARGE
from .needs import PartitionReads
from .offsets import READ_COMMITTED

# A partition with nothing to send answers an empty records field, never a null one, as Kafka
# does: librdkafka refuses a null (size -1) records field in Fetch v4-v11.
NO_RECORDS = b""


@dataclass(slots=True)
class _Asked:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int
    committed: bool  # isolation_level 1, read_committed (§19.7)


async def fetch(service: PartitionReads, request: Request) -> list[Chunk]:
    body: Any = request.body  # Any: this api's request class at the request's version
    committed = body.isolation_level == READ_COMMITTED
    asked = [_Asked(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                    getattr(p, "current_leader_epoch", -1), committed)
             for t in body.topics for p in t.partitions]
    deadline = trio.current_time() + max(body.max_wait.total_seconds(), 0.0)
    charge = REQUEST_CHARGE.get()
    # Under consumer_byte_rate, no more than a rate with nothing recorded takes unthrottled (§20.2):
    # a larger answer would be throttled, hence emptied, every time.
    quota_bytes = charge.fetch_limit_bytes()
    max_bytes = body.max_bytes if quota_bytes is None else min(body.max_bytes, quota_bytes)
    min_bytes = min(body.min_bytes, max_bytes)

    async def attempt() -> list[FetchPartition]:
        return await _answer_all(service, asked, max_bytes)

    def ready(answers: list[FetchPartition]) -> bool:
        return (sum(len(a.records) for a in answers if a.records is not None) >= min_bytes
                or any(a.error_code != ErrorCode.none for a in answers))

    answers = await service.engine.waiters.long_poll([(a.topic, a.partition) for a in asked], deadline,
                                                     attempt, ready)
    # consumer_byte_rate (§20.2): the answer's records, measured before it is sent (Kafka counts the
    # whole answer; the records are all of it but a few bytes per partition). Throttled (that quota or
    # request_percentage), the answer is empty: no partitions, as Kafka's (KIP-219).
    throttle_ms = charge.fetched(sum(len(a.records) for a in answers if a.records is not None))
    if throttle_ms:
        answers = []
    for a, answer in zip(asked, answers):
        if answer.records is not None:
            service.engine.metrics.topic(a.topic).bytes_out += len(answer.records)
    chunks: list[Chunk] = []
    for chunk in encode_fetch_response(request.api_version, request.correlation_id, throttle_ms, ErrorCode.none, 0,
                                       answers):
        # Records are a file region, or several chunks back to back; the rest is bytes.
        chunks.extend(chunk.chunks if isinstance(chunk, ChunkSequence) else (chunk,))  # type: ignore[arg-type]
    return chunks


async def _answer_all(service: PartitionReads, asked: list[_Asked], max_bytes: int) -> list[FetchPartition]:
    """Every partition's answer in request order within the request's ``max_bytes`` (KIP-74, §16.4): each
    gets what the ones before it left, and only the first that has records may exceed it by its first batch."""
    answers = []
    left, first = max_bytes, True
    for a in asked:
        answer = await _answer(service, a, left, first)
        size = len(answer.records) if answer.records is not None else 0
        first = first and not size
        left = max(left - size, 0)
        answers.append(answer)
    return answers


async def _answer(service: PartitionReads, asked: _Asked, request_left: int, first: bool) -> FetchPartition:
    """One partition's answer within ``partition_max_bytes`` and ``request_left`` bytes; its first batch
    whole beyond both when ``first`` (no partition before it had records)."""
    def failed(code: ErrorCode, hw: int = -1, start: int = -1) -> FetchPartition:
        return FetchPartition(asked.topic, asked.partition, code, hw, hw, start, NO_RECORDS)

    if (denied := service.authorizer.denied(KafkaApi.FETCH, asked.topic)) is not None:
        return failed(denied)
    view = await service.read_view(asked.topic, asked.partition, asked.current_leader_epoch)
    if isinstance(view, ErrorCode):
        return failed(view)
    index = view.log.kafka_offsets
    hw = index.offset_at(view.end)
    start = index.start_offset
    producers = view.log.producers
    stable = producers.last_stable_offset(hw)
    # Past the high watermark but not past the log end: a new leader's high watermark lags what its
    # predecessor committed (§16.4, §12.6); the answer below is empty, and the consumer waits.
    if not start <= asked.offset <= max(hw, index.next_offset):
        return failed(ErrorCode.offset_out_of_range, hw, start)
    visible, end = (stable, _position(index, stable, view.end)) if asked.committed else (hw, view.end)

    def answer(records: Sized, aborted: tuple[tuple[int, int], ...] = ()) -> FetchPartition:
        return FetchPartition(asked.topic, asked.partition, ErrorCode.none, hw, stable, start, records, aborted)

    limit = min(asked.max_bytes, request_left)
    if asked.offset >= visible or asked.max_bytes <= 0 or (limit <= 0 and not first):
        return answer(NO_RECORDS)
    position = index.position_of(asked.offset)
    if position is None or position >= end:
        return answer(NO_RECORDS)
    spans = index.retained_spans(position, limit, end, at_least_one=first)
    chunks: list[Chunk] = []
    try:
        for a, b in spans:
            region = view.log.read(a, b - a, end=end)
            if region is not None:
                chunks.extend(region.chunks if isinstance(region, ChunkSequence) else (region,))
    except OffsetOutOfRangeError:  # retention removed the segment meanwhile
        return failed(ErrorCode.offset_out_of_range, hw, start)
    records: Sized = NO_RECORDS if not chunks else chunks[0] if len(chunks) == 1 else ChunkSequence(tuple(chunks))
    aborted: tuple[tuple[int, int], ...] = ()
    if asked.committed and spans:
        aborted = tuple((a.producer_id, a.first_offset) for a in
                        producers.aborted_between(asked.offset, index.offset_at(spans[-1][1])))
    return answer(records, aborted)


def _position(index: KafkaOffsets, offset: int, end: int) -> int:
    """The byte position of the batch at ``offset`` (a batch's base offset), at most ``end``."""
    found = index.position_of(offset)
    return end if found is None else min(found, end)
