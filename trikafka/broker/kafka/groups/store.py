"""Writing records to ``__consumer_offsets`` and reading a partition back (docs/protocol.md §17.3).

A write is one uncompressed v2 batch appended through the ``Partition`` seam
as a Produce with acks -1 appends it, and it returns once the batch is
committed (§12.6) or failed.  A read walks the partition from its log start
to its log end, batch by batch, in a worker thread (the segment reads and the
decoding stay off the event loop).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import CONTROL, TRANSACTIONAL, BatchError
from trikafka.kafka.group_records import (OFFSETS_TOPIC, RecordKey, RecordValue, decode_record, encode_key,
                                          encode_value)
from trikafka.kafka.records import Record, build_batch, decode_batches
from trikafka.kafka.txn_records import decode_marker_key
from trikafka.wire.errors import ErrorCode as EngineError

from ...partition import ReadView, Refused
from ...seams import BrokerLog, KafkaAppend
from ..context import KafkaContext

logger = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 30.0  # how long a write waits for the ISR before answering REQUEST_TIMED_OUT's mapping
LOAD_CHUNK_BYTES = 1 << 20  # bytes read per worker-thread call while loading
ACKS_ALL = -1

# What a failed write answers the client (§17.3), as Kafka maps an append error for groups.
_WRITE_ERRORS: dict[EngineError, ErrorCode] = {
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_coordinator,
    EngineError.FENCED_LEADER_EPOCH: ErrorCode.not_coordinator,
    EngineError.MESSAGE_SIZE_TOO_LARGE: ErrorCode.invalid_commit_offset_size,
}

NO_PRODUCER = -1


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """A record read back: key, value (None: tombstone), logical offset, and the producer id of the
    transactional batch that holds it (-1: a plain record, applied as read)."""

    key: RecordKey
    value: RecordValue | None
    log_offset: int
    producer_id: int = NO_PRODUCER


@dataclass(frozen=True, slots=True)
class LoadedMarker:
    """A transaction marker read back (§19.5.5): the producer whose pending offsets it ends."""

    producer_id: int
    commit: bool
    log_offset: int


Loaded = LoadedRecord | LoadedMarker


def write_error(code: EngineError) -> ErrorCode:
    """The group error a failed write of ``__consumer_offsets`` answers (§17.3)."""
    return _WRITE_ERRORS.get(code, ErrorCode.coordinator_not_available)


class GroupStore:
    """One broker's reads and writes of ``__consumer_offsets``."""

    def __init__(self, service: KafkaContext):
        self._service = service

    async def write(self, index: int, records: Sequence[tuple[RecordKey, RecordValue | None]]) -> int | ErrorCode:
        """Append ``records`` as one batch to partition ``index`` and wait until it is committed: the
        logical offset of the first record, or the error the client is answered (§17.3)."""
        service = self._service
        now_ms = service.clock_ms()
        batch = build_batch([Record(i, now_ms, encode_key(key), encode_value(value))
                             for i, (key, value) in enumerate(records)])
        target = await service.partition_for(OFFSETS_TOPIC, index, write=True)
        if isinstance(target, ErrorCode):
            return ErrorCode.coordinator_not_available
        try:
            result = await target.append(bytearray(batch), ACKS_ALL, kafka=KafkaAppend(None))
        except Refused as exc:
            return write_error(exc.error)
        except BatchError as exc:
            logger.warning("%s-%d refused the coordinator's batch: %s", OFFSETS_TOPIC, index, exc)
            return ErrorCode.invalid_commit_offset_size if exc.kind == BatchError.TOO_LARGE \
                else ErrorCode.unknown_server_error
        service.appended(OFFSETS_TOPIC, index)
        wait = target.ack_wait(result.next_offset)
        (status,) = await service.handler.wait_acks([wait], trio.current_time() + WRITE_TIMEOUT_S)
        if status != EngineError.NO_ERROR:
            return write_error(status)
        return result.logical_offset

    async def read(self, view: ReadView) -> list[Loaded]:
        """Every record of a partition from its log start to its log end, in order (§17.3)."""
        # The leader's log end, not its high watermark: everything in the leader's log is what the
        # partition commits, and a new leader's high watermark may still lag its predecessor's (§12.6).
        end = view.log.end_offset
        return await self._service.run_blocking(functools.partial(_read_all, view.log, end))


def _read_all(log: BrokerLog, end: int) -> list[Loaded]:
    """Worker thread: read and decode the batches below byte ``end`` (records without a key carry
    no group state; a control batch's record is a transaction marker, §19.5.5)."""
    index = log.kafka_offsets
    position = index.position_of(index.start_offset)
    loaded: list[Loaded] = []
    while position is not None and position < end:
        # The retained batches only: the cleaner's padding (§16.6.1) holds no records.
        spans = index.retained_spans(position, LOAD_CHUNK_BYTES, end)
        if not spans:
            break
        for start, stop in spans:
            region = log.read(start, stop - start, end=end)
            data = b"" if region is None else region.read()
            for header, records in decode_batches(data):
                if header.attributes & CONTROL:
                    loaded.extend(LoadedMarker(header.producer_id, decode_marker_key(record.key), record.offset)
                                  for record in records)
                    continue
                producer_id = header.producer_id if header.attributes & TRANSACTIONAL else NO_PRODUCER
                for record in records:
                    if record.key is None:
                        continue
                    key, value = decode_record(record.key, record.value)
                    loaded.append(LoadedRecord(key, value, record.offset, producer_id))
        position = spans[-1][1]
    return loaded
