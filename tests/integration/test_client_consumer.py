"""SimpleConsumer against the real broker in-process (trikafka.testing): spec §4 offsets, §5.2
partial tails and oversized first entries, long poll and 0.7 fallback (virtual time)."""

import pytest
import trio

from trikafka.client import (
    ConsumedMessage,
    MessageTooLargeForFetch,
    OffsetOutOfRange,
    PollBackoff,
    SimpleConsumer,
    earliest_offset,
    framed_prefix,
    latest_offset,
)
from trikafka.testing import EXTENSION_REQUESTS, open_broker
from trikafka.wire import (
    Codec,
    FetchRequest,
    FetchWaitRequest,
    InvalidMessageError,
    build_message_set,
    encode_entry,
)


SEGMENT_0 = "/data/t-0/00000000000000000000.kafka"


async def take(aiter, n):
    out = []
    async for item in aiter:
        out.append(item)
        if len(out) == n:
            break
    return out


class RecordingSleep:
    def __init__(self):
        self.delays = []

    async def __call__(self, delay_s):
        self.delays.append(delay_s)
        await trio.sleep(delay_s)  # virtual time under autojump_clock


async def test_consumes_mixed_sets_with_spec_offsets():
    plain0 = build_message_set([b"m0"], magic=0)
    wrapped = build_message_set([b"a", b"b"], codec=Codec.SNAPPY)
    plain1 = build_message_set([b"m1", b""])
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            for data in (plain0, wrapped, plain1):
                await conn.produce("t", 0, data)
            consumer = SimpleConsumer(conn, "t", 0)
            got = await take(consumer.messages(0), 5)
            assert not conn.closed  # a shared connection stays open
    w0 = len(plain0)
    w1 = w0 + len(wrapped)
    m1_end = w1 + len(encode_entry(b"m1"))
    assert got == [
        ConsumedMessage(0, w0, b"m0", 0, Codec.NONE),
        ConsumedMessage(w0, w0, b"a", 1, Codec.SNAPPY),
        ConsumedMessage(w0, w1, b"b", 1, Codec.SNAPPY),
        ConsumedMessage(w1, m1_end, b"m1", 1, Codec.NONE),
        ConsumedMessage(m1_end, m1_end + len(encode_entry(b"")), b"", 1, Codec.NONE),
    ]
    assert consumer.next_offset == got[-1].next_offset


async def test_truncated_tails_advance_by_valid_bytes_only():
    payloads = [bytes([i]) * (50 + 13 * i) for i in range(20)]
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, build_message_set(payloads))
            async with SimpleConsumer(conn, "t", 0, fetch_max_bytes=400) as consumer:
                got = await take(consumer.messages(0), len(payloads))
    assert [m.payload for m in got] == payloads
    entry_starts = {m.offset for m in got}
    fetch_offsets = [r.part.offset for r in broker.requests if isinstance(r, FetchRequest)]
    assert len(fetch_offsets) > 5  # many fetches, each cut mid-entry
    assert set(fetch_offsets) <= entry_starts  # always an entry boundary, never re-reading


async def test_fetch_size_grows_to_a_big_first_entry():
    big = b"B" * 5000
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, build_message_set([b"small", big, b"after"]))
            consumer = SimpleConsumer(conn, "t", 0, fetch_max_bytes=1000, max_fetch_bytes_limit=8000)
            got = await take(consumer.messages(0), 3)
    assert [m.payload for m in got] == [b"small", big, b"after"]
    sizes = [r.part.max_bytes for r in broker.requests if isinstance(r, FetchRequest)]
    # 1st fetch: "small" + the cut big entry; the 2nd shows its size (5010 bytes with
    # headers), so the 3rd asks for all of it at once (wire.grown_fetch_size).
    assert sizes[:3] == [1000, 1000, 5010] and max(sizes) == 5010


async def test_message_too_large_for_the_fetch_limit():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, build_message_set([b"X" * 10_000]))
            consumer = SimpleConsumer(conn, "t", 0, fetch_max_bytes=1024, max_fetch_bytes_limit=4096)
            with pytest.raises(MessageTooLargeForFetch, match="needs 10010 bytes") as info:
                await take(consumer.messages(0), 1)
            assert (info.value.offset, info.value.needed_bytes, info.value.limit_bytes) == (0, 10010, 4096)
            # the limit is checked before doubling: one fetch was enough to know
            assert len([r for r in broker.requests if isinstance(r, FetchRequest)]) == 1


async def test_fetch_size_below_four_bytes_grows_too():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, build_message_set([b"hi"]))
            consumer = SimpleConsumer(conn, "t", 0, fetch_max_bytes=1, max_fetch_bytes_limit=64)
            assert [m.payload for m in await take(consumer.messages(0), 1)] == [b"hi"]


async def test_offset_out_of_range_is_a_clear_error():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, build_message_set([b"x"]))
            consumer = SimpleConsumer(conn, "t", 0)
            with pytest.raises(OffsetOutOfRange) as info:
                await take(consumer.messages(999), 1)
            assert (info.value.topic, info.value.partition, info.value.offset) == ("t", 0, 999)
            assert info.value.error_code == 1


async def test_corrupt_data_raises_invalid_message():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce_acked([("t", 0, build_message_set([b"good", b"bad"]))])
        broker.fs.flip_byte(SEGMENT_0, broker.fs.durable_size(SEGMENT_0) - 1)  # bit rot behind the broker's back
        async with SimpleConsumer(broker.address, "t", 0, connect_kwargs=broker.connect_kwargs()) as consumer:
            got = []
            with pytest.raises(InvalidMessageError, match="CRC mismatch"):
                async for m in consumer.messages(0):
                    got.append(m.payload)
            assert got == [b"good"]  # everything before the corruption was delivered


async def test_negative_length_is_corruption_not_a_size_problem():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce_acked([("t", 0, build_message_set([b"ok", b"x" * 20]))])
        for position in range(12, 16):  # the second entry's length, 12 bytes in: now negative
            broker.fs.flip_byte(SEGMENT_0, position)
        async with SimpleConsumer(broker.address, "t", 0, connect_kwargs=broker.connect_kwargs()) as consumer:
            got = []
            with pytest.raises(InvalidMessageError, match="negative entry length at offset 12"):
                async for m in consumer.messages(0):
                    got.append(m.payload)
            assert got == [b"ok"]


async def test_long_poll_delivers_new_data_without_polling(autojump_clock):
    async with open_broker() as broker:
        async with await broker.connect() as producer:
            await producer.produce("t", 0, build_message_set([b"first"]))
            sleep = RecordingSleep()
            async with SimpleConsumer(broker.address, "t", 0, connect_kwargs=broker.connect_kwargs(), max_wait_ms=10_000, sleep=sleep) as consumer:
                received = []

                async def consume():
                    async for m in consumer.messages(0):
                        received.append((m.payload, trio.current_time()))
                        if len(received) == 3:
                            return

                start = trio.current_time()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    await trio.sleep(25)
                    await producer.produce("t", 0, build_message_set([b"second", b"third"]))
    assert [p for p, _ in received] == [b"first", b"second", b"third"]
    assert received[1][1] - start == pytest.approx(25)  # woken by the append, not a poll
    assert sleep.delays == []  # long poll, no client-side sleeping
    assert consumer.use_fetch_wait is True
    waits = [r for r in broker.requests if isinstance(r, FetchWaitRequest)]
    assert len(waits) == 3 and all(w.max_wait_ms == 10_000 for w in waits)  # 2 timed out empty


async def test_plain_0_7_broker_falls_back_to_polling_with_backoff(autojump_clock):
    async with open_broker(refuse_requests=EXTENSION_REQUESTS) as broker:
        async with await broker.connect() as shared:
            await shared.produce("t", 0, build_message_set([b"first"]))
            sleep = RecordingSleep()
            backoff = PollBackoff(initial_s=0.5, max_s=4.0)
            consumer = SimpleConsumer(shared, "t", 0, backoff=backoff, sleep=sleep,
                                      connect_kwargs=broker.connect_kwargs())
            async with consumer:
                received = []

                async def consume():
                    async for m in consumer.messages(0):
                        received.append(m.payload)
                        if len(received) == 2:
                            return

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    await trio.sleep(20)
                    async with await broker.connect() as producer:
                        await producer.produce("t", 0, build_message_set([b"second"]))
            assert shared.closed  # the probe cost the shared connection; the consumer reopened its own
    assert received == [b"first", b"second"]
    assert consumer.use_fetch_wait is False
    assert broker.network.connects[broker.address] == 3  # shared (closed by the probe), the consumer's own, producer
    assert sleep.delays[:5] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert sum(sleep.delays[:-1]) < 20 <= sum(sleep.delays)


async def test_forced_fetch_wait_does_not_degrade_silently():
    from trikafka.client import ExtensionNotSupported

    async with open_broker(refuse_requests=EXTENSION_REQUESTS) as broker:
        async with SimpleConsumer(broker.address, "t", 0, connect_kwargs=broker.connect_kwargs(), use_fetch_wait=True) as consumer:
            with pytest.raises(ExtensionNotSupported):
                await take(consumer.messages(0), 1)  # empty log: the consumer long-polls


async def test_earliest_and_latest():
    data = build_message_set([b"one", b"two"])
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            assert (await earliest_offset(conn, "t", 0), await latest_offset(conn, "t", 0)) == (0, 0)
            await conn.produce("t", 0, data)
            async with SimpleConsumer(broker.address, "t", 0, connect_kwargs=broker.connect_kwargs()) as consumer:
                assert await consumer.earliest() == 0
                assert await consumer.latest() == len(data)
                # start at the end: nothing until new data arrives
                await conn.produce("t", 0, build_message_set([b"three"]))
                got = await take(consumer.messages(len(data)), 1)
                assert [m.payload for m in got] == [b"three"]


def test_framed_prefix():
    a, b = encode_entry(b"aaaa"), encode_entry(b"b" * 100)
    assert framed_prefix(a + b) == (len(a + b), None, False)
    assert framed_prefix(a + b[:10]) == (len(a), None, False)
    assert framed_prefix(b[:10]) == (0, len(b), False)
    assert framed_prefix(b[:3]) == (0, None, False)
    assert framed_prefix(a + b"\x80\x00\x00\x00") == (len(a), None, True)
    assert framed_prefix(b"") == (0, None, False)


def test_poll_backoff():
    backoff = PollBackoff(initial_s=1, max_s=5, multiplier=3)
    assert [backoff.next_delay_s() for _ in range(4)] == [1, 3, 5, 5]
    backoff.reset()
    assert backoff.next_delay_s() == 1
