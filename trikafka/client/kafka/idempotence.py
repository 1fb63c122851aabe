"""An idempotent producer's identity: its producer id, epoch and sequence per partition
(docs/protocol.md §19.1, §19.4).

The id comes from InitProducerId on first use.  A batch takes its
partition's next sequence when it is sent (batches of a partition go out in
order, several in flight, §19.4), and a retry of it the same bytes (so the
leader answers a retry whose first answer was lost with the first offset).
When a batch fails for good, its sequence is lost to the broker's view, so
the next batch asks for the next epoch (KIP-360: the same id, epoch + 1) and
every partition's sequence starts again at 0, which the leader accepts under
a new epoch.

A transactional producer's identity is *managed*: its transaction manager
asks the transaction coordinator for it (§19.8) and hands it over with
``adopt``; ``stamp`` then never asks on its own, and a failed batch's
request for the next epoch waits for the manager (``new_epoch_wanted``).
"""

from __future__ import annotations

import datetime

import trio

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.batch import next_sequence

from . import schema
from .client import KafkaClient
from .connection import take
from .errors import TransactionStateError, check

Where = tuple[str, int]
BUMP_FROM_VERSION = 3  # InitProducerId carries the producer's id and epoch from v3 (KIP-360)
_TRANSACTION_TIMEOUT = datetime.timedelta(minutes=1)  # unused without a transactional id; Kafka's default


class Idempotence:
    """The producer id, epoch and per-partition sequences of one producer."""

    def __init__(self, client: KafkaClient, *, managed: bool = False):
        self._client = client
        self._managed = managed
        self.producer_id = -1
        self.epoch = -1
        self._sequences: dict[Where, int] = {}
        self._bump = False
        self._lock = trio.Lock()

    async def stamp(self) -> tuple[int, int]:
        """The (producer id, epoch) the next batch carries, asking the broker first when there is none
        yet or a failed batch asked for the next epoch."""
        if self._managed:
            if self.producer_id < 0:
                raise TransactionStateError("call init_transactions() before sending")
            return self.producer_id, self.epoch
        await take(self._lock)  # most stamps need no request: no schedule point of their own
        try:
            if self.producer_id < 0 or self._bump:
                await self._init()
            return self.producer_id, self.epoch
        finally:
            self._lock.release()

    @property
    def new_epoch_wanted(self) -> bool:
        """Whether a batch failed for good since the current epoch began."""
        return self._bump

    def adopt(self, producer_id: int, epoch: int) -> None:
        """Take ``(producer_id, epoch)`` as the identity: every partition's sequence starts at 0."""
        self.producer_id, self.epoch = producer_id, epoch
        self._sequences.clear()
        self._bump = False

    def sequence(self, where: Where) -> int:
        """The base sequence of the partition's next batch."""
        return self._sequences.get(where, 0)

    def take(self, where: Where, records: int) -> int:
        """The base sequence of the partition's batch of ``records`` being sent now; the next batch's
        follows it.  Call it right after ``stamp``, with no await between, in the order batches go out."""
        sequence = self.sequence(where)
        self._sequences[where] = next_sequence(sequence, records)
        return sequence

    def failed(self) -> None:
        """A batch failed for good: the next one starts a new epoch."""
        self._bump = True

    async def _init(self) -> None:
        connection = await self._client.any_connection()
        api = KafkaApi.INIT_PRODUCER_ID
        version = connection.version(api)
        bump = self.producer_id >= 0 and version >= BUMP_FROM_VERSION
        body = schema.build(api, version, transactional_id=None, transaction_timeout=_TRANSACTION_TIMEOUT,
                            producer_id=self.producer_id if bump else -1, producer_epoch=self.epoch if bump else -1)
        answer = await connection.send(api, version, body)
        check(schema.field(answer, "error_code"), "InitProducerId")
        self.adopt(int(schema.field(answer, "producer_id")), int(schema.field(answer, "producer_epoch")))
