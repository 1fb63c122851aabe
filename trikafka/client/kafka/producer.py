"""A Trio producer of the Apache Kafka protocol: batches per partition, acks 0/1/-1, compression (§16.4, §16.6).

``send`` puts a record in its partition's open batch and waits for the batch's
answer.  A record is encoded into its batch as it is put there
(``trikafka.kafka.records.BatchBuilder``).  A batch goes out when it reaches
``batch_max_bytes`` or when ``linger_s`` has passed since its first record;
batches of one partition go out in the order they closed, up to
``max_in_flight`` of them awaiting their answers at once (§19.4).  A batch whose leader moved is sent again to the
new leader (``KafkaClient.call_leader``).  Under acks -1 the producer is
idempotent unless told otherwise (§19.4): its batches carry a producer id
and per-partition sequences (``Idempotence``), so a retry is stored once.
Given a ``transactional_id`` it is transactional (§19.8): its
``TransactionManager`` adds each partition to the transaction before the
partition's first batch, and commits or aborts.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AsyncIterator, Callable, Mapping

import trio

from trikafka.client.errors import BrokerProtocolError
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.batch import TRANSACTIONAL
from trikafka.kafka.compression import Compression
from trikafka.kafka.records import BatchBuilder, Headers

from . import schema
from .client import KafkaClient
from .connection import KafkaConnection, take
from .errors import TransactionStateError, check
from .group_offsets import ConsumerGroupMetadata, TopicPartition
from .idempotence import Idempotence
from .partitioner import DefaultPartitioner
from .transaction_state import TransactionPhase
from .transactions import DEFAULT_TRANSACTION_TIMEOUT_MS, TransactionManager

if TYPE_CHECKING:
    from .group import KafkaGroupConsumer

ACKS_NONE = 0
ACKS_LEADER = 1
ACKS_ALL = -1
DEFAULT_LINGER_S = 0.005
# Larger than Kafka's Java default (16 KiB) and below librdkafka's (1 MB) and the broker's default
# max.message.bytes (1 MiB): a request costs both sides far more than a record (client_bench's CPU figures).
DEFAULT_BATCH_MAX_BYTES = 256 * 1024
DEFAULT_ACK_TIMEOUT_S = 30.0
DEFAULT_MAX_IN_FLIGHT = 5  # Kafka's max.in.flight.requests.per.connection, the most idempotence allows
UNKNOWN_OFFSET = -1  # what acks 0 answers: the broker says nothing


def _check_settings(acks: int, idempotent: bool | None, transactional_id: str | None,
                    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
    if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        raise ValueError(f"acks must be 0, 1 or -1, not {acks}")
    if not 1 <= max_in_flight <= (DEFAULT_MAX_IN_FLIGHT if idempotent is not False and acks == ACKS_ALL else 1000):
        raise ValueError(f"max_in_flight must be 1 to 5 with idempotence (1 to 1000 without), not {max_in_flight}")
    if idempotent and acks != ACKS_ALL:
        raise ValueError(f"an idempotent producer needs acks -1, not {acks}")
    if transactional_id is not None and (acks != ACKS_ALL or idempotent is False):
        raise ValueError("a transactional producer is idempotent with acks -1")


@dataclass
class _Batch:
    """Records waiting for one partition, encoded, and the answer they all wait for."""

    records: BatchBuilder = field(default_factory=BatchBuilder)
    sent: trio.Event = field(default_factory=trio.Event)
    base_offset: int = UNKNOWN_OFFSET
    error: BaseException | None = None
    on_delivery: list[tuple[Callable[[PendingRecord], None], PendingRecord]] = field(default_factory=list)


@dataclass
class _Lane:
    """A partition's closed batches, oldest first, and its sends awaiting answers (at most ``slots``)."""

    slots: trio.Semaphore
    queue: collections.deque[_Batch] = field(default_factory=collections.deque)
    draining: bool = False  # a task is sending the queue's batches


class PendingRecord:
    """A record submitted to its partition's batch: ``await delivered()`` for its (partition, offset)."""

    __slots__ = ("partition", "_batch", "_index")

    def __init__(self, partition: int, batch: _Batch, index: int):
        self.partition = partition
        self._batch = batch
        self._index = index

    async def delivered(self) -> tuple[int, int]:
        """(partition, offset) once the batch is acknowledged (offset -1 under acks 0); raises its error."""
        await self._batch.sent.wait()
        return self.result()

    def result(self) -> tuple[int, int]:
        """What ``delivered()`` returns or raises, once the batch was answered (RuntimeError before)."""
        if not self._batch.sent.is_set():
            raise RuntimeError("the record's batch is not answered yet")
        if self._batch.error is not None:
            raise self._batch.error
        base = self._batch.base_offset
        return self.partition, (UNKNOWN_OFFSET if base == UNKNOWN_OFFSET else base + self._index)


class KafkaProducer:
    """Produce records to Kafka-protocol topics; open it with ``KafkaProducer.open(client, ...)``.

    ``acks``: 0 (no answer, offsets are -1), 1 (the leader appended) or -1
    (every in-sync replica, §12.6).  ``compression``: a ``Compression``
    (0 none .. 4 zstd).  ``ack_timeout_s``: how long the broker may wait for
    replicas under acks -1.  ``idempotent``: number batches so that retries
    are stored once (§19.4); None means "when acks is -1", as Kafka's clients
    default; True with another acks raises ``ValueError``.
    ``max_in_flight``: batches of one partition sent and not yet answered
    (1-5 when idempotent).  ``transactional_id`` (with ``transaction_timeout_ms``) makes it
    transactional (§19.8): ``await init_transactions()`` once, then records
    are sent inside ``async with producer.transaction()``.
    """

    def __init__(self, client: KafkaClient, nursery: trio.Nursery, *, acks: int = ACKS_ALL,
                 compression: int = Compression.NONE, linger_s: float = DEFAULT_LINGER_S,
                 batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES, ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
                 idempotent: bool | None = None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT):
        _check_settings(acks, idempotent, transactional_id, max_in_flight)
        self.idempotence = (Idempotence(client, managed=transactional_id is not None)
                            if idempotent or (idempotent is None and acks == ACKS_ALL) else None)
        self.transactional_id = transactional_id
        self.transactions = None if transactional_id is None or self.idempotence is None else TransactionManager(
            client, self.idempotence, transactional_id, transaction_timeout_ms=transaction_timeout_ms)
        self.client = client
        self.acks = acks
        self.compression = Compression(compression)
        self.linger_s = linger_s
        self.batch_max_bytes = batch_max_bytes
        self.ack_timeout_s = ack_timeout_s
        self.max_in_flight = max_in_flight
        self.partitioner = DefaultPartitioner()
        self._nursery = nursery
        self._open: dict[tuple[str, int], _Batch] = {}
        # Each batch opened, with when it goes out at the latest: in deadline order, since every
        # batch lingers as long (one task ships them all, ``_linger``).
        self._lingering: collections.deque[tuple[float, tuple[str, int], _Batch]] = collections.deque()
        self._linger_scope: trio.CancelScope | None = None  # the lingering task's sleep
        self._lingerer_started = False
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, client: KafkaClient, *, acks: int = ACKS_ALL, compression: int = Compression.NONE,
                   linger_s: float = DEFAULT_LINGER_S, batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
                   ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
                   idempotent: bool | None = None, transactional_id: str | None = None,
                   transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                   max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> AsyncIterator[KafkaProducer]:
        """``async with KafkaProducer.open(client, acks=1) as producer``; leaving it flushes."""
        # raised here, not from inside the nursery's group
        _check_settings(acks, idempotent, transactional_id, max_in_flight)
        async with trio.open_nursery() as nursery:
            producer = cls(client, nursery, acks=acks, compression=compression, linger_s=linger_s,
                           batch_max_bytes=batch_max_bytes, ack_timeout_s=ack_timeout_s, idempotent=idempotent,
                           transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                           max_in_flight=max_in_flight)
            try:
                yield producer
                await producer.flush()
            finally:
                nursery.cancel_scope.cancel()

    async def send(self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = (),
                   partition: int | None = None, timestamp_ms: int | None = None) -> tuple[int, int]:
        """Produce one record; its (partition, offset) once its batch is acknowledged.

        ``partition`` None picks one by ``key`` (Kafka's murmur2 partitioner)
        or in turn without a key.  Raises ``KafkaResponseError`` if the
        broker refuses the batch.
        """
        pending = await self.submit(topic, value, key=key, headers=headers, partition=partition,
                                    timestamp_ms=timestamp_ms)
        return await pending.delivered()

    async def submit(self, topic: str, value: bytes | None, *, key: bytes | None = None, headers: Headers = (),
                     partition: int | None = None, timestamp_ms: int | None = None,
                     on_delivery: Callable[[PendingRecord], None] | None = None) -> PendingRecord:
        """Put one record in its batch and return without waiting for the broker.

        Records submitted one after another by one task keep that order in
        their partition; ``await pending.delivered()`` gives (partition, offset).
        ``on_delivery(pending)``, if given, is called as the batch is answered (Kafka's send
        callback: no task waits per record), in the producer's task, where ``pending.result()``
        gives what ``delivered()`` would; it must not raise.  A batch its producer's closing
        cancelled is not answered.  It is a checkpoint only when it closes a batch (to let the
        batch go out).
        """
        if self.transactions is not None:
            self.transactions.state.check_open()
        if partition is None:
            partition = self.partitioner.partition(topic, key, await self.client.partition_count(topic))
        where = (topic, partition)
        batch = self._open.get(where)
        if batch is None:
            batch = self._open_batch(where)
        records = batch.records
        index = records.append(int(time.time() * 1000) if timestamp_ms is None else timestamp_ms, key, value,
                               headers)
        pending = PendingRecord(partition, batch, index)
        if on_delivery is not None:
            batch.on_delivery.append((on_delivery, pending))
        if records.size_bytes >= self.batch_max_bytes:
            self._ship(where)
            await trio.lowlevel.checkpoint()  # let the batch's sender run
        return pending

    # ------------------------------------------------------------------ transactions (§19.8)

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id and epoch from its coordinator, fencing older producers."""
        await self._transactions().init()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():`` commits what the block sent (and its ``send_offsets``)
        on normal exit, aborts on an exception, which propagates; ``abort()`` inside ends it uncommitted."""
        manager = self._transactions()
        manager.begin()
        try:
            yield
        except BaseException:
            if manager.state.phase is not TransactionPhase.FATAL:
                with trio.CancelScope(shield=True):  # a cancelled block still aborts; its retries are bounded
                    await manager.abort(self.flush)
            raise
        if manager.state.phase is not TransactionPhase.READY:  # READY: abort() ended it inside the block
            await manager.commit(self.flush)

    async def send_offsets(self, group: ConsumerGroupMetadata | KafkaGroupConsumer,
                           offsets: Mapping[TopicPartition, int]) -> None:
        """Commit a group's ``offsets`` (the next offset to consume per partition) with the transaction.

        ``group`` is a ``KafkaGroupConsumer`` (its current generation and member
        id fence a commit of a member that lost the partitions) or a
        ``ConsumerGroupMetadata``.
        """
        metadata = group if isinstance(group, ConsumerGroupMetadata) else group.group_metadata()
        await self._transactions().send_offsets(metadata, offsets)

    async def abort(self) -> None:
        """Abort the open transaction: nothing it sent or committed becomes visible to read_committed."""
        await self._transactions().abort(self.flush)

    def _transactions(self) -> TransactionManager:
        if self.transactions is None:
            raise TransactionStateError("the producer has no transactional_id")
        return self.transactions

    async def flush(self) -> None:
        """Send every open batch now and wait until every batch sent is answered."""
        for key in list(self._open):
            self._ship(key)
        await self._idle.wait()

    def _open_batch(self, where: tuple[str, int]) -> _Batch:
        batch = self._open[where] = _Batch()
        self._started()
        deadline = trio.current_time() + self.linger_s
        self._lingering.append((deadline, where, batch))
        if not self._lingerer_started:
            self._lingerer_started = True
            self._nursery.start_soon(self._linger)
        elif len(self._lingering) == 1 and self._linger_scope is not None:
            self._linger_scope.deadline = deadline  # it slept with nothing to ship
        return batch

    async def _linger(self) -> None:
        """Ship each batch still open ``linger_s`` after it opened: one task for every batch (a task
        per batch cost a spawn and a scheduler step more)."""
        while True:
            with trio.CancelScope(deadline=self._lingering[0][0] if self._lingering else math.inf) as scope:
                self._linger_scope = scope
                await trio.sleep_forever()
            now = trio.current_time()
            while self._lingering and self._lingering[0][0] <= now:
                _deadline, where, batch = self._lingering.popleft()
                if self._open.get(where) is batch:
                    self._ship(where)

    def _ship(self, where: tuple[str, int]) -> None:
        """Close the open batch of ``where``: queue it behind the partition's earlier batches."""
        lane = self._lanes.get(where)
        if lane is None:
            lane = self._lanes[where] = _Lane(trio.Semaphore(self.max_in_flight))
        lane.queue.append(self._open.pop(where))
        if not lane.draining:
            lane.draining = True
            self._nursery.start_soon(self._drain, where, lane)

    async def _drain(self, where: tuple[str, int], lane: _Lane) -> None:
        """Send the partition's batches in the order they closed, each once the one before is on the
        wire (so sequences and the wire keep one order), at most ``max_in_flight`` unanswered."""
        try:
            while lane.queue:
                await take(lane.slots)
                on_wire = trio.Event()
                self._nursery.start_soon(self._send, where, lane, lane.queue.popleft(), on_wire)
                await on_wire.wait()
        finally:
            lane.draining = False

    async def _send(self, where: tuple[str, int], lane: _Lane, batch: _Batch, on_wire: trio.Event) -> None:
        """Stamp, encode and send one batch, then wait for its answer; every waiting send gets it."""
        topic, partition = where
        idempotence = self.idempotence
        transactions = self.transactions
        stamped = answered = False
        try:
            if transactions is not None:
                await transactions.ready_to_send(where)
            producer_id, epoch = await idempotence.stamp() if idempotence is not None else (-1, -1)
            sequence = idempotence.take(where, batch.records.count) if idempotence is not None else -1
            stamped = True
            data = batch.records.build(compression=self.compression, producer_id=producer_id,
                                       producer_epoch=epoch, base_sequence=sequence,
                                       control_attributes=0 if transactions is None else TRANSACTIONAL)
            batch.base_offset = await self.client.call_leader(
                topic, partition, lambda connection: self._produce(connection, topic, partition, data, on_wire))
            answered = True
        except Exception as exc:  # every waiting send raises it
            batch.error = exc if transactions is None else transactions.batch_failed(exc)
            if idempotence is not None and stamped:  # a batch never stamped took no sequence
                idempotence.failed()
            answered = True
        finally:
            on_wire.set()
            lane.slots.release()
            batch.sent.set()
            self._finished()
        if answered:  # (not when cancelled: waiters of delivered() are cancelled with it)
            for callback, pending in batch.on_delivery:
                callback(pending)

    async def _produce(self, connection: KafkaConnection, topic: str, partition: int, data: bytes,
                       on_wire: trio.Event) -> int:
        """One Produce of one batch; the base offset the broker assigned (-1 under acks 0)."""
        api = KafkaApi.PRODUCE
        version = connection.version(api)
        body = schema.build(api, version, transactional_id=self.transactional_id, acks=self.acks,
                            timeout=datetime.timedelta(seconds=self.ack_timeout_s),
                            topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": data}]}])
        answer = await connection.send(api, version, body, expect_answer=self.acks != ACKS_NONE,
                                       extra_wait_s=self.ack_timeout_s, sent=on_wire)
        if answer is None:
            return UNKNOWN_OFFSET
        for topic_answer in schema.field(answer, "responses", ()):
            for part in topic_answer.partition_responses:
                if int(part.index) == partition:
                    check(part.error_code, f"produce to {topic}-{partition}", schema.field(part, "error_message"))
                    return int(part.base_offset)
        raise BrokerProtocolError(f"the Produce answer does not name {topic}-{partition}")

    def _started(self) -> None:
        if self._in_flight == 0:
            self._idle = trio.Event()
        self._in_flight += 1

    def _finished(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()
