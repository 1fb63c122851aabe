"""trikafka's extensions (spec §9): PRODUCE_ACKED and FETCH_WAIT.

Timing is checked exactly: these brokers run on ``FakeFileSystem`` with
``inline_blocking`` (no worker threads) and talk over in-memory streams, so
Trio's autojump clock only moves when every task waits for a timer, and the
times asserted are the times the broker chose.
"""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from trikafka.broker import serve
from trikafka.broker.server import inline_blocking
from trikafka.testing import FakeFileSystem, start_in_memory
from trikafka.log.flushing import FlushTicket
from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchWaitRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    decode_multifetch_payload,
    decode_produce_acked_payload,
)

from tests.helpers.broker_testing import RawClient, make_config, memory_client, messages

NEVER_MS = 3_600_000  # a flush timer that does not fire during a test


@pytest.fixture
def fake_fs():
    return FakeFileSystem(seed=1)


async def start(nursery, tmp_path, fs, **changes):
    settings = dict(log_flush_interval=10_000, log_default_flush_scheduler_interval_ms=NEVER_MS,
                    num_partitions=2, max_message_size=100)
    settings.update(changes)
    config = make_config(tmp_path, **settings).replace(log_dir="/data")
    return await start_in_memory(nursery, config, fs)


def bad_crc(data: bytes) -> bytes:
    corrupted = bytearray(data)
    corrupted[-1] ^= 0x55
    return bytes(corrupted)


async def test_acks_1_answers_after_append_with_independent_per_part_results(nursery, tmp_path, fake_fs,
                                                                             autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    a, b = messages(b"first"), messages(b"second", b"third")
    request = ProduceAckedRequest(1, 10_000, (
        ProducePart("t", 0, a),
        ProducePart("bad/name", 0, a),
        ProducePart("t", 5, a),
        ProducePart("t", 0, bad_crc(b)),
        ProducePart("t", 1, messages(b"x" * 101)),
        ProducePart("t", 0, b),
        ProducePart("u", 1, b""),
    ))
    started = trio.current_time()
    response = await client.call(request)
    assert trio.current_time() == started
    results = decode_produce_acked_payload(response.payload)
    assert [(r.topic, r.partition, r.error, r.base_offset, r.next_offset) for r in results] == [
        ("t", 0, ErrorCode.NO_ERROR, 0, len(a)),
        ("bad/name", 0, ErrorCode.INVALID_TOPIC, -1, -1),
        ("t", 5, ErrorCode.WRONG_PARTITION, -1, -1),
        ("t", 0, ErrorCode.INVALID_MESSAGE, -1, -1),
        ("t", 1, ErrorCode.MESSAGE_SIZE_TOO_LARGE, -1, -1),
        ("t", 0, ErrorCode.NO_ERROR, len(a), len(a) + len(b)),
        ("u", 1, ErrorCode.NO_ERROR, 0, 0),
    ]
    log = broker.log_manager.get("t", 0)
    assert (log.end_offset, log.visible_end) == (len(a) + len(b), 0)  # appended, not yet flushed
    assert not any("bad" in name for name in fake_fs.listdir("/data"))
    assert broker.log_manager.get("t", 5) is None


async def test_acks_minus_1_answers_once_flushed_and_visible(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    data = messages(b"durable")
    response = await client.call(ProduceAckedRequest(-1, 10_000, (ProducePart("t", 0, data),)))
    [result] = decode_produce_acked_payload(response.payload)
    assert (result.error, result.next_offset) == (ErrorCode.NO_ERROR, len(data))
    log = broker.log_manager.get("t", 0)
    assert log.visible_end == len(data)
    assert fake_fs.durable_size("/data/t-0/" + "0" * 20 + ".kafka") == len(data)


async def test_acks_minus_1_times_out_when_the_flush_does_not_finish(nursery, tmp_path, fake_fs, autojump_clock):
    release = trio.Event()

    async def stuck_fsync(fn):
        # Only a flush's fsync hangs.  The broker also runs its log load and
        # close through run_blocking; holding those would hang the start (and
        # the fixture's teardown) rather than the flush under test.
        if isinstance(getattr(fn, "__self__", None), FlushTicket):
            await release.wait()
        return await inline_blocking(fn)

    config = make_config(tmp_path, log_flush_interval=10_000, log_default_flush_scheduler_interval_ms=NEVER_MS)
    broker = await start_in_memory(nursery, config.replace(log_dir="/data"), fake_fs, run_blocking=stuck_fsync)
    try:
        client = await memory_client(broker)
        started = trio.current_time()
        ok_part, bad_part = ProducePart("t", 0, messages(b"slow")), ProducePart("t", 0, bad_crc(messages(b"x")))
        response = await client.call(ProduceAckedRequest(-1, 2_500, (ok_part, bad_part)))
        assert trio.current_time() - started == pytest.approx(2.5)
        results = decode_produce_acked_payload(response.payload)
        assert [(r.error, r.base_offset) for r in results] == [(ErrorCode.REQUEST_TIMED_OUT, -1),
                                                               (ErrorCode.INVALID_MESSAGE, -1)]
        log = broker.log_manager.get("t", 0)
        assert broker.flusher.in_flight(log) and log.visible_end == 0  # the fsync really is stuck
    finally:
        release.set()  # never leave the broker's shielded flush (and so the teardown) hanging
    await broker.flusher.wait_idle(log)
    assert log.visible_end == len(messages(b"slow"))  # "the append may still become durable"


async def test_unsupported_acks_value_closes(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    await client.send(ProduceAckedRequest(2, 1000, (ProducePart("t", 0, messages(b"x")),)))
    await client.assert_closed()


async def test_fetch_wait_sleeps_until_a_flush_makes_data_visible(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    calls = []
    original = broker.handler_07.fetch_part
    broker.handler_07.fetch_part = lambda part: calls.append(part) or original(part)
    consumer, producer = await memory_client(broker), await memory_client(broker)
    data = messages(b"news")
    t0 = trio.current_time()
    response: list = []

    async def long_poll():
        response.append(await consumer.call(FetchWaitRequest(10_000, 1, (FetchPart("t", 0, 0, 1000),))))
        response.append(trio.current_time() - t0)

    nursery.start_soon(long_poll)
    await trio.sleep(2)
    await producer.send(ProduceRequest(ProducePart("t", 0, data)))  # appended, invisible: no wake
    await producer.offsets("t", 0, -1)
    await trio.sleep(3)
    assert not response
    await broker.flusher.flush(broker.log_manager.get("t", 0))
    await trio.testing.wait_all_tasks_blocked()
    frame, elapsed = response
    assert elapsed == pytest.approx(5.0)
    assert decode_multifetch_payload(frame.payload) == [(ErrorCode.NO_ERROR, data)]
    assert len(calls) == 2  # one look before waiting, one after the wake: no polling
    assert broker.engine.waiters.waiting_count() == 0


async def test_fetch_wait_answers_at_max_wait_with_what_there_is(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    started = trio.current_time()
    frame = await client.call(FetchWaitRequest(1_500, 1, (FetchPart("t", 0, 0, 100), FetchPart("t", 1, 0, 100))))
    assert trio.current_time() - started == pytest.approx(1.5)
    assert decode_multifetch_payload(frame.payload) == [(ErrorCode.NO_ERROR, b""), (ErrorCode.NO_ERROR, b"")]
    assert broker.engine.waiters.waiting_count() == 0


async def test_fetch_wait_counts_min_bytes_across_parts(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    a, b = messages(b"a" * 10), messages(b"b" * 20)
    await client.call(ProduceAckedRequest(-1, 1000, (ProducePart("t", 0, a), ProducePart("t", 1, b))))
    parts = (FetchPart("t", 0, 0, 100), FetchPart("t", 1, 0, 100))
    started = trio.current_time()
    frame = await client.call(FetchWaitRequest(5_000, len(a) + len(b), parts))
    assert trio.current_time() == started  # enough bytes across both parts: no wait
    assert decode_multifetch_payload(frame.payload) == [(ErrorCode.NO_ERROR, a), (ErrorCode.NO_ERROR, b)]
    frame = await client.call(FetchWaitRequest(5_000, len(a) + len(b) + 1, parts))
    assert trio.current_time() - started == pytest.approx(5.0)


async def test_fetch_wait_with_an_error_part_answers_at_once(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start(nursery, tmp_path, fake_fs)
    client = await memory_client(broker)
    started = trio.current_time()
    frame = await client.call(FetchWaitRequest(5_000, 1, (FetchPart("t", 0, 0, 100), FetchPart("t", 7, 0, 100))))
    assert trio.current_time() == started
    assert decode_multifetch_payload(frame.payload) == [(ErrorCode.NO_ERROR, b""), (ErrorCode.WRONG_PARTITION, b"")]


async def test_shutdown_answers_long_polls_at_once(tmp_path, fake_fs, autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, fake_fs)
        client = await memory_client(broker)
        started = trio.current_time()
        await client.send(FetchWaitRequest(60_000, 1, (FetchPart("t", 0, 0, 100),)))
        await trio.sleep(1)
        broker.shutdown()
        frame = await client.receive_frame()
        assert trio.current_time() - started == pytest.approx(1.0)
        assert decode_multifetch_payload(frame.payload) == [(ErrorCode.NO_ERROR, b"")]
    assert broker.clean_shutdown is True


async def test_extensions_over_tcp_with_the_real_file_system(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, log_default_flush_scheduler_interval_ms=NEVER_MS))
    consumer, producer = await RawClient.connect(broker.port), await RawClient.connect(broker.port)
    data = messages(b"over tcp", magic=1)
    async with trio.open_nursery() as inner:
        got = []

        async def long_poll():
            got.append(await consumer.call(FetchWaitRequest(60_000, 1, (FetchPart("t", 0, 0, 1000),))))

        inner.start_soon(long_poll)
        await trio.testing.wait_all_tasks_blocked()
        acked = await producer.call(ProduceAckedRequest(-1, 60_000, (ProducePart("t", 0, data),)))
    [result] = decode_produce_acked_payload(acked.payload)
    assert (result.error, result.next_offset) == (ErrorCode.NO_ERROR, len(data))
    assert decode_multifetch_payload(got[0].payload) == [(ErrorCode.NO_ERROR, data)]
    segment = os.path.join(broker.config.log_dir, "t-0", "0" * 20 + ".kafka")
    with open(segment, "rb") as f:
        assert f.read() == data
    broker.shutdown()
