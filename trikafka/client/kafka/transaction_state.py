"""A transactional producer's state, sans I/O (docs/protocol.md §19.8).

``TransactionState`` is where a transactional producer stands (its phase),
which partitions its ongoing transaction holds at the coordinator, and the
error that ended it.  It decides, from an error code alone, what the
manager does next (``action_of``), and refuses what the phase does not
allow with ``TransactionStateError``.  The manager
(``trikafka.client.kafka.transactions``) does the I/O and reports here.

Invariants: ``FATAL`` is final; ``partitions`` is empty outside a
transaction; a batch is sent only in ``IN_TRANSACTION``, after its partition
is in ``partitions``.
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode

from .errors import FATAL_TRANSACTION_ERRORS, KafkaResponseError, TransactionFatalError, TransactionStateError

Where = tuple[str, int]


class TransactionPhase(enum.Enum):
    """Where a transactional producer stands."""

    UNINITIALIZED = "uninitialized"  # no producer id yet: init_transactions first
    INITIALIZING = "initializing"  # InitProducerId in progress
    READY = "ready"  # between transactions
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"  # open batches flushed, EndTxn commit in progress
    ABORTING = "aborting"  # batches in flight awaited, EndTxn abort in progress
    ABORTABLE_ERROR = "abortable error"  # the transaction failed: only an abort is allowed
    FATAL = "fatal"  # the producer is unusable


# Each phase and the phases it may move to (FATAL is reachable from every phase).
TRANSITIONS: dict[TransactionPhase, frozenset[TransactionPhase]] = {
    TransactionPhase.UNINITIALIZED: frozenset({TransactionPhase.INITIALIZING}),
    TransactionPhase.INITIALIZING: frozenset({TransactionPhase.READY, TransactionPhase.UNINITIALIZED}),
    TransactionPhase.READY: frozenset({TransactionPhase.IN_TRANSACTION}),
    TransactionPhase.IN_TRANSACTION: frozenset({TransactionPhase.COMMITTING, TransactionPhase.ABORTING,
                                                TransactionPhase.ABORTABLE_ERROR}),
    TransactionPhase.COMMITTING: frozenset({TransactionPhase.READY, TransactionPhase.ABORTABLE_ERROR}),
    TransactionPhase.ABORTING: frozenset({TransactionPhase.READY, TransactionPhase.INITIALIZING}),
    TransactionPhase.ABORTABLE_ERROR: frozenset({TransactionPhase.ABORTING}),
    TransactionPhase.FATAL: frozenset(),
}


class Action(enum.Enum):
    """What the manager does after a coordinator answered an error code (§19.8's table)."""

    RETRY = "retry"  # the same request after a backoff
    FIND_COORDINATOR = "find coordinator"  # find the coordinator again, then retry
    FATAL = "fatal"  # the producer is unusable
    ABORTABLE = "abortable"  # the transaction can only be aborted


_ACTIONS: dict[ErrorCode, Action] = {
    ErrorCode.coordinator_load_in_progress: Action.RETRY,
    ErrorCode.concurrent_transactions: Action.RETRY,
    ErrorCode.unknown_topic_or_partition: Action.RETRY,
    ErrorCode.not_coordinator: Action.FIND_COORDINATOR,
    ErrorCode.coordinator_not_available: Action.FIND_COORDINATOR,
    **{code: Action.FATAL for code in FATAL_TRANSACTION_ERRORS},
}


def action_of(error_code: int) -> Action:
    """What a non-zero error code of a coordinator's answer asks for."""
    return _ACTIONS.get(ErrorCode(error_code), Action.ABORTABLE)


class TransactionState:
    """The phase, the ongoing transaction's partitions and the error of one transactional producer."""

    def __init__(self) -> None:
        self.phase = TransactionPhase.UNINITIALIZED
        self.error: KafkaResponseError | None = None  # what put it in ABORTABLE_ERROR or FATAL
        self.partitions: set[Where] = set()  # added to the ongoing transaction at the coordinator
        self.pending: set[Where] = set()  # waiting for the next AddPartitionsToTxn
        self.offsets_added = False  # AddOffsetsToTxn succeeded in this transaction
        self.bump_epoch = False  # a batch failed: after the abort, ask for the next epoch

    def move(self, to: TransactionPhase) -> None:
        """Go to ``to``; ``TransactionStateError`` (or the fatal error) when the phase does not allow it."""
        if self.phase is TransactionPhase.FATAL:
            assert self.error is not None
            raise self.error
        if to is not TransactionPhase.FATAL and to not in TRANSITIONS[self.phase]:
            raise TransactionStateError(f"a transactional producer that is {self.phase.value} cannot become "
                                        f"{to.value}")
        self.phase = to

    def begin(self) -> None:
        """Start a transaction (READY only)."""
        if self.phase is TransactionPhase.UNINITIALIZED:
            raise TransactionStateError("call init_transactions() before the first transaction")
        self.move(TransactionPhase.IN_TRANSACTION)

    def check_open(self) -> None:
        """Raise unless records may be sent now: the error of a failed transaction or producer,
        ``TransactionStateError`` outside a transaction."""
        if self.phase is TransactionPhase.IN_TRANSACTION:
            return
        if self.phase in (TransactionPhase.ABORTABLE_ERROR, TransactionPhase.FATAL) and self.error is not None:
            raise self.error
        raise TransactionStateError(f"records are sent inside a transaction; the producer is {self.phase.value}")

    def needs(self, where: Where) -> bool:
        """Whether ``where`` must still be added to the transaction; if so it joins ``pending``."""
        self.check_open()
        if where in self.partitions:
            return False
        self.pending.add(where)
        return True

    def take_pending(self) -> list[Where]:
        """The partitions the next AddPartitionsToTxn adds, sorted; ``pending`` is emptied."""
        taken, self.pending = sorted(self.pending), set()
        return taken

    def added(self, partitions: list[Where]) -> None:
        """The coordinator added ``partitions`` to the transaction."""
        self.partitions.update(partitions)

    @property
    def started_at_coordinator(self) -> bool:
        """Whether the coordinator holds this transaction Ongoing (something was added to it)."""
        return bool(self.partitions) or self.offsets_added

    def fail(self, error: KafkaResponseError) -> KafkaResponseError:
        """Record a failed request or batch; the exception to raise for it.

        A fatal code makes the producer FATAL (its exception class from
        ``FATAL_TRANSACTION_ERRORS``); any other fails the transaction
        (ABORTABLE_ERROR) while one is open, and is returned as it is.
        """
        if error.error_code in FATAL_TRANSACTION_ERRORS:
            return self.fatal(error)
        if self.phase in (TransactionPhase.IN_TRANSACTION, TransactionPhase.COMMITTING):
            self.phase, self.error = TransactionPhase.ABORTABLE_ERROR, error
        return error

    def fatal(self, error: KafkaResponseError) -> TransactionFatalError:
        """Make the producer FATAL with ``error`` (as its fatal class, ``TransactionFatalError`` for a code
        that is not fatal by itself: an abort that could not be completed)."""
        if self.phase is TransactionPhase.FATAL and isinstance(self.error, TransactionFatalError):
            return self.error
        if not isinstance(error, TransactionFatalError):
            fatal = FATAL_TRANSACTION_ERRORS.get(error.error_code, TransactionFatalError)
            error = fatal(int(error.error_code), error.what)
        self.phase, self.error = TransactionPhase.FATAL, error
        return error

    def completed(self) -> None:
        """The transaction ended (committed or aborted): READY, with nothing added."""
        self.move(TransactionPhase.READY)
        self.error = None
        self.partitions.clear()
        self.pending.clear()
        self.offsets_added = False
