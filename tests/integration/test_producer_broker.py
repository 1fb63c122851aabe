"""The producer against real in-process brokers over loopback TCP (static broker list)."""

from __future__ import annotations

import random

import pytest
import trio

from tests.helpers.broker_testing import make_config
from trikafka.broker import serve
from trikafka.client import connect
from trikafka.producer import Producer
from trikafka.wire import Codec, iter_messages, parse_entries

FETCH_BYTES = 4 * 1024 * 1024


async def read_log(broker, topic: str, partition: int) -> bytes:
    """The whole visible log of ``topic``-``partition``, after flushing everything.

    First the producers' connections must be gone from the broker: a connection ends only after
    the broker has handled every request it received, and PRODUCE (acks 0) has no answer that
    could tell the producer its data was appended before it closed.
    """
    with trio.fail_after(10):
        while broker.connection_count():
            await trio.sleep(0.01)  # no event marks a connection's end; the bound makes a hang an error
    await broker.flush_all()
    data = b""
    async with await connect("127.0.0.1", broker.port) as conn:
        while True:
            result = await conn.fetch(topic, partition, len(data), FETCH_BYTES)
            chunk = result.data[:parse_entries(result.data).valid_bytes]
            if not chunk:
                return data
            data += chunk


async def start_broker(nursery, tmp_path, name: str, **changes):
    return await nursery.start(serve, make_config(tmp_path / name, **changes))


async def test_without_partition_counts_the_broker_picks_the_partition(nursery, tmp_path):
    broker = await start_broker(nursery, tmp_path, "b0", num_partitions=4)
    async with Producer(brokers=f"127.0.0.1:{broker.port}", acks=1, rng=random.Random(1)) as producer:
        results = await producer.send_batch("t", [b"%d" % i for i in range(40)])
        for _ in range(20):
            results.append(await (await producer.send("t", b"single")))
    assert {r.broker_id for r in results} == {0}
    # partition -1 (§5.1 step 1): the broker chose one per request and said which
    assert all(0 <= r.partition < 4 for r in results)
    assert len({r.partition for r in results}) > 1
    for r in results[:40]:
        assert r.partition == results[0].partition  # one request, one choice
    for partition in range(4):
        log = await read_log(broker, "t", partition)
        expected = sum(1 for r in results if r.partition == partition)
        assert len(list(iter_messages(log))) == expected


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
async def test_async_batches_read_back_in_order(nursery, tmp_path, codec):
    b0 = await start_broker(nursery, tmp_path, "b0", num_partitions=2)
    b1 = await start_broker(nursery, tmp_path, "b1", num_partitions=2)
    brokers = {0: b0, 1: b1}
    async with Producer(brokers=[(0, "127.0.0.1", b0.port), (1, "127.0.0.1", b1.port)],
                        partitions_per_broker=2, producer_type="async", batch_size=100, queue_time_s=0.05,
                        compression_codec=codec, acks=0) as producer:
        for i in range(2000):
            await producer.send("t", b"message-%05d" % i, key=i % 13)
    stored: dict[tuple[int, int], list[bytes]] = {}
    for broker_id, broker in brokers.items():
        for partition in range(2):
            log = await read_log(broker, "t", partition)
            entries = parse_entries(log).entries
            if codec != "none" and entries:
                assert {e.message.codec for e in entries} == {Codec[codec.upper()]}
            stored[(broker_id, partition)] = [m.payload for m in iter_messages(log)]
    everything = sorted(p for payloads in stored.values() for p in payloads)
    assert everything == [b"message-%05d" % i for i in range(2000)]
    for payloads in stored.values():
        # a key always maps to one partition, and order is kept within it
        assert payloads == sorted(payloads)
    keys_per_partition = [{int(p[-5:]) % 13 for p in payloads} for payloads in stored.values()]
    assert sum(len(k) for k in keys_per_partition) == 13  # no key split over two partitions


async def test_acks_minus_1_means_visible_to_a_consumer_at_once(nursery, tmp_path):
    broker = await start_broker(nursery, tmp_path, "b0", log_default_flush_scheduler_interval_ms=3_600_000,
                                log_flush_interval=1_000_000)
    async with Producer(brokers=[(0, "127.0.0.1", broker.port)], partitions_per_broker=1, acks=-1) as producer:
        result = await (await producer.send("t", b"durable"))
        async with await connect("127.0.0.1", broker.port) as conn:
            fetched = await conn.fetch("t", 0, result.offset, 1000)
    assert [m.payload for m in iter_messages(fetched.data)] == [b"durable"]
    assert result.next_offset == len(fetched.data)


@pytest.mark.parametrize("producer_type", ["sync", "async"])
async def test_audit_envelopes_messages_and_publishes_counts_on_close(nursery, tmp_path, producer_type):
    from trikafka.wire.audit import AUDIT_TOPIC, decode_event, window_start
    from trikafka.wire.envelope import decode_envelope

    broker = await start_broker(nursery, tmp_path, "b0", num_partitions=1)
    async with Producer(brokers=f"127.0.0.1:{broker.port}", partitions_per_broker=1, acks=1, audit=True,
                        producer_type=producer_type, queue_time_s=0.01) as producer:
        await producer.send_batch("t", [b"a", b"b", b"c"])
        producer_id = producer.audit.producer_id
    envelopes = [decode_envelope(m.payload) for m in iter_messages(await read_log(broker, "t", 0))]
    assert [(e.payload, e.sequence, e.producer_id) for e in envelopes] == [
        (b"a", 0, producer_id), (b"b", 1, producer_id), (b"c", 2, producer_id)]
    events = [decode_event(m.payload) for m in iter_messages(await read_log(broker, AUDIT_TOPIC, 0))]
    assert sum(e.count for e in events) == 3 and {e.topic for e in events} == {"t"}
    assert all(e.tier == "producer" and e.producer_id == producer_id for e in events)
    window_ms = events[0].window_ms
    assert {window_start(env.created_ms, window_ms) for env in envelopes} == {e.window_start_ms for e in events}
