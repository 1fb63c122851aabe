"""Producer in async mode: batching, queue time, backpressure, flush and close (mock clock)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from trikafka.producer import (
    DeliveryFailedError,
    NoBrokersAvailableError,
    Producer,
    ProducerClosedError,
    QueueFullError,
)
from trikafka.testing import InProcessBroker, open_cluster
from trikafka.wire import ProduceAckedRequest, ProduceRequest, iter_messages


def payloads_in(broker: InProcessBroker, topic: str, partition: int = 0) -> list[bytes]:
    return [m.payload for m in iter_messages(broker.stored(topic, partition))]


def messages_per_request(broker: InProcessBroker) -> list[int]:
    sizes = []
    for request in broker.requests:
        parts = [request.part] if isinstance(request, ProduceRequest) else request.parts
        sizes.append(sum(len(list(iter_messages(p.messages))) for p in parts))
    return sizes


class Stall:
    """Holds every PRODUCE_ACKED on its way to the broker until ``release`` is set (a slow
    disk, a long GC...); the broker answers a connection's requests in order, so one is in
    progress at a time."""

    def __init__(self):
        self.release = trio.Event()
        self.in_progress = 0

    async def __call__(self, request):
        if isinstance(request, ProduceAckedRequest):
            self.in_progress += 1
            await self.release.wait()
            self.in_progress -= 1


@pytest.fixture
async def cluster():
    async with open_cluster(0, enable_zookeeper=False) as running:
        yield running


async def one_broker(cluster, stall=None, num_partitions=1, **settings):
    broker = await cluster.add(address=("b0", 9092), num_partitions=num_partitions)
    if stall is not None:
        cluster.network.before_request[broker.address] = stall
    settings.setdefault("partitions_per_broker", 1)
    return broker, Producer(brokers=[(0, "b0", 9092)], producer_type="async", connector=cluster.connector,
                            **settings)


async def test_a_full_batch_goes_out_at_once_and_the_rest_waits(cluster, mock_clock):
    broker, producer = await one_broker(cluster, batch_size=10, queue_time_s=60)
    async with producer:
        deliveries = [await producer.send("t", b"%d" % i) for i in range(25)]
        await trio.testing.wait_all_tasks_blocked()
        assert messages_per_request(broker) == [10, 10]
        assert [d.done for d in deliveries] == [True] * 20 + [False] * 5
        mock_clock.jump(59.9)
        await trio.testing.wait_all_tasks_blocked()
        assert messages_per_request(broker) == [10, 10]
        mock_clock.jump(0.2)
        await trio.testing.wait_all_tasks_blocked()
        assert messages_per_request(broker) == [10, 10, 5]
        assert all(d.done for d in deliveries)
    assert payloads_in(broker, "t") == [b"%d" % i for i in range(25)]


async def test_queue_time_bounds_the_wait_of_a_lone_message(cluster, mock_clock):
    broker, producer = await one_broker(cluster, batch_size=200, queue_time_s=5, acks=1)
    async with producer:
        delivery = await producer.send("t", b"lonely")
        mock_clock.jump(4.9)
        await trio.testing.wait_all_tasks_blocked()
        assert broker.requests == [] and not delivery.done
        mock_clock.jump(0.2)
        await trio.testing.wait_all_tasks_blocked()
        result = await delivery.result()
        assert (result.broker_id, result.partition, result.offset) == (0, 0, 0)


async def test_messages_left_after_a_full_batch_keep_their_deadline(cluster, mock_clock):
    stall = Stall()
    broker, producer = await one_broker(cluster, stall, batch_size=2, queue_time_s=5, acks=1)
    async with producer:
        await producer.send("t", b"0")
        mock_clock.jump(1)
        await producer.send("t", b"1")  # a full batch: it goes, and the broker holds it
        await trio.testing.wait_all_tasks_blocked()
        assert stall.in_progress == 1
        late = [await producer.send("t", b"%d" % i) for i in range(2, 5)]  # queued at t=1
        mock_clock.jump(2)
        stall.release.set()  # t=3: the next full batch goes, one message is left over
        await trio.testing.wait_all_tasks_blocked()
        assert messages_per_request(broker) == [2, 2]
        assert not late[-1].done
        # It was queued at t=1, so it must go by t=6 (not 5 s after the batch left at t=3).
        mock_clock.jump(3.1)
        await trio.testing.wait_all_tasks_blocked()
        assert messages_per_request(broker) == [2, 2, 1]
        assert late[-1].done


async def test_a_full_queue_blocks_senders_until_deliveries_complete(cluster, autojump_clock):
    stall = Stall()
    broker, producer = await one_broker(cluster, stall, batch_size=2, queue_size=5, queue_time_s=0.01, acks=1)
    blocked_at = []
    async with producer:
        async with trio.open_nursery() as nursery:
            async def sender():
                for i in range(12):
                    await producer.send("t", b"%d" % i)
                    assert producer._queue.occupancy <= 5
                blocked_at.append(trio.current_time())

            nursery.start_soon(sender)
            await trio.sleep(10)
            assert blocked_at == [] and producer._queue.occupancy == 5  # stuck behind the broker
            stall.release.set()
    assert blocked_at and blocked_at[0] >= 10
    assert payloads_in(broker, "t") == [b"%d" % i for i in range(12)]


async def test_enqueue_timeout_gives_up_with_queue_full(cluster, autojump_clock):
    stall = Stall()
    broker, producer = await one_broker(cluster, stall, batch_size=1, queue_size=2, enqueue_timeout_s=1.5, acks=1)
    async with producer:
        first = [await producer.send("t", b"a"), await producer.send("t", b"b")]
        start = trio.current_time()
        with pytest.raises(QueueFullError):
            await producer.send("t", b"c")
        assert trio.current_time() - start == pytest.approx(1.5)
        stall.release.set()
    assert [(await d.result()).ok for d in first] == [True, True]
    assert payloads_in(broker, "t") == [b"a", b"b"]


async def test_close_flushes_everything_queued(cluster, autojump_clock):
    broker, producer = await one_broker(cluster, batch_size=300, queue_time_s=3600, queue_size=5000)
    async with producer:
        deliveries = await producer.send_batch("t", [b"%d" % i for i in range(1000)])
        await trio.testing.wait_all_tasks_blocked()
        assert len(broker.requests) == 3  # three full batches; 100 still queued
    assert trio.current_time() < 1  # not held back by queue_time
    assert all(d.done and d.peek().ok for d in deliveries)
    assert payloads_in(broker, "t") == [b"%d" % i for i in range(1000)]


async def test_flush_waits_for_every_delivery(cluster, autojump_clock):
    broker, producer = await one_broker(cluster, batch_size=50, queue_time_s=3600, acks=-1)
    async with producer:
        deliveries = [await producer.send("t", b"%d" % i) for i in range(120)]
        await producer.flush()
        assert all(d.done for d in deliveries)
        offsets = [d.peek().offset for d in deliveries]
        assert offsets == sorted(offsets) and len(set(offsets)) == 120


async def test_unobserved_failures_are_reported_on_close(cluster, autojump_clock):
    # nobody listens at b0:9092
    producer = Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, producer_type="async",
                        connector=cluster.connector, num_retries=1, queue_time_s=0.1)
    with pytest.raises(DeliveryFailedError) as caught:
        async with producer:
            watched = await producer.send("t", b"watched")
            for _ in range(3):
                await producer.send("t", b"ignored")
            with pytest.raises(NoBrokersAvailableError):
                await watched.result()
    assert caught.value.failed_count == 3
    assert all(isinstance(r.error, NoBrokersAvailableError) for r in caught.value.results)


async def test_observed_failures_do_not_raise_on_close(cluster, autojump_clock):
    producer = Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, producer_type="async",
                        connector=cluster.connector, num_retries=0, queue_time_s=0.1)
    async with producer:
        delivery = await producer.send("t", b"x")
        result = await delivery.wait()
    assert isinstance(result.error, NoBrokersAvailableError)


async def test_a_cancelled_body_still_flushes_what_was_queued(cluster, autojump_clock):
    broker, producer = await one_broker(cluster, batch_size=100, queue_time_s=3600)
    with trio.move_on_after(1) as scope:
        async with producer:
            deliveries = [await producer.send("t", b"%d" % i) for i in range(30)]
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert all(d.peek().ok for d in deliveries)
    assert payloads_in(broker, "t") == [b"%d" % i for i in range(30)]


async def test_close_gives_up_after_close_timeout_and_reports_what_was_lost(cluster, autojump_clock):
    stall = Stall()
    await one_broker(cluster, stall)
    producer = Producer(brokers=[(0, "b0", 9092)], partitions_per_broker=1, producer_type="async", acks=1,
                        connector=cluster.connector, batch_size=5, close_timeout_s=7)
    with pytest.raises(DeliveryFailedError) as caught:
        async with producer:
            for i in range(8):
                await producer.send("t", b"%d" % i)
    assert trio.current_time() == pytest.approx(7)
    assert caught.value.failed_count == 8
    assert all(isinstance(r.error, ProducerClosedError) for r in caught.value.results)
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"late")


async def test_with_acks_a_broker_dying_mid_stream_loses_nothing_reported_delivered(cluster, autojump_clock):
    b0 = await cluster.add(address=("b0", 9092), num_partitions=2)
    b1 = await cluster.add(address=("b1", 9092), num_partitions=2)
    brokers = {0: b0, 1: b1}
    async with Producer(brokers=[(0, "b0", 9092), (1, "b1", 9092)], partitions_per_broker=2,
                        producer_type="async", acks=1, batch_size=20, queue_time_s=0.05,
                        connector=cluster.connector, rng=random.Random(11), reconnect_backoff_s=30) as producer:
        deliveries = []
        for i in range(400):
            deliveries.append(await producer.send("t", b"m%d" % i))
            if i == 200:
                await cluster.network.kill("b1", 9092)
            if i % 50 == 0:
                await trio.sleep(0.01)
    results = [d.peek() for d in deliveries]
    assert all(r.ok for r in results)
    assert {r.broker_id for r in results[300:]} == {0}  # nothing more went to the dead one
    for i, r in enumerate(results):
        log = brokers[r.broker_id].stored("t", r.partition)
        [message] = [m for m in iter_messages(log[r.offset:r.next_offset], r.offset)]
        assert message.payload == b"m%d" % i


async def test_send_many_mixes_topics_and_keys(cluster, autojump_clock):
    broker, producer = await one_broker(cluster, num_partitions=2, partitions_per_broker=2,
                                  batch_size=4, acks=1)
    async with producer:
        deliveries = await producer.send_many([("a", b"1", "k"), ("b", b"2"), ("a", b"3", "k"), ("b", b"4")])
        results = [await d.result() for d in deliveries]
    assert results[0].partition == results[2].partition  # same key, same partition
    assert sorted(payloads_in(broker, "a", results[0].partition)) == [b"1", b"3"]
    assert sorted(payloads_in(broker, "b", 0) + payloads_in(broker, "b", 1)) == [b"2", b"4"]
    assert len(broker.requests) == 1  # one batch, one request for both topics
