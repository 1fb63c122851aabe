"""The transaction apis byte by byte (docs/protocol.md §19.5.4, §19.5.7): FindCoordinator key
type 1, InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit against one broker, with the answers clients hide behind their retries."""

from __future__ import annotations

import socket
import threading
import uuid
from typing import Iterator

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import create_topic, read_with_confluent
from tests.helpers.kafka_wire import (RETRY_FOR_S, add_offsets_to_txn, add_partitions_to_txn, end_txn,
                                      fetch_stable_offsets, find_transaction_coordinator, init_producer_id,
                                      init_transactional, list_offset, produce_transactional,
                                      retry_while_retriable, txn_offset_commit)
from trikafka.broker.kafka.offsets import LATEST, READ_COMMITTED
from trikafka.broker.kafka.transactions.verification import RoutedVerifier
from trikafka.kafka.batch import TRANSACTIONAL
from trikafka.kafka.records import build_batch
from trikafka.testing import running_kafka_broker
from trikafka.wire.metadata import BrokerAddress
from trikafka.testing.kafka_broker import RunningKafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=2,
                              transaction_state_log_num_partitions=2) as running:
        create_topic(running.bootstrap, "txn-out", partitions=2)
        yield running


def _tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def _records(producer_id: int, epoch: int, sequence: int, value: bytes) -> bytes:
    return build_batch([value], producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                       control_attributes=TRANSACTIONAL)


def test_find_coordinator_names_this_broker_for_a_transactional_id(kafka):
    error, node, port = retry_while_retriable(lambda: find_transaction_coordinator(kafka.bootstrap, "any-id"))
    assert (error, node, port) == (ErrorCode.none, 0, kafka.kafka_port)


def test_init_bumps_the_epoch_of_a_known_id(kafka):
    tid = _tid()
    error, pid, epoch = init_transactional(kafka.bootstrap, tid)
    assert (error, epoch) == (ErrorCode.none, 0) and pid >= 0
    assert init_transactional(kafka.bootstrap, tid) == (ErrorCode.none, pid, 1)
    assert init_producer_id(kafka.bootstrap, transactional_id=tid, producer_id=pid, epoch=0)[0] == \
        ErrorCode.producer_fenced  # KIP-360's v3+ check of the epoch the producer has


def test_a_commit_reaches_partitions_and_offsets(kafka):
    tid, group = _tid(), f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = kafka.bootstrap
    _, pid, epoch = init_transactional(bootstrap, tid)
    # KIP-890: a partition not yet added refuses the producer's transactional batch.
    assert produce_transactional(bootstrap, tid, "txn-out", 0, _records(pid, epoch, 0, b"early"))[0] == \
        ErrorCode.invalid_txn_state
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [("txn-out", 0), ("no-such-topic", 0)]) == {
        ("txn-out", 0): ErrorCode.operation_not_attempted, ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [("txn-out", 0)]) == {("txn-out", 0): ErrorCode.none}
    assert produce_transactional(bootstrap, tid, "txn-out", 0, _records(pid, epoch, 0, b"kept"))[0] == ErrorCode.none
    assert retry_while_retriable(lambda: add_offsets_to_txn(bootstrap, tid, pid, epoch, group)) == ErrorCode.none
    assert retry_while_retriable(lambda: txn_offset_commit(bootstrap, tid, pid, epoch, group, "txn-out", {0: 7})[0]) \
        == ErrorCode.none
    assert fetch_stable_offsets(bootstrap, group, "txn-out", [0]) == {0: (-1, ErrorCode.unstable_offset_commit)}
    assert end_txn(bootstrap, tid, pid, epoch, True) == ErrorCode.none
    assert retry_while_retriable(lambda: end_txn(bootstrap, tid, pid, epoch, True)) == ErrorCode.none  # a retry
    assert end_txn(bootstrap, tid, pid, epoch, False) == ErrorCode.invalid_txn_state  # the other decision
    assert _stable(bootstrap, group) == {0: (7, ErrorCode.none)}
    seen = read_with_confluent(bootstrap, "txn-out", 1, 1, **{"isolation.level": "read_committed"})
    assert b"kept" in {s.value for s in seen}


def test_v4_verify_only_checks_without_adding(kafka):
    """AddPartitionsToTxn v4, the form brokers send each other (§19.5.4, §19.5.7)."""
    tid, bootstrap = _tid(), kafka.bootstrap
    _, pid, epoch = init_transactional(bootstrap, tid)
    out0, out1 = ("txn-out", 0), ("txn-out", 1)
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [out0], version=4, verify_only=True) == {
        out0: ErrorCode.invalid_txn_state}
    # Verifying added nothing: the partition still refuses the producer's batch.
    assert produce_transactional(bootstrap, tid, *out0, _records(pid, epoch, 0, b"x"))[0] == \
        ErrorCode.invalid_txn_state
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [out0], version=4) == {out0: ErrorCode.none}
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [out0, out1], version=4, verify_only=True) == {
        out0: ErrorCode.none, out1: ErrorCode.invalid_txn_state}
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch - 1, [out0], version=4, verify_only=True) == {
        out0: ErrorCode.producer_fenced}
    assert add_partitions_to_txn(bootstrap, tid, pid + 1, epoch, [out0], version=4, verify_only=True) == {
        out0: ErrorCode.invalid_producer_id_mapping}
    assert end_txn(bootstrap, tid, pid, epoch, False) == ErrorCode.none


class _CountingCoordinator:
    """The broker's own coordinator, counting the verifications it answers."""

    def __init__(self, coordinator):
        self._coordinator = coordinator
        self.verified = 0

    async def coordinator_of(self, transactional_id):
        return await self._coordinator.coordinator_of(transactional_id)

    async def verify(self, *asked):
        self.verified += 1
        return await self._coordinator.verify(*asked)


def test_only_a_transactions_first_batch_on_a_partition_is_verified(kafka):
    """§19.5.7: a partition holding the producer's open transaction at its epoch asks nobody."""
    service, bootstrap, tid, out = kafka.broker.kafka, kafka.bootstrap, _tid(), ("txn-out", 1)
    counting = _CountingCoordinator(service.transactions)
    routed, service.verifier = service.verifier, RoutedVerifier(service, counting)
    try:
        _, pid, epoch = init_transactional(bootstrap, tid)
        for transaction in range(2):
            assert retry_while_retriable(lambda: add_partitions_to_txn(bootstrap, tid, pid, epoch, [out])) == {
                out: ErrorCode.none}
            for seq in range(3 * transaction, 3 * transaction + 3):
                assert produce_transactional(bootstrap, tid, *out, _records(pid, epoch, seq, b"v"))[0] == \
                    ErrorCode.none
            assert counting.verified == transaction + 1  # the marker closed the first: the second asks again
            assert end_txn(bootstrap, tid, pid, epoch, True) == ErrorCode.none
    finally:
        service.verifier = routed


class _UnreachableCoordinator:
    """A coordinator on a broker nobody listens for."""

    def __init__(self, port: int):
        self._port = port

    async def coordinator_of(self, transactional_id):
        return BrokerAddress(99, "127.0.0.1", self._port)


def test_a_coordinator_that_cannot_be_reached_answers_what_clients_retry(kafka):
    """§19.5.7: nothing is appended; Produce answers NOT_ENOUGH_REPLICAS, TxnOffsetCommit
    COORDINATOR_NOT_AVAILABLE."""
    service, bootstrap, tid, group = kafka.broker.kafka, kafka.bootstrap, _tid(), f"g-{uuid.uuid4().hex[:6]}"
    _, pid, epoch = init_transactional(bootstrap, tid)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    routed, service.verifier = service.verifier, RoutedVerifier(service, _UnreachableCoordinator(port))
    try:
        assert produce_transactional(bootstrap, tid, "txn-out", 0, _records(pid, epoch, 0, b"x"))[0] == \
            ErrorCode.not_enough_replicas
        assert txn_offset_commit(bootstrap, tid, pid, epoch, group, "txn-out", {0: 3}) == {
            0: ErrorCode.coordinator_not_available}
    finally:
        service.verifier = routed


class _HeldAfterVerification:
    """The broker's own verifier, holding a Produce between the coordinator's answer and the append
    until the test releases it: the window KIP-890's guard closes (§19.5.7)."""

    def __init__(self, routed):
        self._routed = routed
        self.answered = threading.Event()
        self.release = threading.Event()

    async def verify(self, *asked):
        error = await self._routed.verify(*asked)
        self.answered.set()
        await trio.to_thread.run_sync(self.release.wait)
        return error


def test_an_abort_between_the_verification_and_the_append_leaves_no_hanging_transaction(kafka):
    """§19.5.7's guard: the producer's first batch on a partition is verified, then its transaction
    is aborted and the ABORT marker reaches the partition, then the batch arrives at the log.  It
    is refused (INVALID_TXN_STATE) and the LSO is not held back by a transaction nobody will end."""
    service, bootstrap, tid, out = kafka.broker.kafka, kafka.bootstrap, _tid(), ("txn-out", 1)
    _, pid, epoch = init_transactional(bootstrap, tid)
    assert retry_while_retriable(lambda: add_partitions_to_txn(bootstrap, tid, pid, epoch, [out])) == {
        out: ErrorCode.none}
    held = _HeldAfterVerification(service.verifier)
    routed, service.verifier = service.verifier, held
    answer: list[tuple[ErrorCode, int]] = []
    producing = threading.Thread(target=lambda: answer.append(
        produce_transactional(bootstrap, tid, *out, _records(pid, epoch, 0, b"late"))))
    try:
        producing.start()
        assert held.answered.wait(RETRY_FOR_S)
        assert end_txn(bootstrap, tid, pid, epoch, False) == ErrorCode.none
        # A retry of the decision answers NONE once its markers are written (§19.5.4).
        assert retry_while_retriable(lambda: end_txn(bootstrap, tid, pid, epoch, False)) == ErrorCode.none
    finally:
        held.release.set()
        producing.join(RETRY_FOR_S)
        service.verifier = routed
    end = list_offset(bootstrap, *out, LATEST)
    assert list_offset(bootstrap, *out, LATEST, isolation_level=READ_COMMITTED) == end
    assert answer == [(ErrorCode.invalid_txn_state, -1)]


def _stable(bootstrap: str, group: str) -> dict[int, tuple[int, ErrorCode]]:
    """The group's offset once no transaction holds it (the markers are written after EndTxn)."""
    def fetch() -> tuple[ErrorCode, dict[int, tuple[int, ErrorCode]]]:
        found = fetch_stable_offsets(bootstrap, group, "txn-out", [0])
        return found[0][1], found

    return retry_while_retriable(lambda: _unstable_as_retriable(fetch()))[1]


def _unstable_as_retriable(answer: tuple[ErrorCode, dict[int, tuple[int, ErrorCode]]]) -> tuple[ErrorCode, dict]:
    error, found = answer
    return (ErrorCode.concurrent_transactions if error == ErrorCode.unstable_offset_commit else error), found


def test_an_abort_drops_the_offsets_and_a_new_epoch_fences_the_old(kafka):
    tid, group = _tid(), f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = kafka.bootstrap
    _, pid, epoch = init_transactional(bootstrap, tid)
    assert end_txn(bootstrap, tid, pid, epoch, True) == ErrorCode.invalid_txn_state  # no transaction open
    assert retry_while_retriable(lambda: add_offsets_to_txn(bootstrap, tid, pid, epoch, group)) == ErrorCode.none
    assert retry_while_retriable(lambda: txn_offset_commit(bootstrap, tid, pid, epoch, group, "txn-out", {0: 3})[0]) \
        == ErrorCode.none
    assert end_txn(bootstrap, tid, pid, epoch, False) == ErrorCode.none
    assert _stable(bootstrap, group) == {0: (-1, ErrorCode.none)}

    assert retry_while_retriable(lambda: add_partitions_to_txn(bootstrap, tid, pid, epoch, [("txn-out", 1)])) == {
        ("txn-out", 1): ErrorCode.none}
    assert init_transactional(bootstrap, tid) == (ErrorCode.none, pid, epoch + 2)  # aborts the open one first
    assert end_txn(bootstrap, tid, pid, epoch, True) == ErrorCode.producer_fenced
    assert end_txn(bootstrap, tid, pid, epoch, True, version=1) == ErrorCode.invalid_producer_epoch  # before KIP-588
    assert add_partitions_to_txn(bootstrap, tid, pid, epoch, [("txn-out", 0)], version=1) == {
        ("txn-out", 0): ErrorCode.invalid_producer_epoch}
    assert txn_offset_commit(bootstrap, tid, pid, epoch, group, "txn-out", {0: 9}) == {
        0: ErrorCode.invalid_producer_epoch}
    assert end_txn(bootstrap, tid, pid + 1, epoch + 2, True) == ErrorCode.invalid_producer_id_mapping


def test_a_fenced_producers_produce_answers_invalid_producer_epoch(kafka):
    """§19.3, §19.5.7: whether the partition knows the newer epoch (its abort marker) or asks the coordinator,
    the old epoch's Produce answers INVALID_PRODUCER_EPOCH, as Kafka does, never PRODUCER_FENCED (which
    librdkafka takes as abortable in a Produce)."""
    bootstrap, tid = kafka.bootstrap, _tid()
    _, pid, old = init_transactional(bootstrap, tid)
    assert retry_while_retriable(lambda: add_partitions_to_txn(bootstrap, tid, pid, old, [("txn-out", 0)])) == {
        ("txn-out", 0): ErrorCode.none}
    assert produce_transactional(bootstrap, tid, "txn-out", 0, _records(pid, old, 0, b"zombie"))[0] == ErrorCode.none
    assert init_transactional(bootstrap, tid)[:2] == (ErrorCode.none, pid)  # aborts the open one first
    for partition in (0, 1):
        answer = produce_transactional(bootstrap, tid, "txn-out", partition, _records(pid, old, 1 - partition, b"x"))
        assert answer[0] == ErrorCode.invalid_producer_epoch, (partition, answer)
