"""Metrics and health of an in-process broker with ``metrics_port`` (README, "Metrics")."""

from __future__ import annotations

import functools

import trio

from trikafka.broker.server import serve
from trikafka.wire import (
    Codec,
    ErrorCode,
    FetchPart,
    MultiFetchRequest,
    MultiProduceRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    build_message_set,
    decode_multifetch_payload,
    decode_produce_acked_payload,
)
from trikafka.zk.server_setup import free_port

from tests.helpers.broker_testing import RawClient, http_get, make_config, scrape


def in_topic(name: str, topic: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, (("topic", topic),)


async def test_every_appended_message_is_counted_and_the_figures_follow_the_traffic(tmp_path):
    config = make_config(tmp_path, metrics_port=0, num_partitions=2)
    plain = build_message_set([b"one", b"two", b"three"])
    compressed = build_message_set([b"four", b"five"], codec=Codec.GZIP)  # a wrapper counts as its 2 messages
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        _, port = broker.metrics_address
        client = await RawClient.connect(broker.port)
        await client.send(ProduceRequest(ProducePart("a", 0, plain)))
        await client.send(MultiProduceRequest((ProducePart("a", 1, compressed), ProducePart("b", 0, plain))))
        acked = await client.call(ProduceAckedRequest(-1, 10_000, (ProducePart("b", 1, compressed),)))
        assert decode_produce_acked_payload(acked.payload)[0].error == ErrorCode.NO_ERROR
        await broker.flush_all()
        fetched = await client.call(MultiFetchRequest((FetchPart("a", 0, 0, 1000), FetchPart("b", 0, 0, 1000))))
        assert decode_multifetch_payload(fetched.payload) == [(ErrorCode.NO_ERROR, plain)] * 2

        got = await scrape(port)
        assert got[in_topic("trikafka_messages_in_total", "a")] == 5
        assert got[in_topic("trikafka_messages_in_total", "b")] == 5
        assert got[in_topic("trikafka_bytes_in_total", "a")] == len(plain) + len(compressed)
        assert got[in_topic("trikafka_bytes_out_total", "a")] == len(plain)
        assert got[in_topic("trikafka_bytes_out_total", "b")] == len(plain)
        requests = {labels[0][1]: value for (name, labels), value in got.items()
                    if name == "trikafka_request_duration_seconds_count"}
        assert requests == {"produce": 1, "multiproduce": 1, "produce_acked": 1, "multifetch": 1,
                            "fetch": 0, "fetch_local": 0, "offsets": 0, "fetch_wait": 0, "metadata": 0, "create_topic": 0,
                            "replica_fetch": 0, "epoch_end_offset": 0}
        assert got[("trikafka_flush_duration_seconds_count", ())] >= 4  # one per dirty log, at least
        assert got[("trikafka_log_size_bytes", (("partition", "1"), ("topic", "b")))] == len(compressed)
        assert got[("trikafka_log_unflushed_bytes", (("partition", "0"), ("topic", "a")))] == 0
        assert got[("trikafka_connections", ())] == 1
        assert got[("trikafka_connections_accepted_total", ())] == 1
        assert got[("trikafka_ready", ())] == 1
        broker.shutdown()


async def test_readyz_answers_503_until_recovery_is_done_then_200_until_shutdown(tmp_path):
    port = free_port()  # the endpoint must be known before serve() reports anything
    config = make_config(tmp_path, metrics_port=port)
    recovery_may_finish = trio.Event()
    recovering = trio.Event()

    async def slow_first_call(fn):  # the first blocking call is the log load (recovery)
        if not recovering.is_set():
            recovering.set()
            await recovery_may_finish.wait()
        return await trio.to_thread.run_sync(fn)

    async with trio.open_nursery() as nursery:
        started = trio.Event()
        brokers = []

        async def run_broker():
            brokers.append(await nursery.start(functools.partial(serve, config, run_blocking=slow_first_call)))
            started.set()

        nursery.start_soon(run_broker)
        await recovering.wait()
        assert await http_get(port, "/healthz") == (200, b"ok\n")
        assert (await http_get(port, "/readyz"))[0] == 503
        assert (await scrape(port))[("trikafka_ready", ())] == 0
        recovery_may_finish.set()
        await started.wait()
        broker = brokers[0]
        assert broker.metrics_address == ("127.0.0.1", port)
        assert await http_get(port, "/readyz") == (200, b"ready\n")
        broker.shutdown()
        assert not broker.ready  # /readyz answers 503 for as long as the drain lasts


