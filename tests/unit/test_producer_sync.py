"""Producer in sync mode against real brokers in-process over in-memory streams (no sockets, mock clock)."""

from __future__ import annotations

import json
import random

import pytest
import trio
import trio.testing

from trikafka.producer import (
    AcksNotSupportedError,
    BrokerRejectedError,
    Delivery,
    DeliveryFailedError,
    MessageTooLargeError,
    NoBrokersAvailableError,
    PartitionerError,
    Producer,
    ProducerClosedError,
)
from trikafka.producer.partitioner import hash_index, java_hash
from trikafka.testing import EXTENSION_REQUESTS, InProcessBroker, InProcessCluster, open_cluster
from trikafka.wire import (
    Codec,
    MultiProduceRequest,
    ProduceAckedRequest,
    ProduceRequest,
    iter_messages,
    parse_entries,
)


def payloads_in(broker: InProcessBroker, topic: str, partition: int) -> list[bytes]:
    return [m.payload for m in iter_messages(broker.stored(topic, partition))]


def payload_at(broker: InProcessBroker, topic: str, partition: int, offset: int) -> list[bytes]:
    """Payloads of the entry at ``offset`` (several for a compressed wrapper)."""
    log = broker.stored(topic, partition)
    return [m.payload for m in iter_messages(log[offset:], offset)
            if m.offset == offset]


@pytest.fixture
async def cluster(autojump_clock):
    async with open_cluster(0, enable_zookeeper=False) as running:
        yield running


async def two_brokers(cluster: InProcessCluster, partitions: int = 2,
                      **settings) -> tuple[InProcessBroker, InProcessBroker]:
    return (await cluster.add(address=("b0", 9092), num_partitions=partitions, **settings),
            await cluster.add(address=("b1", 9092), num_partitions=partitions, **settings))


BROKERS = [(0, "b0", 9092), (1, "b1", 9092)]


async def test_acked_sends_report_where_each_message_landed(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1,
                        connector=cluster.connector) as producer:
        results = [await (await producer.send("events", payload)) for payload in (b"a", b"bb", b"ccc")]
    assert [(r.topic, r.broker_id, r.partition) for r in results] == [("events", 0, 0)] * 3
    # entry = 4-byte length + magic + attributes + crc + payload
    assert [(r.offset, r.next_offset) for r in results] == [(0, 11), (11, 23), (23, 36)]
    assert payloads_in(b0, "events", 0) == [b"a", b"bb", b"ccc"]
    assert all(isinstance(req, ProduceAckedRequest) and req.acks == 1 for req in b0.requests)
    assert len(b0.requests) == 3  # sync mode: one request per send


async def test_acks_0_uses_produce_and_one_multiproduce_per_broker(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092), num_partitions=3)
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=3, acks=0,
                        connector=cluster.connector, rng=random.Random(1)) as producer:
        single = await (await producer.send("t", b"one", key="k"))
        batch = await producer.send_batch("t", [b"x%d" % i for i in range(30)])
        await trio.testing.wait_all_tasks_blocked()
    assert single.offset is None and single.error is None
    assert isinstance(b0.requests[0], ProduceRequest)
    assert isinstance(b0.requests[1], MultiProduceRequest)
    assert len(b0.requests) == 2
    assert sorted(p.partition for p in b0.requests[1].parts) == [0, 1, 2]
    stored = [p for partition in range(3) for p in payloads_in(b0, "t", partition)]
    assert sorted(stored) == sorted([b"one"] + [b"x%d" % i for i in range(30)])
    # each result names the partition its message really went to
    for result, payload in zip(batch, [b"x%d" % i for i in range(30)]):
        assert payload in payloads_in(b0, "t", result.partition)


async def test_keyed_messages_use_the_stable_java_hash_over_the_numeric_partition_list(cluster, autojump_clock):
    await two_brokers(cluster, partitions=4)
    async with Producer(brokers=BROKERS, partitions_per_broker=4, acks=1, connector=cluster.connector) as producer:
        for key in ("user-42", "user-7", b"\x00\xff", 123456789, "ünïcode"):
            index = hash_index(java_hash(key), 8)  # (0,0)..(0,3),(1,0)..(1,3)
            results = [await (await producer.send("t", b"v", key=key)) for _ in range(3)]
            assert {(r.broker_id, r.partition) for r in results} == {(index // 4, index % 4)}


async def test_unkeyed_messages_spread_randomly_over_every_partition(cluster, autojump_clock):
    b0, b1 = await two_brokers(cluster)
    async with Producer(brokers=BROKERS, partitions_per_broker=2, acks=1, connector=cluster.connector,
                        rng=random.Random(3)) as producer:
        results = await producer.send_batch("t", [b"%d" % i for i in range(200)])
    counts = {}
    for r in results:
        counts[(r.broker_id, r.partition)] = counts.get((r.broker_id, r.partition), 0) + 1
    assert set(counts) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert min(counts.values()) > 25
    # one request per broker for the whole batch
    assert len(b0.requests) == 1 and len(b1.requests) == 1


async def test_every_acked_offset_points_at_the_message(cluster, autojump_clock):
    b0, b1 = await two_brokers(cluster)
    brokers = {0: b0, 1: b1}
    async with Producer(brokers=BROKERS, partitions_per_broker=2, acks=-1, connector=cluster.connector) as producer:
        payloads = [b"m%03d" % i * (i % 7 + 1) for i in range(100)]
        results = await producer.send_batch("t", payloads)
    for payload, r in zip(payloads, results):
        assert payload_at(brokers[r.broker_id], "t", r.partition, r.offset) == [payload]
        entries = parse_entries(brokers[r.broker_id].stored("t", r.partition)[r.offset:], r.offset)
        assert entries.entries[0].next_offset == r.next_offset


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
async def test_compressed_messages_share_their_wrapper_offset(cluster, autojump_clock, codec):
    b0 = await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1,
                        compression_codec=codec, connector=cluster.connector) as producer:
        first = await producer.send_batch("t", [b"a" * 50, b"b" * 50, b"c" * 50])
        second = await producer.send_batch("t", [b"d", b"e"])
    entries = parse_entries(b0.stored("t", 0)).entries
    assert len(entries) == 2 and all(e.message.codec == Codec[codec.upper()] for e in entries)
    assert {(r.offset, r.next_offset) for r in first} == {(0, entries[0].next_offset)}
    assert {(r.offset, r.next_offset) for r in second} == {(entries[1].offset, entries[1].next_offset)}
    assert payloads_in(b0, "t", 0) == [b"a" * 50, b"b" * 50, b"c" * 50, b"d", b"e"]


async def test_compressed_topics_limits_compression_to_those_topics(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, compression_codec="gzip",
                        compressed_topics=["zipped"], connector=cluster.connector, acks=1) as producer:
        await producer.send_batch("zipped", [b"x", b"y"])
        await producer.send_batch("plain", [b"x", b"y"])
    assert {e.message.codec for e in parse_entries(b0.stored("zipped", 0)).entries} == {Codec.GZIP}
    assert {e.message.codec for e in parse_entries(b0.stored("plain", 0)).entries} == {Codec.NONE}


async def test_a_rejected_part_fails_only_its_messages(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092), num_partitions=2, max_message_size=100)
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=2, acks=1,
                        connector=cluster.connector) as producer:
        # keys 0 and 1 hash to partitions 0 and 1 (Integer.hashCode)
        with pytest.raises(DeliveryFailedError) as caught:
            await producer.send_batch("t", [b"small", b"x" * 150, b"tiny"], keys=[0, 1, 0])
    error = caught.value
    assert error.failed_count == 1
    [failed] = error.results
    assert isinstance(failed.error, BrokerRejectedError) and failed.partition == 1
    assert [r.ok for r in error.all_results] == [True, False, True]
    assert payloads_in(b0, "t", 0) == [b"small", b"tiny"]
    assert payloads_in(b0, "t", 1) == []


async def test_acks_against_a_plain_0_7_broker_is_a_clear_error(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092), refuse_requests=EXTENSION_REQUESTS)
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1,
                        connector=cluster.connector) as producer:
        with pytest.raises(AcksNotSupportedError):
            await producer.send("t", b"x")
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=0,
                        connector=cluster.connector) as producer:
        await producer.send("t", b"y")
        await trio.testing.wait_all_tasks_blocked()
    assert payloads_in(b0, "t", 0) == [b"y"]


async def test_no_reachable_broker_raises_after_the_retries(cluster, autojump_clock):
    async with Producer(brokers="b0:9092,b1:9092", partitions_per_broker=1, acks=1, num_retries=2,
                        retry_backoff_s=0.5, connector=cluster.connector) as producer:
        start = trio.current_time()
        with pytest.raises(NoBrokersAvailableError, match="3 attempt"):
            await producer.send("t", b"x")
        assert trio.current_time() - start == pytest.approx(0.5 + 1.0)  # two backoffs
        assert producer.messages_failed == 1


async def test_a_dead_broker_is_skipped_for_unkeyed_messages(cluster, autojump_clock):
    b0, b1 = await two_brokers(cluster)
    await cluster.network.kill("b1", 9092)
    async with Producer(brokers=BROKERS, partitions_per_broker=2, acks=1, connector=cluster.connector,
                        reconnect_backoff_s=60, rng=random.Random(5)) as producer:
        results = await producer.send_batch("t", [b"%d" % i for i in range(50)])
        assert {r.broker_id for r in results} == {0}
        assert not producer.pool.available(1)
    assert sorted(payloads_in(b0, "t", 0) + payloads_in(b0, "t", 1)) == sorted(b"%d" % i for i in range(50))


async def test_a_broker_dying_between_sends_is_reconnected_after_backoff(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1, num_retries=5,
                        reconnect_backoff_s=0.2, retry_backoff_s=0.1, connector=cluster.connector) as producer:
        await producer.send("t", b"before")
        await cluster.network.kill("b0", 9092)

        async def revive_later():
            await trio.sleep(0.5)
            cluster.network.revive("b0", 9092)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(revive_later)
            result = await (await producer.send("t", b"after"))
        assert result.ok and trio.current_time() >= 0.5
    assert payloads_in(b0, "t", 0) == [b"before", b"after"]
    assert cluster.network.connects[("b0", 9092)] == 2


async def test_messages_that_can_never_be_sent_are_refused_before_sending(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, max_message_size=10,
                        connector=cluster.connector) as producer:
        with pytest.raises(MessageTooLargeError):
            await producer.send("t", b"x" * 11)
        with pytest.raises(TypeError):
            await producer.send("t", "a str needs a serializer")
        with pytest.raises(ValueError):
            await producer.send("bad/topic", b"x")
    assert b0.requests == []


async def test_serializer_and_custom_partitioner(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092), num_partitions=3)
    calls = []

    def last_partition(key, n):
        calls.append((key, n))
        return n - 1

    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=3, acks=1, connector=cluster.connector,
                        serializer=lambda v: json.dumps(v).encode(), partitioner=last_partition) as producer:
        result = await (await producer.send("t", {"n": 1}, key="k"))
    assert (result.partition, calls) == (2, [("k", 3)])
    assert payloads_in(b0, "t", 2) == [b'{"n": 1}']


async def test_a_partitioner_out_of_range_is_reported_per_message(cluster, autojump_clock):
    await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1, connector=cluster.connector,
                        partitioner=lambda key, n: n) as producer:
        with pytest.raises(PartitionerError):
            await producer.send("t", b"x", key="k")
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1,
                        connector=cluster.connector) as producer:
        with pytest.raises(PartitionerError):  # a key the default hash cannot take
            await producer.send("t", b"x", key=object())
        assert (await (await producer.send("t", b"x", key="fine"))).ok


async def test_send_outside_the_context_is_refused(cluster, autojump_clock):
    await cluster.add(address=("b0", 9092))
    producer = Producer(brokers=[(0, "b0", 9092)], connector=cluster.connector)
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"x")
    async with producer:
        pass
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"x")


def test_exactly_one_source_of_brokers():
    with pytest.raises(ValueError):
        Producer()
    with pytest.raises(ValueError):
        Producer(brokers="h:1", zk_connect="127.0.0.1:2181")


@pytest.mark.parametrize("producer_type", ["sync", "async"])
async def test_send_returns_a_delivery_in_both_modes(cluster, autojump_clock, producer_type):
    await cluster.add(address=("b0", 9092))
    async with Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, acks=1, producer_type=producer_type,
                        connector=cluster.connector) as producer:
        delivery = await producer.send("events", b"one")
        assert isinstance(delivery, Delivery)
        assert delivery.done is (producer_type == "sync")  # sync: resolved when send returns
        result = await delivery.result()
        assert (result.topic, result.offset, result.next_offset) == ("events", 0, 13)
        assert await delivery == result  # a Delivery is awaitable itself
