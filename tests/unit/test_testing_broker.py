"""trikafka.testing's in-process brokers: the real broker over in-memory streams, on a mock clock."""

from __future__ import annotations

import random

import pytest

from trikafka.client import BrokerConnectionError, connect
from trikafka.group import GroupConsumer
from trikafka.producer import Producer
from trikafka.testing import open_broker, open_cluster
from trikafka.wire import build_message_set, iter_messages


def payloads(data: bytes) -> list[bytes]:
    return [m.payload for m in iter_messages(data)]


async def test_open_broker_serves_a_produce_and_a_fetch_on_the_mock_clock(autojump_clock):
    async with open_broker(num_partitions=2) as broker:
        async with await broker.connect() as conn:
            await conn.produce_acked([("events", 1, build_message_set([b"a", b"b"]))])
            result = await conn.fetch("events", 1, 0, 1 << 20)
            assert payloads(result.data) == [b"a", b"b"]
        assert broker.broker.log_manager.get("events", 1) is not None
        assert broker.fs.exists("/data/events-1")


async def test_connect_takes_the_in_memory_stream_through_its_seam(autojump_clock):
    async with open_broker() as broker:
        async with await connect(broker.host, broker.port, open_stream=broker.open_stream) as conn:
            assert await conn.offsets("t", 0, -1, 1) == [0]


async def test_a_killed_broker_refuses_and_a_revived_one_serves(autojump_clock):
    async with open_broker() as broker:
        network = broker.network
        await network.kill(broker.host, broker.port)
        with pytest.raises(BrokerConnectionError):
            await broker.connect()
        network.revive(broker.host, broker.port)
        async with await broker.connect() as conn:
            assert await conn.offsets("t", 0, -1, 1) == [0]
        assert network.connects[broker.address] == 1


async def test_a_cluster_registers_its_brokers_and_a_producer_discovers_them(autojump_clock):
    async with open_cluster(2, num_partitions=2) as cluster:
        async with cluster.coordinator() as zk:
            assert sorted(await zk.children("/brokers/ids")) == ["0", "1"]
            async with Producer(coordinator=zk, acks=1, connector=cluster.connector,
                                rng=random.Random(2)) as producer:
                results = await producer.send_batch("t", [b"%d" % i for i in range(40)])
                assert {r.broker_id for r in results} == {0, 1}
            # each broker registered the topic it now holds, as 0.7 brokers do (§8.2)
            assert sorted(await zk.children("/brokers/topics/t")) == ["0", "1"]
        for member in cluster.brokers:
            assert member.broker.log_manager.get("t", 0) is not None


# --------------------------------------------------------------------------- the pytest plugin's fixtures


async def test_the_trikafka_broker_fixture_serves(trikafka_broker, autojump_clock):
    async with await trikafka_broker.connect() as conn:
        await conn.produce_acked([("events", 0, build_message_set([b"x"]))])
        assert payloads((await conn.fetch("events", 0, 0, 4096)).data) == [b"x"]


@pytest.fixture
def trikafka_cluster_size():
    return 2


async def test_the_trikafka_cluster_fixture_runs_the_size_asked_for(trikafka_cluster, autojump_clock):
    assert len(trikafka_cluster.brokers) == 2
    async with trikafka_cluster.coordinator() as zk:
        assert sorted(await zk.children("/brokers/ids")) == ["0", "1"]


async def test_a_group_consumer_reads_from_the_cluster_over_in_memory_streams(autojump_clock):
    async with open_cluster(2, num_partitions=2) as cluster, cluster.coordinator() as zk:
        async with Producer(coordinator=zk, acks=1, connector=cluster.connector) as producer:
            await producer.send_batch("orders", [b"order %d" % n for n in range(20)])
        seen = set()
        async with GroupConsumer(zk, "billing", {"orders": 1}, open_stream=cluster.open_stream) as consumer:
            async for m in consumer:
                seen.add(m.payload)
                if len(seen) == 20:
                    break
        assert sum(cluster.network.connects.values()) >= 2 + 2  # the producer's and the fetchers'
    assert seen == {b"order %d" % n for n in range(20)}


async def test_a_group_consumer_hands_out_keys_values_and_tombstones(autojump_clock):
    from trikafka.wire.compression import Codec
    from trikafka.wire.keyed import build_keyed_set

    async with open_cluster(1, num_partitions=1) as cluster, cluster.coordinator() as zk:
        async with await cluster.brokers[0].connect() as conn:
            await conn.produce_acked([("users", 0, build_keyed_set([(b"u1", b"alice"), (b"u2", None)]))])
            await conn.produce_acked([("users", 0, build_keyed_set([(b"u3", b"carol")], codec=Codec.GZIP))])
            await conn.produce_acked([("users", 0, build_message_set([b"plain"]))])
        got = []
        async with GroupConsumer(zk, "g", {"users": 1}, open_stream=cluster.open_stream) as consumer:
            async for m in consumer:
                got.append((m.key, m.value))
                if len(got) == 4:
                    break
    assert got == [(b"u1", b"alice"), (b"u2", b""), (b"u3", b"carol"), (None, b"plain")]
