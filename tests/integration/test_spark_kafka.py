"""The Spark source's Kafka-format mode through real Spark (local[2]) against trikafka's Kafka listener.

A PySpark job written for spark-sql-kafka (its option names, its columns)
runs with ``format("trikafka")``; what it reads is compared with what
confluent-kafka produced and what librdkafka's consumer reads back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.kafka_clients import create_topic, read_with_confluent
from tests.helpers.kafka_compaction import create_compacted, produce_history, wait_until_cleaned

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]

PARTITIONS = 3


def _produce_with_confluent(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    """Keyed and unkeyed records with headers and explicit times over ``PARTITIONS`` partitions;
    (partition, key, value, headers, timestamp ms) of each, in send order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent = []
    for i in range(60):
        partition = i % PARTITIONS
        key = None if i % 7 == 0 else b"key-%d" % i
        value = None if i % 11 == 5 else b"value-%d-" % i + bytes([i]) * (i % 5)
        headers = [("h", b"%d" % i), ("empty", b"")] if i % 3 else []
        timestamp_ms = 1_700_000_000_000 + i * 1000
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers, timestamp=timestamp_ms)
        sent.append((partition, key, value, tuple(headers), timestamp_ms))
    assert producer.flush(30) == 0
    return sent


def _spark_kafka_reader(spark, bootstrap: str):  # type: ignore[no-untyped-def]
    """``spark.read`` as a spark-sql-kafka job writes it, but for the format name."""
    return spark.read.format("trikafka").option("kafka.bootstrap.servers", bootstrap)


def test_a_spark_sql_kafka_job_reads_what_confluent_kafka_produced(spark, broker_cluster, unique_topic):
    bootstrap = broker_cluster.kafka_bootstrap
    create_topic(bootstrap, unique_topic, PARTITIONS)
    sent = _produce_with_confluent(bootstrap, unique_topic)
    consumed = read_with_confluent(bootstrap, unique_topic, PARTITIONS, len(sent))
    assert len(consumed) == len(sent)

    df = (_spark_kafka_reader(spark, bootstrap).option("subscribe", unique_topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .option("includeHeaders", "true").load())
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.selectExpr("key", "value", "topic", "partition", "offset", "CAST(timestamp AS DOUBLE) AS ts",
                         "timestampType", "headers").collect()
    got = sorted((r.partition, r.offset, r.key, r.value, tuple((h.key, bytes(h.value)) for h in r.headers),
                  round(r.ts * 1000), r.timestampType, r.topic) for r in rows)
    expected = sorted((s.partition, s.offset, s.key, s.value, s.headers, s.timestamp_ms, 0, unique_topic)
                      for s in consumed)
    assert got == expected
    # And what librdkafka read back is what was sent (so the comparison above is with the producer's data).
    by_time = {t: (p, k, v, h, t) for p, k, v, h, t in sent}  # every record has its own time
    assert by_time == {s.timestamp_ms: (s.partition, s.key, s.value, s.headers, s.timestamp_ms) for s in consumed}

    # assign with JSON offsets (-2 earliest, -1 latest) picks exact ranges; no headers column by default.
    ranged = (_spark_kafka_reader(spark, bootstrap).option("assign", json.dumps({unique_topic: [0, 2]}))
              .option("startingOffsets", json.dumps({unique_topic: {"0": 3, "2": -2}}))
              .option("endingOffsets", json.dumps({unique_topic: {"0": 10, "2": -1}})).load())
    assert "headers" not in ranged.columns
    picked = sorted((r.partition, r.offset, r.value) for r in ranged.collect())
    assert picked == sorted((s.partition, s.offset, s.value) for s in consumed
                            if (s.partition == 0 and 3 <= s.offset < 10) or s.partition == 2)


def test_unknown_and_malformed_options_fail_in_one_line(spark, broker_cluster, unique_topic):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    def reader():  # type: ignore[no-untyped-def]
        return _spark_kafka_reader(spark, broker_cluster.kafka_bootstrap).option("subscribe", unique_topic)

    with pytest.raises((PySparkException, Py4JJavaError), match="unknown option.*kafka.group.idd"):
        reader().option("kafka.group.idd", "x").load()
    with pytest.raises((PySparkException, Py4JJavaError), match="latest \\(-1\\) is not allowed in a batch read"):
        reader().option("startingOffsets", "latest").load()


def test_a_compacted_topic_is_read_with_its_offset_gaps(spark):
    from trikafka.testing import running_kafka_broker

    with running_kafka_broker(num_partitions=1, log_cleaner_backoff_ms=20,
                              min_cleanable_dirty_ratio=0.01) as kafka:
        create_compacted(kafka.bootstrap, "compacted")
        latest = produce_history(kafka.bootstrap, "compacted")
        stored = wait_until_cleaned(kafka.log_dir, "compacted")
        rows = (_spark_kafka_reader(spark, kafka.bootstrap).option("subscribe", "compacted").load()
                .select("offset", "key", "value").collect())
    got = sorted((r.offset, r.key, r.value) for r in rows)
    assert got == stored  # every retained record at its original offset
    assert got[-1][0] + 1 > len(got)  # the offsets have gaps
    assert {k: v for _, k, v in got} == latest


def test_streaming_with_max_offsets_per_trigger_reads_each_record_once(spark, broker_cluster, unique_topic,
                                                                       tmp_path):
    bootstrap = broker_cluster.kafka_bootstrap
    create_topic(bootstrap, unique_topic, PARTITIONS)
    sent = _produce_with_confluent(bootstrap, unique_topic)
    batches: list[list[tuple[int, int]]] = []

    def collect(frame, _batch_id):  # type: ignore[no-untyped-def]
        batches.append([(r.partition, r.offset) for r in frame.select("partition", "offset").collect()])

    stream = (spark.readStream.format("trikafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", unique_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "25").load())
    query = (stream.writeStream.foreachBatch(collect).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    read = [row for batch in batches for row in batch]
    assert sorted(read) == sorted((p, o) for p in range(PARTITIONS) for o in range(len(sent) // PARTITIONS))
    assert len(batches) >= 3 and all(len(batch) <= 25 for batch in batches)


def test_the_exactly_once_load_job_runs_on_a_kafka_format_topic(spark, broker_cluster, unique_topic, tmp_path):
    """The load job's promise on a Kafka-format topic: data and offsets commit together, so a run
    that replays a batch whose commit was lost (Spark re-runs it from the checkpointed offsets) and a
    run after more data arrived still hold every event exactly once."""
    import random

    from confluent_kafka import Producer

    from trikafka.spark.load_job import EVENTS_DIR, LoadConfig, run_load
    from trikafka.spark.offsets import PartitionKey
    from trikafka.spark.pageviews import iter_pageviews

    bootstrap = broker_cluster.kafka_bootstrap
    create_topic(bootstrap, unique_topic, 2)
    views = [v.to_json_bytes() for v in iter_pageviews(400, rng=random.Random(5), start_ms=1_714_567_200_000)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(payloads: list[bytes]) -> None:
        for i, payload in enumerate(payloads):
            producer.produce(unique_topic, value=payload, partition=i % 2)
        assert producer.flush(30) == 0

    config = LoadConfig(
        source_options={"kafka.bootstrap.servers": bootstrap, "subscribe": unique_topic,
                        "startingOffsets": "earliest", "maxOffsetsPerTrigger": "70"},
        output_dir=str(tmp_path / "out"), checkpoint_dir=str(tmp_path / "ckpt"))
    produce(views[:250])
    first = run_load(spark, config)
    assert first.rows_total == 250 and first.batches >= 3
    # A crash after the last batch's files were written and before its commit: Spark runs it again.
    commits = sorted((p for p in (tmp_path / "ckpt" / "commits").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)
    produce(views[250:])
    second = run_load(spark, config)
    events = spark.read.parquet(str(tmp_path / "out" / EVENTS_DIR))
    loaded = sorted(bytes(r.payload) for r in events.select("payload").collect())
    assert loaded == sorted(views)
    assert second.end_offsets == {PartitionKey(unique_topic, None, 0): 200, PartitionKey(unique_topic, None, 1): 200}
    assert events.select("partition", "offset").distinct().count() == len(views)
