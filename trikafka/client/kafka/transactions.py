"""A transactional producer's requests to its coordinators (docs/protocol.md §19.8).

``TransactionManager`` sends InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn to the transaction coordinator of its
transactional id, and TxnOffsetCommit to a group's coordinator, one request
at a time, retrying as §19.8's table says; where the producer stands is its
``TransactionState`` (sans I/O).  ``KafkaProducer`` owns one when given a
``transactional_id`` and calls it before each partition's first batch of a
transaction (``ready_to_send``), when a batch fails (``batch_failed``), and
to commit and abort.
"""

from __future__ import annotations

import datetime
from typing import Awaitable, Callable, Mapping

import trio
from kio.schema.errors import ErrorCode

from trikafka.client.errors import BrokerConnectionError
from trikafka.kafka.apis import KafkaApi

from . import schema
from .client import BrokerNode, KafkaClient
from .connection import KafkaConnection
from .errors import KafkaResponseError, TransactionFatalError
from .group_offsets import ConsumerGroupMetadata, TopicPartition, by_topic, commit_values
from .idempotence import BUMP_FROM_VERSION, Idempotence
from .coordinators import find_coordinator
from .membership import COORDINATOR_KEY_TYPE_GROUP, COORDINATOR_KEY_TYPE_TRANSACTION
from .transaction_state import Action, TransactionPhase, TransactionState, Where, action_of

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms
DEFAULT_RETRY_TIMEOUT_S = 60.0  # Kafka's max.block.ms: how long one step retries
_FIRST_BACKOFF_S = 0.02
_MAX_BACKOFF_S = 1.0
Flush = Callable[[], Awaitable[None]]
Values = Mapping[str, object] | Callable[[int], Mapping[str, object]]  # a body's values, or a function of the version
AnswerCode = Callable[[object], int]  # an answer (each api's its own kio class) to its error code


def _top_code(answer: object) -> int:
    return int(schema.field(answer, "error_code", 0))


def _add_partitions_code(answer: object) -> int:
    """The answer's first error other than OPERATION_NOT_ATTEMPTED (what the others get), else NONE."""
    codes = [int(p.partition_error_code) for t in schema.field(answer, "results_by_topic_v3_and_below", ())
             for p in t.results_by_partition]
    real = [c for c in codes if c not in (ErrorCode.none, ErrorCode.operation_not_attempted)]
    return real[0] if real else next((c for c in codes if c != ErrorCode.none), ErrorCode.none)


def _offset_commit_code(answer: object) -> int:
    codes = [int(p.error_code) for t in schema.field(answer, "topics", ()) for p in t.partitions]
    return next((c for c in codes if c != ErrorCode.none), ErrorCode.none)


class TransactionManager:
    """The transactional id ``transactional_id``'s requests and state; see the module docstring.

    ``retry_timeout_s`` bounds how long one step (an init, an add, a commit)
    retries before it fails the transaction with the last error.
    """

    def __init__(self, client: KafkaClient, idempotence: Idempotence, transactional_id: str, *,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                 retry_timeout_s: float = DEFAULT_RETRY_TIMEOUT_S):
        if not transactional_id:
            raise ValueError("a transactional id must not be empty")
        self.client = client
        self.idempotence = idempotence
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_timeout_s = retry_timeout_s
        self.state = TransactionState()
        self._coordinators: dict[tuple[int, str], BrokerNode] = {}
        self._lock = trio.Lock()  # one request of the transactional id at a time

    # ------------------------------------------------------------------ the producer's calls

    async def init(self) -> None:
        """InitProducerId at the transaction coordinator; the producer id and epoch stamp every batch after."""
        self.state.move(TransactionPhase.INITIALIZING)
        try:
            await self._init_producer_id()
        except BaseException:
            if self.state.phase is TransactionPhase.INITIALIZING:
                self.state.move(TransactionPhase.UNINITIALIZED)
            raise
        self.state.completed()

    def begin(self) -> None:
        """Start a transaction; ``TransactionStateError`` outside READY."""
        self.state.begin()

    async def ready_to_send(self, where: Where) -> None:
        """Return once ``where`` belongs to the ongoing transaction (AddPartitionsToTxn for it and every
        other partition waiting); raises the transaction's error when it cannot take batches."""
        if not self.state.needs(where):
            return
        async with self._lock:
            self.state.check_open()
            wanted = self.state.take_pending()
            if not wanted:
                return  # a request made while this task waited for the lock added it
            values = {"v3_and_below_topics": [{"name": topic, "partitions": ids}
                                              for topic, ids in by_topic(TopicPartition(*w) for w in wanted).items()],
                      **self._producer_values("v3_and_below_")}
            await self._call("AddPartitionsToTxn", KafkaApi.ADD_PARTITIONS_TO_TXN, values, _add_partitions_code)
            self.state.added(wanted)

    def batch_failed(self, error: BaseException) -> BaseException:
        """A batch of the transaction failed for good; the exception its senders get."""
        if isinstance(error, KafkaResponseError):
            return self.state.fail(error)
        if self.state.phase is TransactionPhase.IN_TRANSACTION:
            self.state.fail(KafkaResponseError(ErrorCode.unknown_server_error, "a batch of the transaction",
                                               str(error)))
        return error

    async def send_offsets(self, group: ConsumerGroupMetadata, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to consume per partition) of ``group`` with the transaction:
        AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self.state.check_open()
        async with self._lock:
            self.state.check_open()
            if not self.state.offsets_added:
                await self._call("AddOffsetsToTxn", KafkaApi.ADD_OFFSETS_TO_TXN,
                                 {"group_id": group.group_id, **self._producer_values()}, _top_code)
                self.state.offsets_added = True
            values = {**commit_values(group.group_id, group.generation_id, group.member_id, group.group_instance_id,
                                      offsets), **self._producer_values()}
            await self._call(f"TxnOffsetCommit of group {group.group_id}", KafkaApi.TXN_OFFSET_COMMIT, values,
                             _offset_commit_code, key=group.group_id, key_type=COORDINATOR_KEY_TYPE_GROUP)

    async def commit(self, flush: Flush) -> None:
        """Send every open batch, then EndTxn commit; a failed transaction is aborted and its error raised."""
        if self.state.phase not in (TransactionPhase.IN_TRANSACTION, TransactionPhase.ABORTABLE_ERROR):
            self.state.move(TransactionPhase.COMMITTING)  # raises the reason
        await flush()
        if self.state.phase is TransactionPhase.IN_TRANSACTION:
            self.state.move(TransactionPhase.COMMITTING)
            try:
                if self.state.started_at_coordinator:
                    await self._end(committed=True)
            except TransactionFatalError:
                raise
            except KafkaResponseError as exc:
                self.state.fail(exc)
            else:
                self.state.completed()
                return
        error = self.state.error
        await self.abort(flush)
        assert error is not None
        raise error

    async def abort(self, flush: Flush) -> None:
        """Abort the transaction: batches in flight are awaited, batches not sent fail, then EndTxn abort.

        An abort that fails (after its retries) makes the producer fatal.
        After a failed batch the epoch is bumped (InitProducerId with the
        current id and epoch), so the partitions' sequences restart at 0.
        """
        self.state.move(TransactionPhase.ABORTING)
        await flush()
        if self.state.phase is TransactionPhase.FATAL:  # a batch in flight was fenced
            assert self.state.error is not None
            raise self.state.error
        try:
            if self.state.started_at_coordinator:
                await self._end(committed=False)
            if self.idempotence.new_epoch_wanted:
                self.state.move(TransactionPhase.INITIALIZING)
                await self._init_producer_id()
        except KafkaResponseError as exc:  # nothing is left to fall back on: the producer is done
            raise self.state.fatal(exc) from exc
        self.state.completed()

    # ------------------------------------------------------------------ requests

    def _producer_values(self, prefix: str = "") -> dict[str, object]:
        return {f"{prefix}transactional_id": self.transactional_id,
                f"{prefix}producer_id": self.idempotence.producer_id,
                f"{prefix}producer_epoch": self.idempotence.epoch}

    async def _init_producer_id(self) -> None:
        current = (self.idempotence.producer_id, self.idempotence.epoch)

        def values(version: int) -> dict[str, object]:
            bump = current[0] >= 0 and version >= BUMP_FROM_VERSION
            return {"transactional_id": self.transactional_id,
                    "transaction_timeout": datetime.timedelta(milliseconds=self.transaction_timeout_ms),
                    "producer_id": current[0] if bump else -1, "producer_epoch": current[1] if bump else -1}

        answer = await self._call("InitProducerId", KafkaApi.INIT_PRODUCER_ID, values, _top_code)
        self.idempotence.adopt(int(schema.field(answer, "producer_id")), int(schema.field(answer, "producer_epoch")))

    async def _end(self, *, committed: bool) -> None:
        await self._call(f"EndTxn {'commit' if committed else 'abort'}", KafkaApi.END_TXN,
                         {"committed": committed, **self._producer_values()}, _top_code)

    async def _call(self, what: str, api: KafkaApi, values: Values, answer_code: AnswerCode, *,
                    key: str | None = None, key_type: int = COORDINATOR_KEY_TYPE_TRANSACTION) -> object:
        """``api`` to the coordinator of ``key`` (default: the transactional id), retried per §19.8; its answer.

        ``values`` may be a function of the negotiated version.  Raises the
        fatal error class for a fatal code, else ``KafkaResponseError``
        (recorded in the state) once the code is not retried or the retries ran out.
        """
        where = (key_type, key or self.transactional_id)
        deadline = trio.current_time() + self.retry_timeout_s
        backoff_s = _FIRST_BACKOFF_S
        while True:
            detail = None
            try:
                connection = await self._coordinator_connection(where)
                version = connection.version(api)
                body = values(version) if callable(values) else values
                answer = await connection.send(api, version, schema.build(api, version, **body))
                code = answer_code(answer)
                if code == ErrorCode.none:
                    return answer
            except KafkaResponseError as exc:  # FindCoordinator's error
                code = int(exc.error_code)
            except BrokerConnectionError as exc:
                code, detail = ErrorCode.coordinator_not_available, str(exc)
            action = action_of(code)
            if action is Action.FIND_COORDINATOR:
                self._coordinators.pop(where, None)
            if action in (Action.FATAL, Action.ABORTABLE) or trio.current_time() + backoff_s > deadline:
                raise self.state.fail(KafkaResponseError(code, f"{what} of {self.transactional_id}", detail))
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)

    async def _coordinator_connection(self, where: tuple[int, str]) -> KafkaConnection:
        """The connection to the coordinator of (key type, key), found first when not known."""
        node = self._coordinators.get(where)
        if node is None:
            node = self._coordinators[where] = await find_coordinator(self.client, where[1], where[0],
                                                                      what=f"FindCoordinator of {where[1]}")
        return await self.client.connection_to(node.host, node.port)
