"""The transactional producer's state machine, sans I/O (docs/protocol.md §19.8)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from trikafka.client.kafka.errors import (KafkaResponseError, ProducerFencedError, TransactionFatalError,
                                          TransactionStateError)
from trikafka.client.kafka.transaction_state import TRANSITIONS, Action, TransactionPhase, TransactionState, action_of


def _ready() -> TransactionState:
    state = TransactionState()
    state.move(TransactionPhase.INITIALIZING)
    state.completed()
    return state


def test_every_phase_has_its_transitions_and_fatal_is_final():
    assert set(TRANSITIONS) == set(TransactionPhase)
    assert TRANSITIONS[TransactionPhase.FATAL] == frozenset()


def test_a_transaction_needs_init_first():
    state = TransactionState()
    with pytest.raises(TransactionStateError, match="init_transactions"):
        state.begin()
    with pytest.raises(TransactionStateError, match="inside a transaction"):
        state.check_open()


def test_partitions_are_added_once_and_forgotten_at_the_end():
    state = _ready()
    state.begin()
    assert state.needs(("t", 1)) and state.needs(("t", 0))
    assert not state.started_at_coordinator
    assert state.take_pending() == [("t", 0), ("t", 1)]
    assert state.take_pending() == []
    state.added([("t", 0), ("t", 1)])
    assert not state.needs(("t", 0))
    assert state.started_at_coordinator
    state.move(TransactionPhase.COMMITTING)
    state.completed()
    assert state.phase is TransactionPhase.READY and not state.partitions and not state.started_at_coordinator
    with pytest.raises(TransactionStateError):
        state.needs(("t", 0))


def test_a_transaction_inside_another_is_refused():
    state = _ready()
    state.begin()
    with pytest.raises(TransactionStateError, match="in transaction"):
        state.begin()
    assert state.phase is TransactionPhase.IN_TRANSACTION


@pytest.mark.parametrize(("code", "action"), [
    (ErrorCode.concurrent_transactions, Action.RETRY),
    (ErrorCode.coordinator_load_in_progress, Action.RETRY),
    (ErrorCode.not_coordinator, Action.FIND_COORDINATOR),
    (ErrorCode.coordinator_not_available, Action.FIND_COORDINATOR),
    (ErrorCode.producer_fenced, Action.FATAL),
    (ErrorCode.invalid_producer_epoch, Action.FATAL),
    (ErrorCode.transactional_id_authorization_failed, Action.FATAL),
    (ErrorCode.invalid_txn_state, Action.ABORTABLE),
    (ErrorCode.group_authorization_failed, Action.ABORTABLE),
])
def test_each_error_code_has_its_action(code, action):
    assert action_of(code) is action


def test_an_abortable_error_allows_only_an_abort():
    state = _ready()
    state.begin()
    error = KafkaResponseError(ErrorCode.invalid_txn_state, "AddPartitionsToTxn")
    assert state.fail(error) is error
    assert state.phase is TransactionPhase.ABORTABLE_ERROR
    with pytest.raises(KafkaResponseError) as raised:
        state.check_open()
    assert raised.value is error
    with pytest.raises(TransactionStateError):
        state.move(TransactionPhase.COMMITTING)
    state.move(TransactionPhase.ABORTING)
    assert state.fail(KafkaResponseError(ErrorCode.invalid_txn_state, "a batch")) is not error  # no new phase
    assert state.phase is TransactionPhase.ABORTING
    state.completed()
    assert state.phase is TransactionPhase.READY and state.error is None


def test_a_fenced_producer_stays_fatal():
    state = _ready()
    state.begin()
    fenced = state.fail(KafkaResponseError(ErrorCode.producer_fenced, "Produce"))
    assert isinstance(fenced, ProducerFencedError) and state.phase is TransactionPhase.FATAL
    again = state.fail(KafkaResponseError(ErrorCode.invalid_producer_epoch, "EndTxn"))
    assert again is fenced  # the first fatal error is the producer's error
    for attempt in (state.begin, state.check_open, state.completed, lambda: state.move(TransactionPhase.ABORTING)):
        with pytest.raises(ProducerFencedError):
            attempt()
    authorization = TransactionState().fail(KafkaResponseError(ErrorCode.transactional_id_authorization_failed, "x"))
    assert type(authorization) is TransactionFatalError


def test_an_abort_that_cannot_complete_makes_the_producer_fatal():
    state = _ready()
    state.begin()
    state.move(TransactionPhase.ABORTING)
    fatal = state.fatal(KafkaResponseError(ErrorCode.invalid_txn_state, "EndTxn abort"))
    assert type(fatal) is TransactionFatalError and fatal.error_code == ErrorCode.invalid_txn_state
    assert state.phase is TransactionPhase.FATAL
    with pytest.raises(TransactionFatalError):
        state.begin()
