"""The transaction coordinator in a real broker (§19.5): InitProducerId with a transactional id,
AddPartitionsToTxn, EndTxn, verification, fencing, a timeout abort, markers retried until every
partition has one, and a second coordinator loading what the first wrote to __transaction_state.
The markers go to a recording fake of the partition side's seam (the real one is main's)."""

from __future__ import annotations

from typing import Sequence

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from tests.helpers.broker_testing import make_config
from trikafka.broker import serve
from trikafka.broker.kafka.transactions.coordinator import TransactionCoordinator
from trikafka.broker.kafka.transactions.placement import transaction_topic
from trikafka.broker.engine.partition import Refused
from trikafka.kafka.group_records import TRANSACTION_STATE_TOPIC
from trikafka.kafka.txn_records import TxnState
from trikafka.broker.engine.errors import EngineError

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
    kafka = broker.kafka
    coordinator = TransactionCoordinator(transaction_topic(kafka), kafka.config, kafka.clock_ms, markers,
                                         kafka.producer_ids.new_id)
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
    # A new producer of the id: the old epoch's transaction is aborted first, at the next epoch (the
    # fence), and the request is answered once that abort is complete (§19.5.3), at the epoch after it.
    assert await coordinator.init_producer_id("zombie", 60_000) == (ErrorCode.none, pid, epoch + 2)
    assert markers.calls[-1] == (pid, epoch + 1, False, markers.calls[-1][3], tuple(OUT[:1]))
    assert (await state_of(coordinator, "zombie")).state == TxnState.EMPTY
    for old_epoch in (epoch, epoch + 1):  # the fenced producer's, and the fence's, never handed out
        assert await coordinator.end_transaction("zombie", pid, old_epoch, True) == ErrorCode.producer_fenced

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


class GatedMarkers(RecordingMarkers):
    """Markers written only once ``release`` is set (never, if it is not); ``asked`` is set at the
    first call, when the decision is committed and its markers are under way."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = trio.Event()
        self.release = trio.Event()

    async def write_markers(self, producer_id, producer_epoch, commit, coordinator_epoch, partitions):
        self.asked.set()
        await self.release.wait()
        return await super().write_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions)


async def committed_with_markers_held(coordinator: TransactionCoordinator, markers: GatedMarkers, tid: str):
    """A producer of ``tid`` whose transaction on OUT[0] is in PrepareCommit, its markers held."""
    _, pid, epoch = await coordinator.init_producer_id(tid, 60_000)
    assert await coordinator.add_partitions(tid, pid, epoch, OUT[:1]) == ErrorCode.none
    assert await coordinator.end_transaction(tid, pid, epoch, True) == ErrorCode.none
    await markers.asked.wait()
    assert (await state_of(coordinator, tid)).state == TxnState.PREPARE_COMMIT
    return pid, epoch


async def test_requests_during_prepare_commit_wait_for_the_complete_commit(nursery, tmp_path):
    """§19.5.3's wait: the next transaction's AddPartitionsToTxn, and a retried EndTxn, sent while the
    markers are written are answered NONE once CompleteCommit is written, not CONCURRENT_TRANSACTIONS."""
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3))
    markers = GatedMarkers()
    coordinator = await start_coordinator(nursery, broker, markers)
    pid, epoch = await committed_with_markers_held(coordinator, markers, "tx")
    answers: dict[str, ErrorCode] = {}

    async def ask(name, request) -> None:
        answers[name] = await request()

    async with trio.open_nursery() as requests:
        requests.start_soon(ask, "add", lambda: coordinator.add_partitions("tx", pid, epoch, OUT[1:]))
        await trio.testing.wait_all_tasks_blocked()
        assert answers == {}  # held while the markers are written
        assert (await state_of(coordinator, "tx")).state == TxnState.PREPARE_COMMIT
        markers.release.set()
    assert answers == {"add": ErrorCode.none}
    value = await state_of(coordinator, "tx")
    assert (value.state, value.partitions) == (TxnState.ONGOING, tuple(OUT[1:]))  # the next transaction

    markers.asked, markers.release = trio.Event(), trio.Event()
    assert await coordinator.end_transaction("tx", pid, epoch, True) == ErrorCode.none
    await markers.asked.wait()
    async with trio.open_nursery() as requests:
        requests.start_soon(ask, "end again", lambda: coordinator.end_transaction("tx", pid, epoch, True))
        await trio.testing.wait_all_tasks_blocked()
        assert "end again" not in answers
        markers.release.set()
    assert answers["end again"] == ErrorCode.none  # a retry of the decision, answered once it is complete
    assert (await state_of(coordinator, "tx")).state == TxnState.COMPLETE_COMMIT
    broker.shutdown()


async def test_a_completion_that_does_not_come_answers_concurrent_transactions_after_the_bound(nursery, tmp_path):
    """§19.5.3: the wait is bounded by transaction.completion.wait.ms; then CONCURRENT_TRANSACTIONS, as Kafka."""
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3,
                                                    transaction_completion_wait_ms=50))
    markers = GatedMarkers()  # never released: the markers are never written
    coordinator = await start_coordinator(nursery, broker, markers)
    pid, epoch = await committed_with_markers_held(coordinator, markers, "stuck")
    assert await coordinator.add_partitions("stuck", pid, epoch, OUT[1:]) == ErrorCode.concurrent_transactions
    assert (await coordinator.init_producer_id("stuck", 60_000))[0] == ErrorCode.concurrent_transactions
    assert await coordinator.end_transaction("stuck", pid, epoch, True) == ErrorCode.concurrent_transactions
    # Another producer id is answered at once, whatever is under way.
    assert await coordinator.add_partitions("stuck", pid + 1, epoch, OUT[1:]) == ErrorCode.invalid_producer_id_mapping
    assert (await state_of(coordinator, "stuck")).state == TxnState.PREPARE_COMMIT
    # A new producer of an Ongoing id: the fence is written, its abort never completes, and after the
    # bound the request answers CONCURRENT_TRANSACTIONS as Kafka does (the client retries).
    _, open_pid, open_epoch = await coordinator.init_producer_id("open", 60_000)
    assert await coordinator.add_partitions("open", open_pid, open_epoch, OUT[:1]) == ErrorCode.none
    assert (await coordinator.init_producer_id("open", 60_000))[0] == ErrorCode.concurrent_transactions
    fence = await state_of(coordinator, "open")
    assert (fence.state, fence.producer_epoch) == (TxnState.PREPARE_ABORT, open_epoch + 1)
    broker.shutdown()


class NotLedHere:
    """A partition this broker no longer leads, as the partition directory answers for it."""

    def read_view(self):
        raise Refused(EngineError.NOT_LEADER_FOR_PARTITION, "led elsewhere now")


async def test_a_request_waiting_when_leadership_moves_answers_not_coordinator(nursery, tmp_path, monkeypatch):
    """§19.5.3: a request waiting on an id whose partition this broker stops coordinating answers what
    a request arriving then answers, NOT_COORDINATOR, when the partition is dropped: the wait's bound
    here is far beyond the test's."""
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3,
                                                    transaction_completion_wait_ms=3_600_000))
    markers = GatedMarkers()  # held: the id stays in PrepareCommit, its markers under way
    coordinator = await start_coordinator(nursery, broker, markers)
    pid, epoch = await committed_with_markers_held(coordinator, markers, "moved")
    index = (await coordinator.partition_of("moved")).index
    answers: dict[str, ErrorCode] = {}

    async def ask() -> None:
        answers["add"] = await coordinator.add_partitions("moved", pid, epoch, OUT[1:])

    directory = broker.engine.directory
    led_here = directory.partition
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as requests:
            requests.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert answers == {}  # waiting for the markers
            monkeypatch.setattr(directory, "partition", lambda topic, partition: NotLedHere()
                                if (topic, partition) == (TRANSACTION_STATE_TOPIC, index) else
                                led_here(topic, partition))
            coordinator.on_role(TRANSACTION_STATE_TOPIC, index, "follower")
    assert answers == {"add": ErrorCode.not_coordinator}
    broker.shutdown()


async def test_complete_commit_asks_no_flush_and_the_next_transactions_write_commits_it(nursery, tmp_path):
    """§19.5.3: Complete* is applied once in the leader's log, with no flush of its own; the next
    transaction's Ongoing write, after it in the same log, commits both."""
    broker = await nursery.start(serve, make_config(tmp_path, kafka_port=0, transaction_state_log_num_partitions=3))
    coordinator = await start_coordinator(nursery, broker, RecordingMarkers())
    error, pid, epoch = await coordinator.init_producer_id("tx", 60_000)
    assert error == ErrorCode.none
    assert await coordinator.add_partitions("tx", pid, epoch, OUT) == ErrorCode.none
    assert await coordinator.end_transaction("tx", pid, epoch, True) == ErrorCode.none
    await wait_state(coordinator, "tx", TxnState.COMPLETE_COMMIT)
    part = await coordinator.partition_of("tx")
    assert not isinstance(part, ErrorCode)
    log = broker.kafka.engine.directory.partition(TRANSACTION_STATE_TOPIC, part.index).log
    assert log.visible_end < log.end_offset  # the CompleteCommit: appended, not flushed
    assert await coordinator.add_partitions("tx", pid, epoch, OUT[:1]) == ErrorCode.none
    assert log.visible_end == log.end_offset  # the Ongoing's flush covered it
    broker.shutdown()
