"""Streaming reads through real Spark: AvailableNow, byte budgets, restarts, exactly once."""

from __future__ import annotations

import json

import pytest


pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]


def _run_available_now(spark, broker_cluster, topic, out_dir, checkpoint_dir, **options):
    """One AvailableNow run of trikafka -> parquet; returns the query's progress list."""
    reader = (
        spark.readStream.format("trikafka")
        .option("brokers", broker_cluster.broker_list)
        .option("topics", topic)
        .option("partitionsPerBroker", "2")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (
        reader.load().writeStream.format("parquet")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query.recentProgress


def _offsets(text: str) -> dict[tuple[int, int], int]:
    doc = json.loads(text) if text not in (None, "null", "None") else None
    if not doc:
        return {}
    ((_, parts),) = doc.items()
    return {tuple(int(x) for x in name.split("-")): offset for name, offset in parts.items()}


def _data_batches(progress) -> list[tuple[dict, dict, int]]:
    """(start, end, rows) of every micro-batch that read data."""
    return [
        (_offsets(p.sources[0].startOffset), _offsets(p.sources[0].endOffset), p.numInputRows)
        for p in progress if p.numInputRows > 0
    ]


def _sink_rows(tk, spark, out_dir) -> list[tuple]:
    return sorted(tk.row_tuple(r) for r in spark.read.parquet(str(out_dir)).collect())


def test_byte_budget_splits_at_message_boundaries_and_restart_is_exactly_once(
    tk, spark, broker_cluster, unique_topic, tmp_path
):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    budget = 6000
    first = tk.produce_mixed(broker_cluster, unique_topic, seed=21)

    progress = _run_available_now(spark, broker_cluster, unique_topic, out, checkpoint, maxBytesPerTrigger=budget)
    batches = _data_batches(progress)
    assert len(batches) > 3
    boundaries = first.boundaries()
    for start, end, _ in batches:
        for key, offset in end.items():
            assert offset in boundaries[key], f"batch ended inside a message of {key} at {offset}"
        # Batch 0 reports no start: it began at the earliest offsets, 0 on these fresh logs.
        read = sum(offset - start.get(key, 0) for key, offset in end.items())
        assert 0 < read <= budget
    assert _sink_rows(tk, spark, out) == sorted(first.all_rows())

    second = tk.produce_mixed(broker_cluster, unique_topic, seed=22)
    progress = _run_available_now(spark, broker_cluster, unique_topic, out, checkpoint, maxBytesPerTrigger=budget)
    assert sum(rows for _, _, rows in _data_batches(progress)) == len(second.all_rows())
    assert _sink_rows(tk, spark, out) == sorted(first.all_rows() + second.all_rows())

    # Nothing new: the restarted query reads nothing and the sink is unchanged.
    progress = _run_available_now(spark, broker_cluster, unique_topic, out, checkpoint)
    assert _data_batches(progress) == []
    assert _sink_rows(tk, spark, out) == sorted(first.all_rows() + second.all_rows())


def test_a_message_bigger_than_the_budget_still_passes_whole(tk, spark, broker_cluster, unique_topic, tmp_path):
    expected = tk.Expected(unique_topic)
    payloads = [b"a" * 50, b"B" * 5000, b"c" * 50]
    base, _ = broker_cluster.produce_payloads(unique_topic, 0, 1, payloads)
    expected.plain(0, 1, base, payloads)

    progress = _run_available_now(
        spark, broker_cluster, unique_topic, tmp_path / "out", tmp_path / "ck", maxBytesPerTrigger=1000
    )
    assert [rows for _, _, rows in _data_batches(progress)] == [1, 1, 1]
    assert _sink_rows(tk, spark, tmp_path / "out") == sorted(expected.all_rows())


def test_latest_start_reads_only_what_arrives_after_the_query_started(
    tk, spark, broker_cluster, unique_topic, tmp_path
):
    broker_cluster.produce_payloads(unique_topic, 1, 0, [b"old-1", b"old-2"])
    out = tmp_path / "out"
    query = (
        spark.readStream.format("trikafka")
        .option("brokers", broker_cluster.broker_list)
        .option("topics", unique_topic)
        .option("partitionsPerBroker", "2")
        .option("startingOffsets", "latest")
        .load().writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        expected = tk.Expected(unique_topic)
        base, _ = broker_cluster.produce_payloads(unique_topic, 1, 0, [b"new-1"])
        expected.plain(1, 0, base, [b"new-1"])
        query.processAllAvailable()
    finally:
        query.stop()
    assert _sink_rows(tk, spark, out) == expected.all_rows()
