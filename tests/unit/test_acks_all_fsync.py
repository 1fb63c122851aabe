"""``acks.all.fsync`` (docs/protocol.md §12.6): when an unreplicated partition answers acks -1.

``true`` (the default): once a flush covered the write, so it survives a power cut.
``false``: a Kafka-format partition answers at the append and asks for no flush (readers see
its log end at once, §16.6); the count and interval rules of §7.2 flush it later; a process
crash keeps what was acknowledged, a power cut may lose it.  A 0.7 partition waits for the
flush under both values: its readers see only flushed bytes.
"""

from __future__ import annotations

import datetime
import random

import trio
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from tests.helpers.kafka_batches import batches
from trikafka.broker.engine.engine import ACKS_ALL, Engine, PartitionWrite
from trikafka.broker.engine.partition import LocalPartition
from trikafka.broker.engine.waiters import VisibleEndWaiters
from trikafka.broker.flusher import FlushScheduler
from trikafka.broker.kafka.produce import produce
from trikafka.broker.metrics import BrokerMetrics
from trikafka.broker.seams import KafkaAppend
from trikafka.broker.server import inline_blocking
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request, decode_response, encode_request, parse_request
from trikafka.log.clock import ManualClock
from trikafka.log.config import LogConfig
from trikafka.log.log import AppendResult
from trikafka.log.manager import LogManager
from trikafka.testing import FakeFileSystem
from trikafka.wire.messageset import build_message_set

ROOT = "/data"
# No flush by the rules of §7.2 within a test: only an acknowledgement asks for one.
V2 = LogConfig(record_format="v2", flush_interval_messages=10_000, flush_interval_ms=600_000)
WRITES = 5


def _manager(fs: FakeFileSystem, config: LogConfig) -> LogManager:
    manager = LogManager(ROOT, config, fs, clock_ms=ManualClock(1_000), partitions=1, roll_on_append=False)
    manager.open()
    return manager


async def _partition(nursery: trio.Nursery, fs: FakeFileSystem, *, ack_fsync: bool,
                     config: LogConfig = V2) -> tuple[Engine, LocalPartition, FlushScheduler]:
    manager = _manager(fs, config)
    waiters = VisibleEndWaiters()
    flusher = await nursery.start(FlushScheduler(manager, run_blocking=inline_blocking).run)
    log = manager.get_or_create("t", 0)
    log.add_visible_listener(waiters.on_visible)
    flusher.track(log)
    engine = Engine(directory=None, admin=None, waiters=waiters, metrics=BrokerMetrics())  # type: ignore[arg-type]
    return engine, LocalPartition(log, flusher, ack_fsync=ack_fsync), flusher


async def _acknowledged(engine: Engine, partition: LocalPartition, writes: int = WRITES,
                        records_per_write: int = 1) -> int:
    """Produce ``writes`` Kafka batches with acks -1, one at a time as a client waiting for each answer;
    the log end the last answer covered."""
    end = 0
    for _ in range(writes):
        (outcome,) = await engine.append([PartitionWrite(partition, bytearray(batches([records_per_write])),
                                                         KafkaAppend())], ACKS_ALL, trio.current_time() + 10)
        assert isinstance(outcome, AppendResult), outcome
        end = outcome.next_offset
    return end


def _durable_end(fs: FakeFileSystem, partition: LocalPartition) -> int:
    segment = partition.log.segments.segments[-1]
    return segment.start + fs.durable_size(segment.path)


async def test_true_answers_acks_all_once_a_flush_covered_the_write():
    fs = FakeFileSystem(seed=1)
    async with trio.open_nursery() as nursery:
        engine, partition, flusher = await _partition(nursery, fs, ack_fsync=True)
        end = await _acknowledged(engine, partition)
        assert _durable_end(fs, partition) == end == partition.log.end_offset
        assert flusher.flushes_completed == WRITES  # one per answer: each waited for its own
        nursery.cancel_scope.cancel()


async def test_false_answers_acks_all_at_the_append_readable_without_a_flush():
    fs = FakeFileSystem(seed=1)
    async with trio.open_nursery() as nursery:
        engine, partition, flusher = await _partition(nursery, fs, ack_fsync=False)
        end = await _acknowledged(engine, partition)
        assert partition.log.end_offset == end and _durable_end(fs, partition) == 0
        assert flusher.flushes_completed == 0 and not flusher.in_flight(partition.log)  # nor asked for
        assert partition.read_view().end == end  # readers see every acknowledged byte (§16.6)
        nursery.cancel_scope.cancel()


async def test_false_leaves_the_fsync_to_the_message_count_rule():
    fs = FakeFileSystem(seed=1)
    config = LogConfig(record_format="v2", flush_interval_messages=3, flush_interval_ms=600_000)
    async with trio.open_nursery() as nursery:
        engine, partition, flusher = await _partition(nursery, fs, ack_fsync=False, config=config)
        end = await _acknowledged(engine, partition, writes=1, records_per_write=3)
        assert _durable_end(fs, partition) == 0  # answered before the flush the count asked for ran
        await flusher.wait_idle(partition.log)
        assert _durable_end(fs, partition) == end and flusher.flushes_completed == 1
        nursery.cancel_scope.cancel()


async def test_false_leaves_the_fsync_to_the_flush_interval(autojump_clock):
    fs = FakeFileSystem(seed=1)
    config = LogConfig(record_format="v2", flush_interval_messages=10_000, flush_interval_ms=200)
    async with trio.open_nursery() as nursery:
        engine, partition, flusher = await _partition(nursery, fs, ack_fsync=False, config=config)
        flushed = trio.Event()
        partition.log.add_visible_listener(lambda log: flushed.set())
        started_s = trio.current_time()
        end = await _acknowledged(engine, partition, writes=1)
        assert trio.current_time() == started_s and _durable_end(fs, partition) == 0
        await flushed.wait()
        assert trio.current_time() - started_s >= 0.1  # the interval's deadline, less its lead (at most half)
        assert _durable_end(fs, partition) == end
        nursery.cancel_scope.cancel()


async def test_a_07_partition_waits_for_the_flush_under_both_values():
    """Its readers see only flushed bytes (§7.2): an answer before the flush would name an
    offset nobody can fetch yet."""
    message_set = build_message_set([b"x" * 40])
    for ack_fsync in (True, False):
        fs = FakeFileSystem(seed=1)
        async with trio.open_nursery() as nursery:
            engine, partition, flusher = await _partition(nursery, fs, ack_fsync=ack_fsync,
                                                          config=LogConfig(flush_interval_messages=10_000,
                                                                           flush_interval_ms=600_000))
            (outcome,) = await engine.append([PartitionWrite(partition, message_set)], ACKS_ALL,
                                             trio.current_time() + 10)
            assert isinstance(outcome, AppendResult)
            assert partition.log.visible_end == outcome.next_offset == _durable_end(fs, partition)
            assert flusher.flushes_completed == 1
            nursery.cancel_scope.cancel()


async def _acknowledge_then_crash(seed: int, *, ack_fsync: bool, mode: str) -> tuple[int, int]:
    """Acknowledge ``WRITES`` batches, then the broker's process dies and the fake machine crashes in
    ``mode``; the acknowledged end and the end the log recovers."""
    fs = FakeFileSystem(seed=seed)
    async with trio.open_nursery() as nursery:
        engine, partition, _ = await _partition(nursery, fs, ack_fsync=ack_fsync)
        end = await _acknowledged(engine, partition)
        fs.freeze()  # the process is gone: nothing more reaches the disk
        nursery.cancel_scope.cancel()
    fs.crash(mode, rng=random.Random(seed))
    return end, _manager(fs, V2).get_or_create("t", 0).end_offset


async def test_false_keeps_acknowledged_writes_over_a_process_crash():
    for seed in range(5):
        end, recovered = await _acknowledge_then_crash(seed, ack_fsync=False, mode="keep_all")
        assert recovered == end


async def test_false_may_lose_acknowledged_writes_in_a_power_cut_and_true_never_does():
    lost = []
    for seed in range(10):
        end, recovered = await _acknowledge_then_crash(seed, ack_fsync=True, mode="random")
        assert recovered == end, seed
        end, recovered = await _acknowledge_then_crash(seed, ack_fsync=False, mode="random")
        assert recovered <= end
        lost.append(recovered < end)
    assert any(lost), "a power cut that loses no unflushed byte in 10 seeds: the test shows nothing"


class _Writes:
    """The Produce handler's collaborators (``PartitionWrites``) around one partition, nothing denied."""

    verifier = None

    def __init__(self, engine: Engine, partition: LocalPartition):
        self.engine, self._partition = engine, partition
        self.authorizer = self  # denies nothing
        self.clock_ms = lambda: 1_000

    def denied(self, api: object, name: str) -> None:
        return None

    async def partition_for(self, topic: str, index: int, *, write: bool) -> LocalPartition:
        return self._partition

    def log_start_offset(self, partition: LocalPartition) -> int:
        return partition.log.start_offset

    def timestamp_type(self, topic: str) -> str:
        return "CreateTime"

    def compacts(self, topic: str) -> bool:
        return False


def _produce_request(correlation_id: int) -> Request:
    body = ProduceRequest(transactional_id=None, acks=i16(ACKS_ALL), timeout=datetime.timedelta(seconds=10),
                          topic_data=(TopicProduceData(name="t", partition_data=(
                              PartitionProduceData(index=i32(0), records=batches([2])),)),))
    return parse_request(encode_request(KafkaApi.PRODUCE, 9, correlation_id, "t", body)[4:])


async def test_false_answers_acks_all_when_handled_true_defers_the_answer_to_the_flush():
    """Under ``false`` nothing is left to wait for once appended: the handler returns the answer itself,
    which the connection sends as it sends an acks 1 answer (no deferred answer, no waiter, no sender
    task, §16.2); under ``true`` it returns the wait for the flush."""
    for ack_fsync in (False, True):
        async with trio.open_nursery() as nursery:
            engine, partition, _ = await _partition(nursery, FakeFileSystem(seed=1), ack_fsync=ack_fsync)
            answers = []
            for correlation_id in (1, 2):
                answer = await produce(_Writes(engine, partition), _produce_request(correlation_id))
                assert callable(answer) is ack_fsync, (ack_fsync, answer)
                answers.append(await answer() if callable(answer) else answer)
            for correlation_id, (base_offset, chunks) in enumerate(zip((0, 2), answers), 1):
                frame = b"".join(bytes(chunk) for chunk in chunks)  # type: ignore[arg-type]
                got, response = decode_response(KafkaApi.PRODUCE, 9, frame[4:])
                (part,) = response.responses[0].partition_responses
                assert (got, part.error_code, part.base_offset) == (correlation_id, ErrorCode.none, base_offset)
            nursery.cancel_scope.cancel()


async def test_true_calls_back_once_the_flush_covered_the_write_and_leaves_no_waiter():
    """``Appending.when_acknowledged``: the connection's way to keep its sender asleep until an acks -1
    answer is ready (§16.2); called once, from the flush's completion, with nothing left registered."""
    async with trio.open_nursery() as nursery:
        engine, partition, flusher = await _partition(nursery, FakeFileSystem(seed=1), ack_fsync=True)
        appending = await engine.append_pipelined([PartitionWrite(partition, bytearray(batches([1])), KafkaAppend())],
                                                  ACKS_ALL, trio.current_time() + 10)
        assert appending.acknowledged_now() is None
        called: list[int] = []
        assert appending.when_acknowledged(lambda: called.append(partition.log.visible_end))
        await flusher.wait_idle(partition.log)
        assert called == [partition.log.end_offset]
        assert engine.waiters.waiting_count() == 0
        (outcome,) = await appending.acknowledged()  # answers without waiting
        assert isinstance(outcome, AppendResult)
        nursery.cancel_scope.cancel()
