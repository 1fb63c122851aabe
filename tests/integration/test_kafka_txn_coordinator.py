"""The transaction coordinator in a real broker (§19.5): InitProducerId with a transactional id,
AddPartitionsToTxn, EndTxn, verification, fencing, a timeout abort, markers retried until every
partition has one, and a second coordinator loading what the first wrote to __transaction_state.
The markers go to a recording fake of the partition side's seam (the real one is main's)."""

from __future__ import annotations

from typing import Sequence

import trio
from kio.schema.errors import ErrorCode

from tests.helpers.broker_testing import make_config
from trikafka.broker import serve
from trikafka.broker.kafka.transactions.coordinator import TransactionCoordinator
from trikafka.kafka.txn_records import TxnState

OUT = [("out", 0), ("out", 1)]
WAIT_S = 30


class RecordingMarkers:
    """Records every marker call; each partition in ``fail_once`` fails its first call."""

    def __init__(self, fail_once: Sequence[tuple[str, int]] = ()):
        self.calls: list[tuple[int, int, bool, int, tuple[tuple[str, int], ...]]] = []
        self._fail_once = set(fail_once)

    async def write_markers(self, producer_id, producer_epoch, commit, coordinator_epoch, partitions):
        self.calls.append((producer_id, producer_epoch, commit, coordinator_epoch, tuple(partitions)))
        errors = {}
        for p in partitions:
            errors[p] = ErrorCode.not_leader_or_follower if p in self._fail_once else ErrorCode.none
            self._fail_once.discard(p)
        return errors


async def start_coordinator(nursery, broker, markers) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(broker.kafka, markers, broker.kafka.producer_ids.new_id)
    coordinator.start(nursery)
    with trio.fail_after(WAIT_S):
        while isinstance(await coordinator.coordinator_of("any"), ErrorCode):  # creates __transaction_state
            await trio.sleep(0.01)
    return coordinator


async def state_of(coordinator: TransactionCoordinator, tid: str):
    with trio.fail_after(WAIT_S):
        while isinstance(part := await coordinator.partition_of(tid), ErrorCode):
            await trio.sleep(0.01)
    return part.value(tid)


async def wait_state(coordinator: TransactionCoordinator, tid: str, state: TxnState):
    with trio.fail_after(WAIT_S):
        while (value := await state_of(coordinator, tid)) is None or value.state != state:
            await trio.sleep(0.01)
    return value


async def test_a_committed_transaction_and_its_markers(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3))
    markers = RecordingMarkers(fail_once=[("out", 1)])
    coordinator = await start_coordinator(nursery, broker, markers)

    error, pid, epoch = await coordinator.init_producer_id("tx", 60_000)
    assert (error, epoch) == (ErrorCode.none, 0) and pid >= 0
    error, pid_again, epoch = await coordinator.init_producer_id("tx", 60_000)
    assert (error, pid_again, epoch) == (ErrorCode.none, pid, 1)  # the epoch bump fences epoch 0

    assert await coordinator.add_partitions("tx", pid, 0, OUT) == ErrorCode.producer_fenced
    assert await coordinator.verify("tx", pid, 1, "out", 0) == ErrorCode.invalid_txn_state
    assert await coordinator.add_partitions("tx", pid, 1, OUT) == ErrorCode.none
    assert await coordinator.verify("tx", pid, 1, "out", 0) == ErrorCode.none
    assert await coordinator.verify("tx", pid, 1, "other", 0) == ErrorCode.invalid_txn_state
    assert await coordinator.verify("tx", pid, 0, "out", 0) == ErrorCode.producer_fenced
    assert await coordinator.end_transaction("tx", pid + 1, 1, True) == ErrorCode.invalid_producer_id_mapping

    assert await coordinator.end_transaction("tx", pid, 1, True) == ErrorCode.none
    done = await wait_state(coordinator, "tx", TxnState.COMPLETE_COMMIT)
    assert done.partitions == ()
    # Both partitions got the COMMIT; the one that failed was sent again, alone.
    assert [c[4] for c in markers.calls] == [tuple(OUT), (("out", 1),)]
    assert all(c[:3] == (pid, 1, True) for c in markers.calls)
    assert await coordinator.end_transaction("tx", pid, 1, True) == ErrorCode.none  # a retry
    assert await coordinator.end_transaction("tx", pid, 1, False) == ErrorCode.invalid_txn_state

    # A coordinator that loads the partition from the log sees the same state.
    reloaded = await start_coordinator(nursery, broker, RecordingMarkers())
    assert await state_of(reloaded, "tx") == done
    broker.shutdown()


async def test_fencing_an_ongoing_transaction_and_a_timeout_abort(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3))
    markers = RecordingMarkers()
    coordinator = await start_coordinator(nursery, broker, markers)

    _, pid, epoch = await coordinator.init_producer_id("zombie", 60_000)
    assert await coordinator.add_partitions("zombie", pid, epoch, OUT[:1]) == ErrorCode.none
    # A new producer of the id: the old epoch's transaction is aborted first, at the next epoch.
    assert (await coordinator.init_producer_id("zombie", 60_000))[0] == ErrorCode.concurrent_transactions
    await wait_state(coordinator, "zombie", TxnState.COMPLETE_ABORT)
    assert markers.calls[-1] == (pid, epoch + 1, False, markers.calls[-1][3], tuple(OUT[:1]))
    assert await coordinator.end_transaction("zombie", pid, epoch, True) == ErrorCode.producer_fenced
    assert await coordinator.init_producer_id("zombie", 60_000) == (ErrorCode.none, pid, epoch + 2)

    _, pid2, epoch2 = await coordinator.init_producer_id("slow", 1)
    assert await coordinator.add_partitions("slow", pid2, epoch2, OUT) == ErrorCode.none
    with trio.fail_after(WAIT_S):
        while await coordinator.abort_expired() == 0:
            await trio.sleep(0.01)
    await wait_state(coordinator, "slow", TxnState.COMPLETE_ABORT)
    assert markers.calls[-1][:3] == (pid2, epoch2 + 1, False)
    assert await coordinator.end_transaction("slow", pid2, epoch2, True) == ErrorCode.producer_fenced
    assert (await coordinator.init_producer_id("x", 900_001))[0] == ErrorCode.invalid_transaction_timeout
    broker.shutdown()


async def test_an_id_unused_past_its_expiration_is_removed_and_comes_back_as_a_new_producer(nursery, tmp_path):
    """§19.5.3's expiry: a tombstone written for an id at rest; an open transaction's id is kept."""
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3,
                                                    transactional_id_expiration_ms=1))
    coordinator = await start_coordinator(nursery, broker, RecordingMarkers())
    _, pid, _ = await coordinator.init_producer_id("idle", 60_000)
    _, open_pid, open_epoch = await coordinator.init_producer_id("open", 60_000)
    assert await coordinator.add_partitions("open", open_pid, open_epoch, OUT) == ErrorCode.none
    with trio.fail_after(WAIT_S):
        while await coordinator.remove_expired_ids() == 0:
            await trio.sleep(0.01)
    assert await coordinator.describe("idle") == ErrorCode.transactional_id_not_found
    assert (await coordinator.describe("open")).state == TxnState.ONGOING
    error, new_pid, epoch = await coordinator.init_producer_id("idle", 60_000)
    assert error == ErrorCode.none and new_pid != pid and epoch == 0
    # A coordinator loading the partition reads the tombstone: the removed id's first state is gone.
    reloaded = await start_coordinator(nursery, broker, RecordingMarkers())
    assert (await state_of(reloaded, "idle")).producer_id == new_pid
    broker.shutdown()
