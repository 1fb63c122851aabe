"""Read one partition of a Kafka-protocol topic in order (docs/protocol.md §16.4).

``PartitionConsumer`` long-polls Fetch from its ``position`` at the partition's
leader.  A fetch that starts inside a batch gets the whole batch (§16.4): the
records below the position are skipped.  The position after a batch is the
batch's ``next_offset``, so offsets a compaction removed are passed over.
An offset outside the log is ``KafkaOffsetOutOfRange`` unless the consumer
was given a ``reset`` (``EARLIEST`` or ``LATEST``) to move to.
"""

from __future__ import annotations

import datetime
import itertools
from typing import AsyncIterator, Awaitable, Callable, Iterator

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from trikafka.client.errors import BrokerProtocolError, ClientError
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.batch import BatchHeader, walk_headers
from trikafka.kafka.read_committed import committed_batches
from trikafka.kafka.records import Record, RecordBatch, read_batches

from . import schema
from .admin import EARLIEST, LATEST, KafkaAdmin
from .client import KafkaClient
from .connection import KafkaConnection
from .errors import KafkaOffsetOutOfRange, check

DEFAULT_MAX_WAIT_S = 0.5
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_BYTES = 50 * 1024 * 1024  # Kafka's fetch.max.bytes
_LANES = itertools.count()


class PartitionConsumer:
    """Records of ``topic``-``partition`` from ``offset`` (an offset, ``EARLIEST`` or ``LATEST``).

    ``async for record in consumer`` runs until cancelled, ``async for batch
    in consumer.batches()`` the same a ``RecordBatch`` at a time; ``fetch()`` is one
    round.  Transaction markers are never records; ``read_committed`` reads
    up to the last stable offset and drops aborted transactions (§19.7).  Its fetches have connections of their own (``lane``), closed by
    ``aclose`` or ``async with``, else with the client.  ``position`` is the offset of the next record to deliver;
    ``high_watermark`` the partition's, as of the last fetch.
    """

    def __init__(self, client: KafkaClient, topic: str, partition: int, offset: int = EARLIEST, *,
                 reset: int | None = None, max_wait_s: float = DEFAULT_MAX_WAIT_S, min_bytes: int = 1,
                 partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES, max_bytes: int = DEFAULT_MAX_BYTES,
                 read_committed: bool = False):
        if reset not in (None, EARLIEST, LATEST):
            raise ValueError(f"reset must be None, EARLIEST or LATEST, not {reset}")
        self.client = client
        self.topic = topic
        self.partition = partition
        self.reset = reset
        self.max_wait_s = max_wait_s
        self.min_bytes = min_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_bytes = max_bytes
        self.read_committed = read_committed
        self.high_watermark = -1
        # Its own connections: a long poll must not hold up other requests to the broker.
        self.lane = f"fetch-{next(_LANES)}"
        self._start = offset
        self.position: int | None = offset if offset >= 0 else None
        # A Fetch sent ahead (``batches``): the offset it asked for, and what to await for its answer.
        self._ahead: tuple[int, Callable[[], Awaitable[ResponsePayload]]] | None = None

    async def __aenter__(self) -> PartitionConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this consumer's fetch connections (the client stays open)."""
        self._ahead = None
        await self.client.close_lane(self.lane)

    async def seek(self, offset: int) -> int:
        """Move to ``offset`` (or ``EARLIEST``/``LATEST``, resolved by ListOffsets); the new position."""
        if offset < 0:
            offset = (await KafkaAdmin(self.client).list_offsets(self.topic, {self.partition: offset}))[
                self.partition].offset
        self.position = offset
        return offset

    async def fetch(self) -> list[Record]:
        """One long-poll fetch: the records at and after ``position`` it returned (maybe none)."""
        records: list[Record] = []
        for batch in self._delivered(*await self._fetch_data()):
            records += batch
        return records

    async def batches(self) -> AsyncIterator[RecordBatch]:
        """``async for batch in consumer.batches()``: the records of each record batch fetched (never
        empty), until cancelled.

        A ``RecordBatch`` is a sequence of ``Record`` and also columns: a reader
        of ``batch.values`` (or keys) alone gets no object per record.  Its
        records are decoded when first read; ``position`` passes it when the
        next one is asked for: after a ``break`` the rest of the fetch is
        fetched again.  The way to read fast: no await per record, and the
        next Fetch is on the wire (from the end of this one) while this one's
        batches are handed out, so the broker works while the reader does.
        """
        while True:
            data, aborted, position = await self._fetch_data(send_ahead=True)
            for batch in self._delivered(data, aborted, position):
                yield batch

    async def __aiter__(self) -> AsyncIterator[Record]:
        async for batch in self.batches():
            for record in batch:
                yield record

    async def _fetch_data(self, *, send_ahead: bool = False) -> tuple[bytes, list[tuple[int, int]], int]:
        """One Fetch from ``position``: its batches' bytes, aborted transactions, and the position asked
        for.  The Fetch sent ahead answers it when it asked for that position.  ``send_ahead``: then
        send the next one, from the end of this one's whole batches."""
        if self.position is None:
            await self.seek(self._start)
        assert self.position is not None
        position = self.position
        fetched = await self._answer_ahead(position)
        if fetched is None:
            try:
                fetched = await self.client.call_leader(self.topic, self.partition, self._fetch_once,
                                                        lane=self.lane)
            except KafkaOffsetOutOfRange:
                if self.reset is None:
                    raise
                await self.seek(self.reset)
                return b"", [], self.position
        data, aborted = fetched
        if send_ahead:
            await self._send_ahead(data)
        return data, aborted, position

    async def _answer_ahead(self, position: int) -> tuple[bytes, list[tuple[int, int]]] | None:
        """The answer of the Fetch sent ahead, if it asked for ``position`` and got one without an
        error; else None (it is dropped; a fetch as usual follows, with its retries)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead[0] != position:
            return None
        try:
            return self._read_answer(await ahead[1](), position)
        except ClientError:
            return None

    async def _send_ahead(self, data: bytes) -> None:
        """Send the Fetch that follows ``data`` (from its last whole batch's end), not awaiting it."""
        last = None
        for last in walk_headers(data):
            pass
        if last is None:
            return
        try:
            connection = await self.client.leader_connection(self.topic, self.partition, self.lane)
            self._ahead = (last.next_offset, await connection.request_ahead(
                KafkaApi.FETCH, extra_wait_s=self.max_wait_s, **self._fetch_request(last.next_offset)))
        except ClientError:
            pass  # the next fetch asks as usual

    def _delivered(self, data: bytes, aborted: list[tuple[int, int]], position: int) -> Iterator[RecordBatch]:
        """The batches of ``data`` a reader gets; ``position`` passes a batch (a control batch, one
        skipped, one delivered) once the next one is asked for."""
        def passed() -> Iterator[tuple[BatchHeader, RecordBatch]]:
            for batch in read_batches(data):
                yield batch.header, batch
                if self.position is None or batch.header.next_offset > self.position:
                    self.position = batch.header.next_offset

        for header, batch in committed_batches(passed(), aborted):
            if header.base_offset < position:  # a fetch from inside a batch gets all of it (§16.4)
                batch = batch.since(position)
            if batch:
                yield batch

    async def _fetch_once(self, connection: KafkaConnection) -> tuple[bytes, list[tuple[int, int]]]:
        """One Fetch from ``position``: the partition's records and its aborted transactions (producer
        id, first offset)."""
        assert self.position is not None
        position = self.position
        answer = await connection.request(KafkaApi.FETCH, extra_wait_s=self.max_wait_s,
                                          **self._fetch_request(position))
        return self._read_answer(answer, position)

    def _fetch_request(self, offset: int) -> dict[str, object]:
        """The Fetch request's fields, from ``offset``."""
        return dict(
            replica_id=-1, max_wait=datetime.timedelta(seconds=self.max_wait_s), min_bytes=self.min_bytes,
            max_bytes=self.max_bytes, isolation_level=int(self.read_committed), session_id=0, session_epoch=-1,
            forgotten_topics_data=(), rack_id="",
            topics=[{"topic": self.topic, "partitions": [{
                "partition": self.partition, "fetch_offset": offset, "current_leader_epoch": -1,
                "log_start_offset": -1, "last_fetched_epoch": -1,
                "partition_max_bytes": self.partition_max_bytes}]}])

    def _read_answer(self, answer: ResponsePayload, offset: int) -> tuple[bytes, list[tuple[int, int]]]:
        """The records and aborted transactions of a Fetch from ``offset``; raises for its error."""
        for topic_answer in schema.field(answer, "responses", ()):
            for part in topic_answer.partitions:
                if int(part.partition_index) != self.partition:
                    continue
                if part.error_code == ErrorCode.offset_out_of_range:
                    raise KafkaOffsetOutOfRange(self.topic, self.partition, offset)
                check(part.error_code, f"fetch from {self.topic}-{self.partition}")
                self.high_watermark = int(part.high_watermark)
                aborted = [(int(a.producer_id), int(a.first_offset)) for a in (part.aborted_transactions or ())]
                return bytes(part.records or b""), aborted
        raise BrokerProtocolError(f"the Fetch answer does not name {self.topic}-{self.partition}")
