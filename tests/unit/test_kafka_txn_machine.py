"""The transaction state machine (§19.5.3, §19.5.4, §19.5.7): every transition and error, table by
table, and a Hypothesis state machine that drives it with any sequence of requests."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.producer_ids import MAX_EPOCH
from trikafka.broker.kafka.transactions import machine
from trikafka.broker.kafka.transactions.machine import Write
from trikafka.kafka.txn_records import TxnState, TxnValue

S = TxnState
E = ErrorCode
PID, EPOCH, NOW, TIMEOUT = 4000, 3, 1_000_000, 60_000
P1, P2 = ("out", 0), ("out", 1)


def at(state: TxnState, partitions: tuple[tuple[str, int], ...] = (), start_ms: int = -1) -> TxnValue:
    if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE) and not partitions:
        partitions, start_ms = (P1,), NOW - 10
    return TxnValue(PID, EPOCH, TIMEOUT, state, partitions, NOW - 10, start_ms)


# ------------------------------------------------------------------ InitProducerId

def test_an_unknown_id_gets_the_fresh_producer_id_at_epoch_0():
    assert machine.needs_new_producer_id(None)
    outcome = machine.init_producer_id(None, False, TIMEOUT, NOW, fresh_producer_id=77)
    assert outcome == Write(TxnValue(77, 0, TIMEOUT, S.EMPTY, (), NOW, -1))


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_a_known_id_at_rest_gets_its_epoch_bumped_and_the_new_timeout(state: TxnState):
    outcome = machine.init_producer_id(at(state), False, 5000, NOW, None)
    assert outcome == Write(TxnValue(PID, EPOCH + 1, 5000, S.EMPTY, (), NOW, -1))


def test_an_epoch_at_its_limit_takes_a_new_producer_id():
    current = replace(at(S.EMPTY), producer_epoch=MAX_EPOCH)
    assert machine.needs_new_producer_id(current)
    assert machine.init_producer_id(current, False, TIMEOUT, NOW, 99) == \
        Write(TxnValue(99, 0, TIMEOUT, S.EMPTY, (), NOW, -1))


def test_an_ongoing_transaction_is_aborted_at_the_next_epoch_and_the_client_told_to_retry():
    outcome = machine.init_producer_id(at(S.ONGOING), False, TIMEOUT, NOW, None)
    assert outcome == Write(replace(at(S.ONGOING), producer_epoch=EPOCH + 1, state=S.PREPARE_ABORT,
                                    last_update_timestamp_ms=NOW), E.concurrent_transactions)
    assert isinstance(outcome, Write) and machine.needs_markers(outcome.value)
    # once committed, the coordinator sees the fence and decides the request again after the abort;
    # a fence whose write failed is no fence: the request gets the write's error
    assert machine.fenced(outcome, outcome.answer) and not machine.fenced(outcome, E.not_coordinator)
    plain = machine.init_producer_id(at(S.EMPTY), False, TIMEOUT, NOW, None)
    assert isinstance(plain, Write) and not machine.fenced(plain, plain.answer)


@pytest.mark.parametrize("current, writing, timeout_ms, expected, error", [
    (None, False, 0, None, E.invalid_transaction_timeout),
    (None, False, machine.MAX_TIMEOUT_MS_DEFAULT + 1, None, E.invalid_transaction_timeout),
    (at(S.EMPTY), True, TIMEOUT, None, E.concurrent_transactions),
    (at(S.PREPARE_COMMIT), False, TIMEOUT, None, E.concurrent_transactions),
    (at(S.PREPARE_ABORT), False, TIMEOUT, None, E.concurrent_transactions),
    (at(S.DEAD), False, TIMEOUT, None, E.invalid_txn_state),
    (at(S.EMPTY), False, TIMEOUT, (PID + 1, EPOCH), E.invalid_producer_id_mapping),
    (at(S.EMPTY), False, TIMEOUT, (PID, EPOCH - 1), E.producer_fenced),
])
def test_init_producer_id_errors(current, writing, timeout_ms, expected, error):
    assert machine.init_producer_id(current, writing, timeout_ms, NOW, 1, expected) == error


def test_the_timeout_may_be_1_ms_up_to_the_limit_kafkas_15_minutes_by_default():
    # transaction.max.timeout.ms defaults to 900 000 in Kafka (§19.5.4); the broker's setting moves it.
    for timeout_ms in (1, 900_000):
        assert isinstance(machine.init_producer_id(None, False, timeout_ms, NOW, 1), Write)
    assert machine.init_producer_id(None, False, 900_001, NOW, 1) == E.invalid_transaction_timeout
    assert isinstance(machine.init_producer_id(None, False, 5000, NOW, 1, max_timeout_ms=5000), Write)
    assert machine.init_producer_id(None, False, 5001, NOW, 1, max_timeout_ms=5000) == E.invalid_transaction_timeout


def test_kip_360_with_the_ids_own_producer_bumps_as_a_plain_init():
    assert machine.init_producer_id(at(S.EMPTY), False, TIMEOUT, NOW, None, (PID, EPOCH)) == \
        machine.init_producer_id(at(S.EMPTY), False, TIMEOUT, NOW, None)


# ------------------------------------------------------------------ AddPartitionsToTxn

@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_the_first_partitions_start_a_transaction(state: TxnState):
    outcome = machine.add_partitions(at(state), False, PID, EPOCH, [P2, P1, P1], NOW)
    assert outcome == Write(replace(at(state), state=S.ONGOING, partitions=(P1, P2), last_update_timestamp_ms=NOW,
                                    start_timestamp_ms=NOW))


def test_more_partitions_join_an_ongoing_transaction_and_known_ones_write_nothing():
    ongoing = at(S.ONGOING, (P1,), NOW - 10)
    assert machine.add_partitions(ongoing, False, PID, EPOCH, [P2], NOW) == \
        Write(replace(ongoing, partitions=(P1, P2), last_update_timestamp_ms=NOW))
    assert machine.add_partitions(ongoing, False, PID, EPOCH, [P1], NOW) == E.none


@pytest.mark.parametrize("current, writing, pid, epoch, error", [
    (None, False, PID, EPOCH, E.invalid_producer_id_mapping),
    (at(S.ONGOING), False, PID + 1, EPOCH, E.invalid_producer_id_mapping),
    (at(S.ONGOING), False, PID, EPOCH - 1, E.producer_fenced),
    (at(S.ONGOING), False, PID, EPOCH + 1, E.producer_fenced),
    (at(S.ONGOING), True, PID, EPOCH, E.concurrent_transactions),
    (at(S.PREPARE_COMMIT), False, PID, EPOCH, E.concurrent_transactions),
    (at(S.PREPARE_ABORT), False, PID, EPOCH, E.concurrent_transactions),
    (at(S.DEAD), False, PID, EPOCH, E.invalid_txn_state),
    (at(S.PREPARE_EPOCH_FENCE), False, PID, EPOCH, E.invalid_txn_state),
])
def test_add_partitions_errors(current, writing, pid, epoch, error):
    assert machine.add_partitions(current, writing, pid, epoch, [P2], NOW) == error


# ------------------------------------------------------------------ EndTxn

@pytest.mark.parametrize("commit, decided", [(True, S.PREPARE_COMMIT), (False, S.PREPARE_ABORT)])
def test_end_txn_writes_the_decision(commit: bool, decided: TxnState):
    outcome = machine.end_transaction(at(S.ONGOING), False, PID, EPOCH, commit, NOW)
    assert outcome == Write(replace(at(S.ONGOING), state=decided, last_update_timestamp_ms=NOW))
    assert isinstance(outcome, Write) and machine.needs_markers(outcome.value)


@pytest.mark.parametrize("state, commit, error", [
    (S.PREPARE_COMMIT, True, E.concurrent_transactions),
    (S.COMPLETE_COMMIT, True, E.none),
    (S.PREPARE_ABORT, False, E.concurrent_transactions),
    (S.COMPLETE_ABORT, False, E.none),
    (S.PREPARE_COMMIT, False, E.invalid_txn_state),
    (S.COMPLETE_COMMIT, False, E.invalid_txn_state),
    (S.PREPARE_ABORT, True, E.invalid_txn_state),
    (S.COMPLETE_ABORT, True, E.invalid_txn_state),
    (S.EMPTY, True, E.invalid_txn_state),
    (S.EMPTY, False, E.invalid_txn_state),
    (S.DEAD, True, E.invalid_txn_state),
])
def test_end_txn_retries_and_wrong_states(state: TxnState, commit: bool, error: ErrorCode):
    assert machine.end_transaction(at(state), False, PID, EPOCH, commit, NOW) == error


@pytest.mark.parametrize("current, writing, pid, epoch, error", [
    (None, False, PID, EPOCH, E.invalid_producer_id_mapping),
    (at(S.ONGOING), False, PID + 1, EPOCH, E.invalid_producer_id_mapping),
    (at(S.ONGOING), False, PID, EPOCH - 1, E.producer_fenced),
    (at(S.ONGOING), True, PID, EPOCH, E.concurrent_transactions),
])
def test_end_txn_producer_errors(current, writing, pid, epoch, error):
    assert machine.end_transaction(current, writing, pid, epoch, True, NOW) == error


# ------------------------------------------------------------------ completion, timeout, load, verify

@pytest.mark.parametrize("prepared, completed", [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                                 (S.PREPARE_ABORT, S.COMPLETE_ABORT)])
def test_complete_ends_the_transaction_with_no_partitions(prepared: TxnState, completed: TxnState):
    done = machine.complete(at(prepared), NOW)
    assert (done.state, done.partitions, done.producer_epoch) == (completed, (), EPOCH)
    assert not machine.needs_markers(done)


@pytest.mark.parametrize("state", [s for s in S if s not in machine.PREPARED])
def test_only_a_prepared_transaction_completes(state: TxnState):
    with pytest.raises(ValueError):
        machine.complete(at(state), NOW)


def test_only_concurrent_transactions_with_something_under_way_waits():
    """§19.5.3's wait: a request in Prepare* (or during a write) waits while the markers (or the write)
    are under way; nothing else waits, and nothing waits when nothing will change the id."""
    in_prepare = machine.add_partitions(at(S.PREPARE_COMMIT), False, PID, EPOCH, [P2], NOW)
    assert in_prepare == E.concurrent_transactions
    assert machine.waits(in_prepare, under_way=True) and not machine.waits(in_prepare, under_way=False)
    assert machine.waits(machine.end_transaction(at(S.PREPARE_COMMIT), False, PID, EPOCH, True, NOW), True)
    fenced = machine.add_partitions(at(S.PREPARE_COMMIT), False, PID, EPOCH - 1, [P2], NOW)
    assert not machine.waits(fenced, under_way=True)
    # InitProducerId of an Ongoing id writes its abort and answers CONCURRENT_TRANSACTIONS: no wait.
    abort = machine.init_producer_id(at(S.ONGOING), False, TIMEOUT, NOW, None)
    assert isinstance(abort, Write) and abort.answer == E.concurrent_transactions
    assert not machine.waits(abort, under_way=True)


def test_an_expired_transaction_is_aborted_with_the_epoch_bumped():
    ongoing = at(S.ONGOING, (P1,), NOW)
    assert machine.deadline_ms(ongoing) == NOW + TIMEOUT
    assert machine.expire(ongoing, False, NOW + TIMEOUT - 1) is None
    assert machine.expire(ongoing, True, NOW + TIMEOUT) is None
    assert machine.expire(ongoing, False, NOW + TIMEOUT) == Write(
        replace(ongoing, producer_epoch=EPOCH + 1, state=S.PREPARE_ABORT, last_update_timestamp_ms=NOW + TIMEOUT))
    at_limit = replace(ongoing, producer_epoch=MAX_EPOCH)
    expired = machine.expire(at_limit, False, NOW + TIMEOUT)
    assert expired is not None and expired.value.producer_epoch == MAX_EPOCH


@pytest.mark.parametrize("state", [s for s in S if s != S.ONGOING])
def test_only_an_ongoing_transaction_expires(state: TxnState):
    assert machine.deadline_ms(at(state)) is None
    assert machine.expire(at(state), False, NOW + 10 * TIMEOUT) is None


@pytest.mark.parametrize("state", list(S))
def test_an_id_at_rest_and_unused_for_the_expiration_may_be_removed(state: TxnState):
    value = at(state)  # last written at NOW - 10
    at_rest = state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    assert machine.id_expired(value, False, NOW - 10 + 1000, 1000) is at_rest
    assert not machine.id_expired(value, False, NOW - 10 + 999, 1000)
    assert not machine.id_expired(value, True, NOW + 10**9, 1000)  # a write in flight decides first
    assert not machine.id_expired(replace(value, last_update_timestamp_ms=-1), False, NOW + 10**9, 1000)


def test_a_loaded_epoch_fence_becomes_its_abort_and_nothing_else_is_rewritten():
    fence = at(S.PREPARE_EPOCH_FENCE)
    assert machine.after_load(fence, NOW) == Write(replace(fence, state=S.PREPARE_ABORT,
                                                           last_update_timestamp_ms=NOW))
    for state in S:
        if state != S.PREPARE_EPOCH_FENCE:
            assert machine.after_load(at(state), NOW) is None


@pytest.mark.parametrize("current, pid, epoch, partition, error", [
    (at(S.ONGOING, (P1,), NOW), PID, EPOCH, P1, E.none),
    (at(S.ONGOING, (P1,), NOW), PID, EPOCH, P2, E.invalid_txn_state),
    (at(S.ONGOING, (P1,), NOW), PID, EPOCH - 1, P1, E.producer_fenced),
    (at(S.ONGOING, (P1,), NOW), PID + 1, EPOCH, P1, E.invalid_producer_id_mapping),
    (at(S.PREPARE_COMMIT, (P1,), NOW), PID, EPOCH, P1, E.invalid_txn_state),
    (at(S.COMPLETE_COMMIT), PID, EPOCH, P1, E.invalid_txn_state),
    (None, PID, EPOCH, P1, E.invalid_producer_id_mapping),
])
def test_verification(current, pid, epoch, partition, error):
    assert machine.verify(current, pid, epoch, *partition) == error


# ------------------------------------------------------------------ any sequence of requests

class TransactionSequences(RuleBasedStateMachine):
    """One id driven by InitProducerId, AddPartitionsToTxn, EndTxn, timeouts and marker completion,
    writes failing or not: the invariants of §19.5.3 hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.value: TxnValue | None = None
        self.now_ms = NOW
        self.next_pid = 1000
        self.fenced: set[tuple[int, int]] = set()  # (producer id, epoch) pairs superseded

    def _apply(self, outcome: machine.Outcome, committed: bool) -> None:
        if isinstance(outcome, Write) and committed:
            old = self.value
            if old is not None and (outcome.value.producer_id, outcome.value.producer_epoch) != \
                    (old.producer_id, old.producer_epoch):
                assert (outcome.value.producer_id, outcome.value.producer_epoch) not in self.fenced
                self.fenced.add((old.producer_id, old.producer_epoch))
            self.value = outcome.value

    @rule(committed=st.booleans(), timeout_ms=st.integers(1, 10_000))
    def init(self, committed: bool, timeout_ms: int) -> None:
        fresh = None
        if machine.needs_new_producer_id(self.value):
            self.next_pid += 1
            fresh = self.next_pid
        self._apply(machine.init_producer_id(self.value, False, timeout_ms, self.now_ms, fresh), committed)

    @precondition(lambda self: self.value is not None)
    @rule(committed=st.booleans(), parts=st.lists(st.sampled_from([P1, P2]), max_size=2), stale=st.booleans())
    def add(self, committed: bool, parts: list[tuple[str, int]], stale: bool) -> None:
        assert self.value is not None
        epoch = self.value.producer_epoch - 1 if stale else self.value.producer_epoch
        outcome = machine.add_partitions(self.value, False, self.value.producer_id, epoch, parts, self.now_ms)
        if stale:
            assert outcome == E.producer_fenced
        self._apply(outcome, committed)

    @precondition(lambda self: self.value is not None)
    @rule(committed=st.booleans(), commit=st.booleans())
    def end(self, committed: bool, commit: bool) -> None:
        assert self.value is not None
        before = self.value
        outcome = machine.end_transaction(before, False, before.producer_id, before.producer_epoch, commit,
                                          self.now_ms)
        if isinstance(outcome, Write):
            assert before.state == S.ONGOING
            assert outcome.value.partitions == before.partitions  # the decision keeps what the markers need
        self._apply(outcome, committed)

    @precondition(lambda self: self.value is not None and machine.needs_markers(self.value))
    @rule()
    def markers_written(self) -> None:
        assert self.value is not None
        self.value = machine.complete(self.value, self.now_ms)

    @rule(elapsed_ms=st.integers(0, 20_000), committed=st.booleans())
    def time_passes(self, elapsed_ms: int, committed: bool) -> None:
        self.now_ms += elapsed_ms
        if self.value is not None:
            expired = machine.expire(self.value, False, self.now_ms)
            if expired is not None:
                self._apply(expired, committed)

    @invariant()
    def consistent(self) -> None:
        value = self.value
        if value is None:
            return
        assert value.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)
        # An open or decided transaction has partitions; one at rest has none.
        assert bool(value.partitions) == (value.state in machine.PREPARED or value.state == S.ONGOING)
        assert 0 <= value.producer_epoch <= MAX_EPOCH
        if value.state == S.ONGOING:
            assert machine.deadline_ms(value) is not None
        # A fenced producer never passes verification.
        for pid, epoch in self.fenced:
            for part in (P1, P2):
                assert machine.verify(value, pid, epoch, *part) != E.none


TestTransactionSequences = TransactionSequences.TestCase
