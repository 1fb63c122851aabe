"""ListOffsets and OffsetForLeaderEpoch (docs/protocol.md §16.4): logical offsets from the index.

Both are answered from memory: the log's batch index (§16.6) and, for leader
epochs, the partition's epoch history (§12.3), whose byte offsets the index
turns into logical ones; a lookup by time then reads the one batch the index
found, in a worker thread, for its first record at or after the time.
"""

from __future__ import annotations

import functools
from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.kafka.errors import CorruptRecords
from trikafka.kafka.records import decode_batches
from trikafka.log.errors import OffsetOutOfRangeError

from ..seams import BrokerLog
from .entities import NO_THROTTLE, Reply
from .needs import PartitionReads


EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # v7 (KIP-734)
READ_COMMITTED = 1  # isolation_level (§19.7)


async def list_offsets(service: PartitionReads, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            error, offset, timestamp, epoch = await _list_one(service, topic.name, part.partition_index,
                                                              part.timestamp,
                                                              getattr(part, "current_leader_epoch", -1),
                                                              getattr(body, "isolation_level", 0) == READ_COMMITTED)
            partitions.append(reply.nested("ListOffsetsPartitionResponse", partition_index=part.partition_index,
                                           error_code=error, old_style_offsets=(offset,) if offset >= 0 else (),
                                           timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(reply.nested("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _list_one(service: PartitionReads, topic: str, index: int, timestamp: int,
                    current_epoch: int, committed: bool) -> tuple[ErrorCode, int, int, int]:
    """One partition's answer; under read_committed (``committed``) nothing at or past the LSO (§19.7)."""
    if (denied := service.authorizer.denied(KafkaApi.LIST_OFFSETS, topic)) is not None:
        return denied, -1, -1, -1
    view = await service.read_view(topic, index, current_epoch)
    if isinstance(view, ErrorCode):
        return view, -1, -1, -1
    index_ = view.log.kafka_offsets
    hw = index_.offset_at(view.end)
    if committed:
        hw = view.log.producers.last_stable_offset(hw)
    epoch = view.leader_epoch
    if timestamp == EARLIEST:
        return ErrorCode.none, index_.start_offset, -1, epoch
    if timestamp == LATEST:
        return ErrorCode.none, hw, -1, epoch
    if timestamp == MAX_TIMESTAMP:
        offset, found_ms = index_.max_timestamp()
        if offset >= hw:
            return ErrorCode.none, -1, -1, epoch
        return ErrorCode.none, offset, found_ms, epoch
    batch = index_.batch_at_time(timestamp)
    if batch is None or batch[0] >= hw:
        return ErrorCode.none, -1, -1, epoch
    base_offset, max_timestamp_ms, start, end = batch
    lease = view.log.passes.take()  # the read off the loop is a pass a deletion waits for (§16.4)
    if lease is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, epoch  # being deleted
    with lease:
        data = await service.run_blocking(functools.partial(_read_bytes, view.log, start, end))
    # A batch gone meanwhile (retention) or unreadable answers at its own granularity.
    offset, found_ms = _first_record_at_or_after(data, timestamp) or (base_offset, max_timestamp_ms)
    if offset >= hw:
        return ErrorCode.none, -1, -1, epoch
    return ErrorCode.none, offset, found_ms, epoch


def _read_bytes(log: BrokerLog, start: int, end: int) -> bytes:
    """The log's bytes ``[start, end)``, one segment's whole batches, or none once retention removed
    them (blocking: a worker thread's)."""
    try:
        region = log.read(start, end - start, end=end)
    except OffsetOutOfRangeError:
        return b""
    return b"" if region is None else region.read()


def _first_record_at_or_after(data: bytes, time_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record in ``data``'s batches stamped ``>= time_ms`` (§16.4)."""
    try:
        for _header, records in decode_batches(data, check_crc=False):
            for record in records:
                if record.timestamp_ms >= time_ms:
                    return record.offset, record.timestamp_ms
    except CorruptRecords:
        return None
    return None


async def offset_for_leader_epoch(service: PartitionReads, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            error, epoch, end = await _epoch_end(service, topic.topic, part.partition, part.leader_epoch,
                                                 getattr(part, "current_leader_epoch", -1))
            partitions.append(reply.nested("EpochEndOffset", error_code=error, partition=part.partition,
                                           leader_epoch=epoch, end_offset=end))
        topics.append(reply.nested("OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(partitions)))
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _epoch_end(service: PartitionReads, topic: str, index: int, epoch: int,
                     current_epoch: int) -> tuple[ErrorCode, int, int]:
    """(error, the largest epoch <= ``epoch``, its end offset) as KIP-101 and KIP-320 define them."""
    if (denied := service.authorizer.denied(KafkaApi.OFFSET_FOR_LEADER_EPOCH, topic)) is not None:
        return denied, -1, -1
    view = await service.read_view(topic, index, current_epoch)
    if isinstance(view, ErrorCode):
        return view, -1, -1
    index_ = view.log.kafka_offsets
    history = view.epochs
    if history is None:  # unreplicated: epoch 0 from offset 0 (§16.4)
        if epoch < 0:
            return ErrorCode.none, -1, -1
        return ErrorCode.none, 0, index_.next_offset
    found_epoch, byte_end = history.end_offset_for(epoch, view.log.end_offset)
    if found_epoch < 0:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, found_epoch, index_.offset_at(byte_end)
