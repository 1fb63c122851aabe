"""A topic the broker keeps for itself (``__consumer_offsets`` §17.1, ``__transaction_state``
§19.5.1): its settings, its creation on first need, a key's partition and coordinator, the
coordinator's committed writes to it (§17.3) and its reads of a partition back (§17.3, §19.5.6).

This is a coordinator's seam to the broker: a coordinator is given its ``InternalTopic`` and
reaches partitions through nothing else.  A read walks the partition from its log start to its
log end, batch by batch, in a worker thread (the segment reads and the decoding stay off the
event loop).

The two topics differ only in their name and their settings (``InternalTopicSpec``); everything
else here serves both.
"""

from __future__ import annotations

import enum
import functools
import logging
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, TypeVar

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import CONTROL, TRANSACTIONAL, BatchError
from trikafka.kafka.records import Record, build_batch, decode_batches
from trikafka.log.producer_state import ProducerStates, TxnSnapshot
from trikafka.log.verification_guard import VerificationGuard
from trikafka.util.java_hash import java_string_hash
from trikafka.wire.metadata import BrokerAddress

from ..config import BrokerConfig
from ..engine.engine import ACKS_ALL, Engine, PartitionWrite
from ..engine.errors import EngineError
from ..engine.partition import Partition, ReadView, Refused
from ..seams import AppendResult, BrokerLog, KafkaAppend, RunBlocking
from ..topic_settings import CLEANUP_POLICY, SEGMENT_BYTES
from .topics import MIN_INSYNC_REPLICAS, TopicError

logger = logging.getLogger(__name__)

# Each key's last record is its state, so the topic compacts (§16.6.1).
CLEANUP = "compact"
MIN_INSYNC_AT_FULL_REPLICATION = 2  # min.insync.replicas when the factor is 3 or more (§17.1)
FULL_REPLICATION = 3
LOAD_CHUNK_BYTES = 1 << 20  # bytes read per worker-thread call while loading
WRITE_TIMEOUT_S = 30.0  # how long a write waits for the ISR before answering REQUEST_TIMED_OUT's mapping

# What a failed write answers the client (§17.3), as Kafka maps a coordinator's append error.
_WRITE_ERRORS: dict[EngineError, ErrorCode] = {
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_coordinator,
}


# What a refused batch answers: a too-large one as Kafka's coordinator does, a TxnOffsetCommit of a
# fenced producer epoch as its Produce would.
_BATCH_ERRORS: dict[str | None, ErrorCode] = {
    BatchError.TOO_LARGE: ErrorCode.invalid_commit_offset_size,
    BatchError.INVALID_PRODUCER_EPOCH: ErrorCode.invalid_producer_epoch,
    BatchError.TXN_STATE: ErrorCode.invalid_txn_state,
}


def key_partition(key: str, partitions: int) -> int:
    """The partition of a group id or transactional id: Kafka's ``abs(hashCode) % n`` (§17.1)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


def write_error(code: EngineError) -> ErrorCode:
    """The error a failed coordinator write answers the client (§17.3)."""
    return _WRITE_ERRORS.get(code, ErrorCode.coordinator_not_available)


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """What an internal topic is created with: its name, partitions, the replication factor asked
    for (capped at the live brokers) and its segment size."""

    name: str
    partitions: int
    replication_factor: int
    segment_bytes: int

    def settings(self, replication_factor: int) -> dict[str, str]:
        """The topic settings at the factor it gets (§17.1, §19.5.1)."""
        settings = {CLEANUP_POLICY: CLEANUP, SEGMENT_BYTES: str(self.segment_bytes)}
        if replication_factor >= FULL_REPLICATION:
            settings[MIN_INSYNC_REPLICAS] = str(MIN_INSYNC_AT_FULL_REPLICATION)
        return settings


K = TypeVar("K")
V = TypeVar("V")


class InternalTopicCreation(Protocol):
    """How an internal topic is created (``topics.TopicService``, §17.1, §19.5.1)."""

    async def create_internal(self, topic: str, partitions: int, replication_factor: int,
                              settings: dict[str, str]) -> None: ...


class InternalTopicHost(Protocol):
    """What an internal topic needs of its broker (``KafkaService``): the engine its partitions
    live in, the topic creation and the Kafka brokers that decide its replication, a way to run
    its reads off the loop, the clock its records are stamped with."""

    engine: Engine
    config: BrokerConfig
    broker_id: int
    clock_ms: Callable[[], int]
    run_blocking: RunBlocking

    @property
    def topics(self) -> InternalTopicCreation: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...

    async def partition_for(self, topic: str, index: int, *, write: bool) -> Partition | ErrorCode: ...


class InternalTopic:
    """Creates an internal topic on first need, says who coordinates a key, appends a coordinator's
    records and reads a partition back."""

    def __init__(self, service: InternalTopicHost, spec: InternalTopicSpec):
        self._service = service
        self.spec = spec
        self.name = spec.name
        self._creating = trio.Lock()

    def partition_count(self) -> int | None:
        """The topic's partition count, None while it does not exist here or this broker is creating it
        (its partitions' logs are not all made yet)."""
        service = self._service
        if self._creating.locked() or service.engine.directory.topic_format(self.name) is None:
            return None
        return service.engine.directory.partitions_if_valid(self.name)

    async def ensure(self) -> int | None:
        """The partition count, creating the topic if no broker has (None: not available yet)."""
        count = self.partition_count()
        if count is not None:
            return count
        service = self._service
        spec = self.spec
        async with self._creating:
            if service.engine.directory.topic_format(self.name) is None:
                live = len(service.kafka_brokers()) if service.config.enable_zookeeper else 1
                factor = max(1, min(spec.replication_factor, live))
                settings = spec.settings(factor)
                try:
                    await service.topics.create_internal(self.name, spec.partitions, factor, settings)
                except TopicError as exc:
                    if exc.code != ErrorCode.topic_already_exists:
                        logger.warning("could not create %s: %s", self.name, exc)
                        return None
                else:
                    logger.info("created %s: %d partitions, replication factor %d, %s", self.name,
                                spec.partitions, factor, ", ".join(f"{k}={v}" for k, v in sorted(settings.items())))
        return self.partition_count()

    def coordinator(self, index: int) -> BrokerAddress | None:
        """The Kafka address of the leader of partition ``index``, None while it has none."""
        service = self._service
        leader = service.engine.admin.partition_leader(self.name, index, service.broker_id)
        return next((b for b in service.kafka_brokers() if b.broker_id == leader), None)

    async def coordinator_of(self, key: str) -> BrokerAddress | ErrorCode:
        """The Kafka address of ``key``'s coordinator, creating the topic on first need;
        COORDINATOR_NOT_AVAILABLE while there is none (§17.1, §19.5.1)."""
        count = await self.ensure()
        address = None if count is None else self.coordinator(key_partition(key, count))
        return ErrorCode.coordinator_not_available if address is None else address

    def read_view(self, index: int) -> ReadView:
        """Partition ``index`` as its leader reads it; ``Refused`` where this broker does not lead it."""
        return self._service.engine.directory.partition(self.name, index).read_view()

    def transaction_standing(self, index: int, producer_id: int, offset: int) -> TxnStanding:
        """Where ``producer_id``'s transactional batch at logical ``offset`` of partition ``index`` stands
        in this leader's log now (§19.5.4); ``Refused`` where this broker does not lead it."""
        return transaction_standing(self.read_view(index).log.producers, producer_id, offset)

    async def read(self, view: ReadView,
                   decode: Callable[[bytes, bytes | None], tuple[K, V]]) -> list[tuple[K, V, int, int | None]]:
        """Every keyed record of the partition ``view`` shows, decoded (``read_records``)."""
        # The leader's log end, not its high watermark: everything in the leader's log is what the
        # partition commits, and a new leader's high watermark may still lag its predecessor's (§12.6).
        return await read_records(self._service.run_blocking, view, decode)

    async def write(self, index: int, records: Sequence[tuple[bytes, bytes | None]],
                    producer: tuple[int, int] | None = None,
                    guard: VerificationGuard | None = None, acks: int = ACKS_ALL) -> int | ErrorCode:
        """Append ``records`` (key and value bytes) as one uncompressed batch to partition ``index``
        and wait until it is committed (acks -1): the logical offset of the first record, or the
        error the client is answered (§17.3).  ``producer`` (id, epoch): a transactional batch of
        that producer, numbered after its batches in the partition, which fences an old epoch
        (TxnOffsetCommit, §19.5.4), presenting its verification's ``guard`` (§19.5.7).  ``acks`` 1:
        return once it is in the leader's log, no flush asked for (a Complete*, §19.5.3)."""
        service = self._service
        now_ms = service.clock_ms()
        target = await service.partition_for(self.name, index, write=True)
        if isinstance(target, ErrorCode):
            return ErrorCode.coordinator_not_available
        listed = [Record(i, now_ms, key, value) for i, (key, value) in enumerate(records)]
        try:
            if producer is None:
                batch = build_batch(listed)
            else:
                producer_id, epoch = producer
                sequence = target.read_view().log.producers.next_base_sequence(producer_id, epoch)
                batch = build_batch(listed, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                    control_attributes=TRANSACTIONAL)
        except Refused as exc:
            return write_error(exc.error)
        kafka = KafkaAppend(None, transactional=producer is not None, guard=guard)
        write = PartitionWrite(target, bytearray(batch), kafka, client=False)
        (result,) = await service.engine.append([write], acks, trio.current_time() + WRITE_TIMEOUT_S)
        if isinstance(result, EngineError):
            return write_error(result)
        if not isinstance(result, AppendResult):
            logger.warning("%s-%d refused the coordinator's batch: %s", self.name, index, result)
            kind = result.kind if isinstance(result, BatchError) else None
            return _BATCH_ERRORS.get(kind, ErrorCode.unknown_server_error)
        return result.logical_offset


class TxnStanding(enum.Enum):
    """Where a transactional batch stands in its partition's log (§19.6)."""

    OPEN = "open"  # no marker of its producer behind it yet
    COMMITTED = "committed"
    ABORTED = "aborted"


def transaction_standing(producers: ProducerStates | TxnSnapshot, producer_id: int, offset: int) -> TxnStanding:
    """Where ``producer_id``'s transactional batch at logical ``offset`` stands, by the log's producer
    state ``producers`` or a snapshot of its transactions (§19.6)."""
    if any(a.producer_id == producer_id for a in producers.aborted_between(offset, offset + 1)):
        return TxnStanding.ABORTED
    opened = producers.open_transactions.get(producer_id)
    return TxnStanding.OPEN if opened is not None and offset >= opened else TxnStanding.COMMITTED


async def read_records(run_blocking: RunBlocking, view: ReadView,
                       decode: Callable[[bytes, bytes | None], tuple[K, V]]) -> list[tuple[K, V, int, int | None]]:
    """Every keyed record of an internal topic's partition from its log start to its log end, in
    order, each decoded by ``decode`` (§17.3, §19.5.6), read in a worker thread: (key, value,
    offset, producer id of the open transaction that holds it or None).  An aborted transaction's
    records are left out; a committed one's count where they lie; an open one's are returned with
    their producer, pending until its marker (§19.5.4)."""
    # The end and the transactions taken together on the loop: the loop appends (markers too) while
    # the thread reads, and a batch is judged by the transactions as they stood at ``end`` (§19.5.4).
    end = view.log.end_offset
    transactions = view.log.producers.snapshot()
    return await run_blocking(functools.partial(_read_all, view.log, end, transactions, decode))


def _read_all(log: BrokerLog, end: int, transactions: TxnSnapshot,
              decode: Callable[[bytes, bytes | None], tuple[K, V]]) -> list[tuple[K, V, int, int | None]]:
    """Worker thread: read and decode the batches below byte ``end``, judged by ``transactions``
    (records without a key carry no state)."""
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
                    standing = transaction_standing(transactions, header.producer_id, header.base_offset)
                    if standing is TxnStanding.ABORTED:
                        continue
                    open_producer = header.producer_id if standing is TxnStanding.OPEN else None
                for record in records:
                    if record.key is None:
                        continue
                    key, value = decode(record.key, record.value)
                    loaded.append((key, value, record.offset, open_producer))
        position = spans[-1][1]
    return loaded
