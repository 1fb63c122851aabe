"""The Trio client against the real in-process broker (trikafka.broker.server.serve)
on 127.0.0.1, with its log in a temporary directory."""

import pytest
import trio
import trio.testing

from trikafka.broker.config import BrokerConfig
from trikafka.broker.server import serve
from trikafka.client import (
    ACKS_FLUSHED,
    BrokerConnectionError,
    ConsumedMessage,
    FetchResult,
    OffsetOutOfRange,
    SimpleConsumer,
    connect,
)
from trikafka.wire import Codec, ErrorCode, build_message_set, iter_messages


@pytest.fixture
async def broker(nursery, tmp_path):
    """A real broker flushing after every message, shut down gracefully at teardown."""
    config = BrokerConfig(port=0, log_dir=str(tmp_path / "logs"), num_threads=1, num_partitions=2,
                          log_flush_interval=1)
    running = await nursery.start(serve, config)
    yield running
    running.shutdown()


async def take(aiter, n):
    out = []
    async for item in aiter:
        out.append(item)
        if len(out) == n:
            break
    return out


async def test_every_request_type_against_the_real_broker(broker):
    plain = build_message_set([b"a", b"b"])
    wrapped = build_message_set([b"c", b"d"], codec=Codec.GZIP)
    async with await connect(broker.host, broker.port) as conn:
        await conn.produce("t", 0, plain)
        await conn.multiproduce([("t", 0, wrapped), ("u", 1, plain)])
        [acked] = await conn.produce_acked([("t", 0, plain)], acks=ACKS_FLUSHED, timeout_ms=10_000)
        await broker.flush_all()  # u-1's set too: reads see only what an fsync covered
        end = len(plain) * 2 + len(wrapped)
        assert (acked.error, acked.base_offset, acked.next_offset) == (ErrorCode.NO_ERROR, end - len(plain), end)
        result = await conn.fetch("t", 0, 0, 1 << 20)
        assert result == FetchResult(ErrorCode.NO_ERROR, plain + wrapped + plain, 0)
        assert [m.payload for m in iter_messages(result.data)] == [b"a", b"b", b"c", b"d", b"a", b"b"]
        multi = await conn.multifetch([("u", 1, 0, 1 << 20), ("t", 0, end + 1, 100), ("t", 7, 0, 100)])
        assert [(r.error, r.data) for r in multi] == [
            (ErrorCode.NO_ERROR, plain),
            (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
            (ErrorCode.WRONG_PARTITION, b""),
        ]
        assert await conn.offsets("t", 0, -1, 10) == [end, 0]
        assert await conn.offsets("t", 0, -2, 10) == [0]
        waited = await conn.fetch_wait([("t", 0, end, 1024)], max_wait_ms=10, min_bytes=1)
        assert waited == [FetchResult(ErrorCode.NO_ERROR, b"", end)]


async def test_simple_consumer_long_polls_the_real_broker(broker):
    first = build_message_set([b"one"])
    wrapped = build_message_set([b"two", b"three"], codec=Codec.SNAPPY)
    async with await connect(broker.host, broker.port) as producer:
        await producer.produce_acked([("t", 0, first)])
        # A long poll far longer than the test's hang guard: the consumer can only return the second
        # set if the broker wakes it when the set arrives, never by running out its max_wait.
        async with SimpleConsumer((broker.host, broker.port), "t", 0, max_wait_ms=3_600_000) as consumer:
            got = []

            async def consume():
                got.extend(await take(consumer.messages(0), 3))

            with trio.fail_after(60):  # hang guard only
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    # let the consumer reach the end of the log and block in its long poll
                    await trio.testing.wait_all_tasks_blocked()
                    await producer.produce_acked([("t", 0, wrapped)])
            assert consumer.use_fetch_wait is True
    w = len(first)
    assert got == [
        ConsumedMessage(0, w, b"one", 1, Codec.NONE),
        ConsumedMessage(w, w, b"two", 1, Codec.SNAPPY),
        ConsumedMessage(w, w + len(wrapped), b"three", 1, Codec.SNAPPY),
    ]


async def test_consumer_grows_fetch_size_and_reports_range_errors(broker):
    big = b"G" * 20_000
    async with await connect(broker.host, broker.port) as conn:
        await conn.produce_acked([("t", 1, build_message_set([big, b"tail"]))])
        consumer = SimpleConsumer(conn, "t", 1, fetch_max_bytes=1024, max_fetch_bytes_limit=1 << 16)
        assert [m.payload for m in await take(consumer.messages(0), 2)] == [big, b"tail"]
        assert await consumer.latest() == 20_010 + 14
        with pytest.raises(OffsetOutOfRange):
            await take(consumer.messages(10**9), 1)


async def test_invalid_produce_makes_the_broker_close(broker):
    async with await connect(broker.host, broker.port) as conn:
        await conn.produce("t", 0, b"\x00\x00\x00\x06\x05\x00\x00\x00\x00\x00")  # magic 5
        with pytest.raises(BrokerConnectionError):
            await conn.fetch("t", 0, 0, 100)
    async with await connect(broker.host, broker.port) as conn:  # the broker itself is fine
        assert await conn.offsets("t", 0, -1, 1) == [0]
