"""The state machine of one transactional id (docs/protocol.md §19.5.3, §19.5.4, §19.5.7), sans I/O.

Each request is a function of the id's committed state (``TxnValue``, None
for an unknown id), whether a write of the id is in flight, and the time
(passed in: the machine has no clock).  It returns either the error the
request answers at once, or a ``Write``: the value to commit to
``__transaction_state`` (acks -1) and what the request answers once it is
committed.  The coordinator applies a ``Write`` only after the commit, so the
cache never holds what a failover could lose; a value in PrepareCommit or
PrepareAbort then asks for the markers, and ``complete`` gives the value that
ends the transaction once they are all written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from kio.schema.errors import ErrorCode

from trikafka.kafka.txn_records import NO_TIMESTAMP, TxnState, TxnValue

from ..producer_ids import MAX_EPOCH

MAX_TIMEOUT_MS_DEFAULT = 900_000  # transaction.max.timeout.ms (§19.5.4)

PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETED = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
# The states from which a new transaction may start (its first AddPartitionsToTxn) or the id be
# initialised again: no transaction is open.
AT_REST = frozenset({TxnState.EMPTY}) | COMPLETED
_COMPLETION = {TxnState.PREPARE_COMMIT: TxnState.COMPLETE_COMMIT, TxnState.PREPARE_ABORT: TxnState.COMPLETE_ABORT}


@dataclass(frozen=True, slots=True)
class Write:
    """Commit ``value`` to ``__transaction_state``, then answer ``answer`` (the request's result)."""

    value: TxnValue
    answer: ErrorCode = ErrorCode.none


Outcome = ErrorCode | Write  # an error answered at once (NONE: nothing to write), or a write


def committed_by_next_write(value: TxnValue | None) -> bool:
    """Whether ``value`` is applied once appended, its commit left to the partition's next write: a
    Complete*, which no client waits for and the id's next write follows in the same log (§19.5.3)."""
    return value is not None and value.state in COMPLETED


def needs_markers(value: TxnValue) -> bool:
    """Whether ``value`` is a decision whose markers are still to be written (§19.5.3)."""
    return value.state in PREPARED


def needs_new_producer_id(current: TxnValue | None) -> bool:
    """Whether InitProducerId on ``current`` hands out a new producer id (unknown id, or an epoch
    bump past 32766, §19.5.4)."""
    return current is None or current.producer_epoch >= MAX_EPOCH


def _check_producer(current: TxnValue | None, producer_id: int, producer_epoch: int) -> ErrorCode:
    """The producer-id and epoch check every api after InitProducerId makes (§19.5.4)."""
    if current is None or current.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if current.producer_epoch != producer_epoch:
        return ErrorCode.producer_fenced
    return ErrorCode.none


def init_producer_id(current: TxnValue | None, writing: bool, timeout_ms: int, now_ms: int,
                     fresh_producer_id: int | None, expected: tuple[int, int] | None = None,
                     max_timeout_ms: int = MAX_TIMEOUT_MS_DEFAULT) -> Outcome:
    """InitProducerId with a transactional id.  ``fresh_producer_id`` is a new producer id when
    ``needs_new_producer_id(current)``; ``expected`` the (producer id, epoch) a v3+ request carries."""
    if not 0 < timeout_ms <= max_timeout_ms:
        return ErrorCode.invalid_transaction_timeout
    if writing:
        return ErrorCode.concurrent_transactions
    if expected is not None and current is not None:
        error = _check_producer(current, *expected)
        if error != ErrorCode.none:
            return error
    if current is not None and current.state in PREPARED:
        return ErrorCode.concurrent_transactions
    if current is not None and current.state == TxnState.ONGOING:
        # Fence the previous epoch's producer and abort its transaction; the client retries until
        # the abort completes and then gets the next epoch.
        return Write(_fence_and_abort(current, now_ms), ErrorCode.concurrent_transactions)
    if current is not None and current.state not in AT_REST:
        return ErrorCode.invalid_txn_state  # Dead, or PrepareEpochFence held only while its write is in flight
    if needs_new_producer_id(current):
        if fresh_producer_id is None:
            raise ValueError("InitProducerId needs a fresh producer id here")
        producer_id, epoch = fresh_producer_id, 0
    else:
        assert current is not None
        producer_id, epoch = current.producer_id, current.producer_epoch + 1
    return Write(TxnValue(producer_id, epoch, timeout_ms, TxnState.EMPTY, (), now_ms, NO_TIMESTAMP))


def fenced(outcome: Write, answer: ErrorCode) -> bool:
    """Whether an InitProducerId's committed ``outcome`` (its commit answered ``answer``) fenced an
    Ongoing transaction: its abort is then under way and the request is decided again (§19.5.3)."""
    return answer == ErrorCode.concurrent_transactions and outcome.value.state == TxnState.PREPARE_ABORT


def _fence_and_abort(current: TxnValue, now_ms: int) -> TxnValue:
    """PrepareAbort at the next epoch (the same one when the epoch cannot grow), §19.5.3."""
    epoch = current.producer_epoch + 1 if current.producer_epoch < MAX_EPOCH else current.producer_epoch
    return replace(current, producer_epoch=epoch, state=TxnState.PREPARE_ABORT, last_update_timestamp_ms=now_ms)


def add_partitions(current: TxnValue | None, writing: bool, producer_id: int, producer_epoch: int,
                   partitions: Iterable[tuple[str, int]], now_ms: int) -> Outcome:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's ``__consumer_offsets`` partition)."""
    error = _check_producer(current, producer_id, producer_epoch)
    if error != ErrorCode.none:
        return error
    assert current is not None
    if writing or current.state in PREPARED:
        return ErrorCode.concurrent_transactions
    if current.state == TxnState.ONGOING:
        merged = tuple(sorted(set(current.partitions) | set(partitions)))
        if merged == current.partitions:
            return ErrorCode.none
        return Write(replace(current, partitions=merged, last_update_timestamp_ms=now_ms))
    if current.state not in AT_REST:
        return ErrorCode.invalid_txn_state
    added = tuple(sorted(set(partitions)))
    if not added:
        return ErrorCode.none
    return Write(replace(current, state=TxnState.ONGOING, partitions=added, last_update_timestamp_ms=now_ms,
                         start_timestamp_ms=now_ms))


def end_transaction(current: TxnValue | None, writing: bool, producer_id: int, producer_epoch: int,
                    commit: bool, now_ms: int) -> Outcome:
    """EndTxn: the decision (PrepareCommit / PrepareAbort), answered once written (§19.5.4)."""
    error = _check_producer(current, producer_id, producer_epoch)
    if error != ErrorCode.none:
        return error
    assert current is not None
    if writing:
        return ErrorCode.concurrent_transactions
    state = current.state
    if state == TxnState.ONGOING:
        decided = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return Write(replace(current, state=decided, last_update_timestamp_ms=now_ms))
    same = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit else \
        (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
    if state == same[0]:
        return ErrorCode.concurrent_transactions  # a retry of this decision: its markers are being written
    if state == same[1]:
        return ErrorCode.none  # a retry of this decision, already complete
    return ErrorCode.invalid_txn_state


def waits(outcome: Outcome, under_way: bool) -> bool:
    """Whether a request decided ``outcome`` waits for its id's next change and is decided again
    instead of being answered (§19.5.3): CONCURRENT_TRANSACTIONS while something ``under_way`` (a
    write of the id, its markers) will change the id."""
    return isinstance(outcome, ErrorCode) and outcome == ErrorCode.concurrent_transactions and under_way


def complete(current: TxnValue, now_ms: int) -> TxnValue:
    """The value that ends a decided transaction once all its markers are written (§19.5.3)."""
    if current.state not in PREPARED:
        raise ValueError(f"only a prepared transaction completes, not {current.state.name}")
    return replace(current, state=_COMPLETION[current.state], partitions=(), last_update_timestamp_ms=now_ms)


def expire(current: TxnValue, writing: bool, now_ms: int) -> Write | None:
    """The abort of an Ongoing transaction past its timeout, with the epoch bumped (§19.5.3); None
    when it has not expired (or a write of it is in flight: its result is looked at next time)."""
    if writing or current.state != TxnState.ONGOING:
        return None
    if now_ms < current.start_timestamp_ms + current.timeout_ms:
        return None
    return Write(_fence_and_abort(current, now_ms))


def id_expired(current: TxnValue, writing: bool, now_ms: int, expiration_ms: int) -> bool:
    """Whether the id is at rest (no transaction open or completing) and has had no request for
    ``expiration_ms``: its state may be removed (§19.5.3)."""
    return (not writing and current.state in AT_REST and current.last_update_timestamp_ms != NO_TIMESTAMP
            and now_ms - current.last_update_timestamp_ms >= expiration_ms)


def deadline_ms(current: TxnValue) -> int | None:
    """When ``current`` times out (None: no open transaction to time)."""
    if current.state != TxnState.ONGOING:
        return None
    return current.start_timestamp_ms + current.timeout_ms


def after_load(current: TxnValue, now_ms: int) -> Write | None:
    """What a coordinator that loads ``current`` must write first (§19.5.6): a PrepareEpochFence
    becomes the abort it stood for; anything else needs no write (a Prepare* only its markers)."""
    if current.state == TxnState.PREPARE_EPOCH_FENCE:
        return Write(replace(current, state=TxnState.PREPARE_ABORT, last_update_timestamp_ms=now_ms))
    return None


def verify(current: TxnValue | None, producer_id: int, producer_epoch: int, topic: str,
           partition: int) -> ErrorCode:
    """KIP-890 part 1 (§19.5.7): NONE when ``(topic, partition)`` is in the producer's ongoing
    transaction."""
    error = _check_producer(current, producer_id, producer_epoch)
    if error != ErrorCode.none:
        return error
    assert current is not None
    if current.state != TxnState.ONGOING or (topic, partition) not in current.partitions:
        return ErrorCode.invalid_txn_state
    return ErrorCode.none
