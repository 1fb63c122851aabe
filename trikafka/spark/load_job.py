"""The load job: a trikafka topic into Parquet, exactly once, however often it is killed.

Output layout under ``--output``::

    events/hour=2024-05-01-13/part-....parquet   one row per message, partitioned by UTC hour
    events/_spark_metadata/                      the file sink's commit log
    page_views_per_minute/part-....parquet       page, minute, views

How data and offsets commit together (the paper's "both data and offsets are
stored only on the successful completion of the job"):

1. **events**: a Structured Streaming query ``trikafka -> parquet`` with
   ``Trigger.AvailableNow`` and a checkpoint.  Spark writes a micro-batch's
   end offsets to the checkpoint *before* running it, lists the batch's files
   in ``events/_spark_metadata`` when it commits, and on restart re-runs an
   uncommitted batch with exactly the checkpointed offsets.  Offsets are
   byte positions, so a re-run reads exactly the same messages.
2. A killed batch may leave part files that ``_spark_metadata`` never listed.
   Spark readers ignore them; after a successful stream run the job deletes
   them (``vacuum``) so plain Parquet readers see only committed files.
3. **page_views_per_minute** is recomputed from the committed events and
   swapped in by directory rename, so it is either the previous complete
   result or the new one (a kill between the two renames leaves none; the
   next run rebuilds it).

A lock file in the output directory stops two load jobs from sharing it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlparse

from .offsets import PartitionKey, offsets_from_json

EVENTS_DIR = "events"
AGGREGATE_DIR = "page_views_per_minute"
LOCK_FILE = ".trikafka-load.lock"
EVENT_JSON_SCHEMA = "user STRING, page STRING, timestamp BIGINT"
UNPARSED_HOUR = "unparsed"


@dataclass(frozen=True)
class LoadConfig:
    """What to load and where; ``source_options`` go to ``readStream.format("trikafka")``."""

    source_options: dict[str, str]
    output_dir: str
    checkpoint_dir: str
    commit_to_group: str | None = None
    zookeeper: str | None = None
    audit_tier: str | None = None  # publish loaded counts as this tier (docs/protocol.md §13.2)
    audit_window_s: float = 60.0


@dataclass(frozen=True)
class LoadSummary:
    batches: int
    rows_loaded: int
    rows_total: int
    aggregate_rows: int
    vacuumed_files: int
    end_offsets: dict[PartitionKey, int]


class LoadJobBusyError(RuntimeError):
    """Another load job holds the output directory."""


@contextmanager
def output_lock(output_dir: Path) -> Iterator[None]:
    """An exclusive, non-blocking lock on the output directory (released if the process dies)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    with open(output_dir / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LoadJobBusyError(f"another load job is writing {output_dir}") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def events_frame(stream_df):  # type: ignore[no-untyped-def]
    """Messages -> event rows: parsed JSON fields, event time and the UTC hour partition.

    Rows of the Kafka-format mode (``kafka.bootstrap.servers``, Spark's Kafka
    columns) take the same row shape: no broker (a Kafka partition has one
    numbering, as a replicated topic's, docs/protocol.md §12.9), ``next_offset``
    the record's offset + 1 (what a consumer commits after it), ``payload`` its
    value (an empty one for a tombstone).
    """
    from pyspark.sql import functions as F

    if "value" in stream_df.columns:
        stream_df = stream_df.select(
            "topic", F.lit(None).cast("int").alias("broker"), "partition", "offset",
            (F.col("offset") + 1).alias("next_offset"), F.coalesce("value", F.lit(b"")).alias("payload"))
    event = F.from_json(F.col("payload").cast("string"), EVENT_JSON_SCHEMA)
    event_time = F.timestamp_millis(event["timestamp"])
    return stream_df.select(
        "topic", "broker", "partition", "offset", "next_offset",
        event["user"].alias("user"),
        event["page"].alias("page"),
        event["timestamp"].alias("timestamp_ms"),
        event_time.alias("event_time"),
        "payload",
        F.coalesce(F.date_format(event_time, "yyyy-MM-dd-HH"), F.lit(UNPARSED_HOUR)).alias("hour"),
    )


def run_load(spark, config: LoadConfig) -> LoadSummary:  # type: ignore[no-untyped-def]
    """Run the load once (AvailableNow); safe to re-run after a crash at any point."""
    output = Path(config.output_dir)
    with output_lock(output):
        events_dir = output / EVENTS_DIR
        stream = spark.readStream.format("trikafka").options(**config.source_options).load()
        query = (
            events_frame(stream).writeStream.format("parquet")
            .option("path", str(events_dir))
            .option("checkpointLocation", config.checkpoint_dir)
            .partitionBy("hour")
            .trigger(availableNow=True)
            .queryName(f"trikafka-load-{uuid.uuid4().hex[:8]}")
            .start()
        )
        query.awaitTermination()
        progress = query.recentProgress
        events = spark.read.schema(_events_schema(spark)).parquet(str(events_dir))
        vacuumed = vacuum_uncommitted(events_dir, events.inputFiles())
        aggregate_rows = rebuild_aggregate(spark, events, output)
        end_offsets = committed_offsets(Path(config.checkpoint_dir))
        if config.commit_to_group and end_offsets:
            _commit_group(config, config.commit_to_group, end_offsets)
        if config.audit_tier:
            publish_loaded_counts(events, config)
        return LoadSummary(
            batches=sum(1 for p in progress if p.get("numInputRows", 0) > 0),
            rows_loaded=sum(int(p.get("numInputRows", 0)) for p in progress),
            rows_total=events.count(),
            aggregate_rows=aggregate_rows,
            vacuumed_files=vacuumed,
            end_offsets=end_offsets,
        )


def _events_schema(spark):  # type: ignore[no-untyped-def]
    """The events table schema, so an output with no committed file still reads (as empty)."""
    from .columns import SCHEMA

    fields = [SCHEMA[name] for name in ("topic", "broker", "partition", "offset", "next_offset")]
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    return StructType(fields + [
        StructField("user", StringType()),
        StructField("page", StringType()),
        StructField("timestamp_ms", LongType()),
        StructField("event_time", TimestampType()),
        SCHEMA["payload"],
        StructField("hour", StringType()),
    ])


def vacuum_uncommitted(events_dir: Path, committed_uris: list[str]) -> int:
    """Delete part files the sink's commit log does not list (left by killed batches)."""
    if not events_dir.is_dir():
        return 0
    committed = {os.path.realpath(unquote(urlparse(uri).path)) for uri in committed_uris}
    removed = 0
    for path in events_dir.rglob("part-*"):
        if "_spark_metadata" in path.parts or os.path.realpath(path) in committed:
            continue
        path.unlink()
        checksum = path.with_name(f".{path.name}.crc")
        if checksum.exists():
            checksum.unlink()
        removed += 1
    return removed


def rebuild_aggregate(spark, events, output: Path) -> int:  # type: ignore[no-untyped-def]
    """Views per page per minute over all committed events, swapped in atomically."""
    from pyspark.sql import functions as F

    for stale in output.glob(f".{AGGREGATE_DIR}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = output / f".{AGGREGATE_DIR}.staging-{uuid.uuid4().hex[:8]}"
    aggregate = (
        events.where(F.col("event_time").isNotNull() & F.col("page").isNotNull())
        .groupBy("page", F.date_trunc("minute", "event_time").alias("minute"))
        .agg(F.count(F.lit(1)).alias("views"))
        .orderBy("minute", "page")
    )
    aggregate.write.parquet(str(staging))
    final, old = output / AGGREGATE_DIR, output / f".{AGGREGATE_DIR}.old"
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return spark.read.parquet(str(final)).count()


def committed_offsets(checkpoint_dir: Path) -> dict[PartitionKey, int]:
    """End offsets of the last committed micro-batch (``offsets/N`` with a ``commits/N``)."""
    commits = [int(p.name) for p in (checkpoint_dir / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return {}
    lines = (checkpoint_dir / "offsets" / str(max(commits))).read_text().splitlines()
    # v1 / batch metadata / one line per source: ours is the only source.
    return offsets_from_json(lines[2])


def _commit_group(config: LoadConfig, group: str, offsets: dict[PartitionKey, int]) -> None:
    from .cluster import ZooKeeperCluster

    if not config.zookeeper:
        raise ValueError("commit_to_group needs the ZooKeeper connect string")
    with ZooKeeperCluster(config.zookeeper) as cluster:
        cluster.commit_group_offsets(group, offsets)


def window_counts(rows, window_ms: int):  # type: ignore[no-untyped-def]
    """``((topic, window start), 1)`` for each enveloped payload among ``(topic, payload)`` rows."""
    from trikafka.wire.audit import window_start
    from trikafka.wire.envelope import decode_envelope

    for topic, payload in rows:
        envelope = decode_envelope(payload) if payload is not None else None
        if envelope is not None:
            yield (topic, window_start(envelope.created_ms, window_ms)), 1


def publish_loaded_counts(events, config: LoadConfig) -> int:  # type: ignore[no-untyped-def]
    """Publish what the loaded table holds per topic and window as audit events (snapshots:
    totals, each superseding the tier's earlier event); returns how many were sent."""
    import operator

    from trikafka.wire import ProducePart, build_message_set
    from trikafka.wire.audit import AUDIT_TOPIC, AuditEvent, encode_event

    from .blocking_client import BrokerConnection
    from .cluster import ZooKeeperCluster

    if not config.zookeeper or not config.audit_tier:
        raise ValueError("publishing audit counts needs the ZooKeeper connect string and a tier name")
    window_ms = int(config.audit_window_s * 1000)
    counts = (events.select("topic", "payload").rdd
              .mapPartitions(lambda rows: window_counts(rows, window_ms)).reduceByKey(operator.add).collect())
    payloads = [encode_event(AuditEvent(config.audit_tier, topic, start, window_ms, None, None, n))
                for (topic, start), n in sorted(counts)]
    if not payloads:
        return 0
    with ZooKeeperCluster(config.zookeeper) as cluster:
        brokers = cluster.brokers()
    # One partition (0 of the lowest broker id) for every loader event keeps them in order.
    address = brokers[min(brokers)]
    with BrokerConnection(address.host, address.port) as conn:
        [result] = conn.produce_acked([ProducePart(AUDIT_TOPIC, 0, build_message_set(payloads))], acks=1)
    if result.error:
        raise ConnectionError(f"publishing audit counts failed: error {int(result.error)}")
    return len(payloads)
