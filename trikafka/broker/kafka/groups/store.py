"""Writing records to ``__consumer_offsets`` and reading a partition back (docs/protocol.md §17.3).

A write is ``InternalTopic.write``'s: one uncompressed v2 batch appended with
acks -1, returning once the batch is committed (§12.6) or failed.  A read
walks the partition from its log start to its log end, batch by batch, in a worker thread (the segment reads and the
decoding stay off the event loop).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence, TypeVar

from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import CONTROL, TRANSACTIONAL, BatchHeader
from trikafka.kafka.group_records import RecordKey, RecordValue, decode_record, encode_key, encode_value
from trikafka.kafka.records import decode_batches
from trikafka.log.producer_state import ProducerStates
from trikafka.log.verification_guard import VerificationGuard

from ...engine.partition import ReadView
from ...seams import BrokerLog
from ..context import KafkaContext
from ..internal_topic import InternalTopic

LOAD_CHUNK_BYTES = 1 << 20  # bytes read per worker-thread call while loading
# key, value (None: tombstone), logical offset, and the producer id whose still-open transaction
# holds the record (None: the record counts now, §19.5.4)
LoadedRecord = tuple[RecordKey, RecordValue | None, int, int | None]
K = TypeVar("K")
V = TypeVar("V")


class GroupStore:
    """One broker's reads and writes of ``__consumer_offsets``."""

    def __init__(self, service: KafkaContext, topic: InternalTopic):
        self._service = service
        self._topic = topic

    async def write(self, index: int, records: Sequence[tuple[RecordKey, RecordValue | None]],
                    producer: tuple[int, int] | None = None,
                    guard: VerificationGuard | None = None) -> int | ErrorCode:
        """Append ``records`` as one batch to partition ``index`` and wait until it is committed: the
        logical offset of the first record, or the error the client is answered (§17.3); with
        ``producer`` (id, epoch) a transactional batch of that producer (§19.5.4), presenting its
        verification's ``guard`` (§19.5.7)."""
        return await self._topic.write(index, [(encode_key(key), encode_value(value)) for key, value in records],
                                       producer, guard)

    async def read(self, view: ReadView) -> list[LoadedRecord]:
        """Every record of a partition from its log start to its log end, in order (§17.3)."""
        # The leader's log end, not its high watermark: everything in the leader's log is what the
        # partition commits, and a new leader's high watermark may still lag its predecessor's (§12.6).
        return await read_records(self._service, view, decode_record)


def _aborted(producers: ProducerStates, header: BatchHeader) -> bool:
    """Whether a transactional batch belongs to an aborted transaction (§19.6)."""
    return any(a.producer_id == header.producer_id
               for a in producers.aborted_between(header.base_offset, header.base_offset + 1))


def _open_producer(producers: ProducerStates, header: BatchHeader) -> int | None:
    """The producer id when a transactional batch belongs to its still-open transaction (no marker
    yet), else None (§19.6)."""
    opened = producers.open_transactions.get(header.producer_id)
    return header.producer_id if opened is not None and header.base_offset >= opened else None


async def read_records(service: KafkaContext, view: ReadView,
                       decode: Callable[[bytes, bytes | None], tuple[K, V]]) -> list[tuple[K, V, int, int | None]]:
    """Every keyed record of an internal topic's partition from its log start to its log end, in
    order, each decoded by ``decode`` (§17.3, §19.5.6), read in a worker thread: (key, value,
    offset, producer id of the open transaction that holds it or None).  An aborted transaction's
    records are left out; a committed one's count where they lie; an open one's are returned with
    their producer, pending until its marker (§19.5.4)."""
    end = view.log.end_offset
    return await service.run_blocking(functools.partial(_read_all, view.log, end, decode))


def _read_all(log: BrokerLog, end: int,
              decode: Callable[[bytes, bytes | None], tuple[K, V]]) -> list[tuple[K, V, int, int | None]]:
    """Worker thread: read and decode the batches below byte ``end`` (records without a key carry
    no state)."""
    index = log.kafka_offsets
    position = index.position_of(index.start_offset)
    loaded: list[tuple[K, V, int, int | None]] = []
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
                    continue
                open_producer = None
                if header.attributes & TRANSACTIONAL:
                    if _aborted(log.producers, header):
                        continue
                    open_producer = _open_producer(log.producers, header)
                for record in records:
                    if record.key is None:
                        continue
                    key, value = decode(record.key, record.value)
                    loaded.append((key, value, record.offset, open_producer))
        position = spans[-1][1]
    return loaded
