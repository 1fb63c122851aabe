"""The trikafka source with the ZooKeeper registry: discovery, topic patterns, group offsets.

The brokers run standalone, so each test writes their registration znodes
itself, exactly as spec §8.2 lays them out (``/brokers/ids/<id>`` =
``creator:host:port``, ``/brokers/topics/<t>/<id>`` = partition count).
"""

from __future__ import annotations

import re

import pytest
from kazoo.client import KazooClient

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark, pytest.mark.zookeeper]


@pytest.fixture
def registry(zk_chroot, broker_cluster):  # type: ignore[no-untyped-def]
    """A kazoo client inside the test's chroot, with both brokers registered."""
    client = KazooClient(hosts=zk_chroot, timeout=10.0)
    client.start(timeout=10.0)
    try:
        for broker_id, address in broker_cluster.addresses.items():
            value = f"{address.host}-1714567200000:{address.host}:{address.port}".encode()
            client.create(f"/brokers/ids/{broker_id}", value, makepath=True)
        yield client
    finally:
        client.stop()
        client.close()


def register_topic(client: KazooClient, topic: str, partitions_by_broker: dict[int, int]) -> None:
    for broker_id, count in partitions_by_broker.items():
        client.create(f"/brokers/topics/{topic}/{broker_id}", str(count).encode(), makepath=True)


def _group_offset(client: KazooClient, group: str, topic: str, name: str) -> int:
    return int(client.get(f"/consumers/{group}/offsets/{topic}/{name}")[0])


def test_pattern_discovery_group_start_and_commit(tk, spark, broker_cluster, registry, zk_chroot, unique_topic):
    topic_a, topic_b, other = f"{unique_topic}-a", f"{unique_topic}-b", f"{unique_topic}-other"
    register_topic(registry, topic_a, {0: 2, 1: 2})
    register_topic(registry, topic_b, {1: 1})  # broker 0 holds only "virtual" partition 0 (spec §8.5)
    register_topic(registry, other, {0: 1})
    expected_a, expected_b = tk.Expected(topic_a), tk.Expected(topic_b)
    for broker, partition in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        payloads = [f"{topic_a}/{broker}-{partition}/{i}".encode() for i in range(10)]
        base, _ = broker_cluster.produce_payloads(topic_a, broker, partition, payloads)
        expected_a.plain(broker, partition, base, payloads)
    for broker in (0, 1):
        base, _ = broker_cluster.produce_payloads(topic_b, broker, 0, [b"b1", b"b2"])
        expected_b.plain(broker, 0, base, [b"b1", b"b2"])
    broker_cluster.produce_payloads(other, 0, 0, [b"not selected"])

    # The start group has an offset for A/0-0 (after 3 messages) and an empty node for A/1-1.
    skip_to = expected_a.rows[(0, 0)][3][3]
    registry.create(f"/consumers/start/offsets/{topic_a}/0-0", str(skip_to).encode(), makepath=True)
    registry.create(f"/consumers/start/offsets/{topic_a}/1-1", b"", makepath=True)

    df = (
        spark.read.format("trikafka")
        .option("zookeeper", zk_chroot)
        .option("topicPattern", re.escape(unique_topic) + "-(a|b)")
        .option("startingOffsets", "group:start")
        .option("commitToGroup", "loaded")
        .load()
    )
    got = tk.rows_by_partition(df.orderBy("topic", "broker", "partition", "offset").collect())
    want_a = {k: (v[3:] if k == (0, 0) else v) for k, v in expected_a.rows.items()}
    assert {k: [r for r in v if r[0] == topic_a] for k, v in got.items()} == want_a
    assert {k: [r for r in v if r[0] == topic_b] for k, v in got.items() if k[1] == 0} == expected_b.rows

    for (broker, partition), rows in expected_a.rows.items():
        assert _group_offset(registry, "loaded", topic_a, f"{broker}-{partition}") == rows[-1][4]
    assert _group_offset(registry, "loaded", topic_b, "0-0") == expected_b.rows[(0, 0)][-1][4]


def test_stream_picks_up_a_topic_that_appears_later(tk, spark, broker_cluster, registry, zk_chroot, unique_topic,
                                                     tmp_path):
    topic_a, topic_c = f"{unique_topic}-a", f"{unique_topic}-c"
    register_topic(registry, topic_a, {0: 1, 1: 1})
    expected = []
    for broker in (0, 1):
        payloads = [f"a{broker}-{i}".encode() for i in range(5)]
        broker_cluster.produce_payloads(topic_a, broker, 0, payloads)
        expected += payloads

    def run() -> None:
        query = (
            spark.readStream.format("trikafka")
            .option("zookeeper", zk_chroot)
            .option("topicPattern", re.escape(unique_topic) + "-.*")
            .option("commitToGroup", "streamed")
            .load().writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    register_topic(registry, topic_c, {1: 2})
    for partition in (0, 1):
        payloads = [f"c{partition}-{i}".encode() for i in range(4)]
        broker_cluster.produce_payloads(topic_c, 1, partition, payloads)
        expected += payloads
    run()  # C entered the offsets at its earliest offset: nothing of it is skipped
    run()

    got = [bytes(r.payload) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(got) == sorted(expected)
    # commit() lags a batch in Spark; by the third run every batch of A was committed.
    for broker in (0, 1):
        end = broker_cluster.visible_end(topic_a, broker, 0)
        assert _group_offset(registry, "streamed", topic_a, f"{broker}-0") == end
