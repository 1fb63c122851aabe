"""Batch reads through real Spark (local[2]) from two real ``trikafka serve`` brokers."""

from __future__ import annotations

import json
import random

import pytest


pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]


def _reader(spark, broker_cluster, topic: str):
    return (
        spark.read.format("trikafka")
        .option("brokers", broker_cluster.broker_list)
        .option("topics", topic)
        .option("partitionsPerBroker", "2")
    )


def test_batch_read_equals_produced_byte_for_byte(tk, spark, broker_cluster, unique_topic):
    expected = tk.produce_mixed(broker_cluster, unique_topic, seed=11)
    df = _reader(spark, broker_cluster, unique_topic).load()

    assert df.schema.simpleString() == (
        "struct<topic:string,broker:int,partition:int,offset:bigint,next_offset:bigint,payload:binary>"
    )
    assert df.rdd.getNumPartitions() == 4  # one task per broker/topic/partition
    assert tk.rows_by_partition(df.collect()) == expected.rows


def test_explicit_offsets_select_exact_ranges(tk, spark, broker_cluster, unique_topic):
    payloads = [f"m{i}".encode() for i in range(30)]
    base, _ = broker_cluster.produce_payloads(unique_topic, 1, 1, payloads)
    expected = tk.Expected(unique_topic)
    expected.plain(1, 1, base, payloads)
    rows = expected.rows[(1, 1)]
    start, end = rows[5][3], rows[20][3]  # entry boundaries: the 6th and 21st message

    df = (
        _reader(spark, broker_cluster, unique_topic)
        .option("startingOffsets", json.dumps({unique_topic: {"1-1": start, "0-0": -1}}))
        .option("endingOffsets", json.dumps({unique_topic: {"1-1": end}}))
        .load()
    )
    assert tk.rows_by_partition(df.collect()) == {(1, 1): rows[5:20]}

    latest = _reader(spark, broker_cluster, unique_topic).option("startingOffsets", "latest").load()
    assert latest.count() == 0


def test_message_bigger_than_fetch_size_grows_the_fetch(tk, spark, broker_cluster, unique_topic):
    big = random.Random(3).randbytes(200_000)
    payloads = [b"small-1", big, b"small-2"]
    base, _ = broker_cluster.produce_payloads(unique_topic, 0, 0, payloads)
    expected = tk.Expected(unique_topic)
    expected.plain(0, 0, base, payloads)

    df = _reader(spark, broker_cluster, unique_topic).option("fetchSize", "64").load()
    assert tk.rows_by_partition(df.collect()) == expected.rows

    capped = _reader(spark, broker_cluster, unique_topic).option("fetchSize", "64").option("maxFetchSize", "4096")
    with pytest.raises(Exception, match="maxFetchSize"):
        capped.load().collect()


def test_an_end_offset_inside_a_message_is_rejected(spark, broker_cluster, unique_topic):
    base, end = broker_cluster.produce_payloads(unique_topic, 0, 1, [b"x" * 100, b"y" * 100])
    df = (
        _reader(spark, broker_cluster, unique_topic)
        .option("endingOffsets", json.dumps({unique_topic: {"0-1": base + 50}}))
        .load()
    )
    with pytest.raises(Exception, match="not an entry boundary"):
        df.collect()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"topics": "x", "bogus": "1"}, "unknown trikafka option"),
        ({}, r"exactly one of 'topics' \(or 'subscribe'\) and 'topicPattern'"),
        ({"topics": "x", "startingOffsets": "yesterday"}, "startingOffsets"),
        ({"topics": "bad/name"}, "invalid topic name"),
        ({"topics": "x", "startingOffsets": "group:g"}, "zookeeper"),
    ],
)
def test_bad_options_fail_at_load_with_a_clear_message(spark, broker_cluster, options, message):
    reader = spark.read.format("trikafka").option("brokers", broker_cluster.broker_list)
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load()
