"""Spark load throughput vs a plain read with the wire decoder, and vs Spark's own floor.

Starts two ``trikafka serve`` brokers (two partitions each: four partitions),
produces ``--messages`` messages of ``--payload-bytes`` random bytes, then
measures:

* **plain read**: a Spark task's body (``read_partition``) outside Spark,
  one process reading the four partitions in turn (wall and whole-tree CPU,
  brokers included: the source's own work outside Spark), and the same split
  over ``--workers`` processes;
* **spark batch / stream read -> noop**: the source alone, into Spark's
  ``noop`` sink (Spark pulls every column and writes nothing); streaming is
  ``readStream`` with ``Trigger.AvailableNow`` (one micro-batch);
* **spark's floor**: a synthetic source that yields the same rows as
  ready-made RecordBatches (no I/O, no decoding), batch and streaming, into
  the same sinks: what Spark itself costs on this machine whatever the
  source does.  The noop runs of both sources alternate over ``--rounds``
  rounds, so load from other processes hits both; the ratios (our rate /
  the floor's rate) are the figures that count on a shared machine;
* **spark batch / stream load -> parquet**: the pipeline's paths;
* **the estimated ceiling while the cores are full**: when Spark alone keeps
  every core busy, the source's own CPU adds to Spark's instead of running
  beside it, so the batch ratio stays near floor CPU / (floor CPU + plain
  read CPU).

Noop runs report wall seconds and the CPU seconds of the whole process tree
(this process, the JVM, Spark's Python workers, the brokers), which load from
other processes disturbs much less.

Run: ``python bench/spark_bench.py`` (2M x 200 B, about 3 minutes),
``--master local-cluster[2,1,1024]`` for separate executor JVMs, or
``--messages 200000`` for a quick look.
Figures are msgs/s and MB/s of payload (1 MB = 10^6 bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from served_broker import served_broker
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.spark.cluster import format_broker_list
from trikafka.wire.metadata import BrokerAddress
from trikafka.spark.offsets import PartitionKey
from trikafka.spark.options import parse_options
from trikafka.spark.planning import PartitionRange
from trikafka.spark.tasks import RangePartition, read_partition
from trikafka.wire import ErrorCode, ProducePart, build_message_set

PARTITIONS_PER_BROKER = 2
BROKERS = 2
PRODUCE_BATCH = 5000


BROKER_SETTINGS: list[str] = []  # extra broker settings from the command line (--broker-set)


UNIX_SOCKETS = False  # --unix-sockets: brokers also listen on a Unix socket, the source uses it


def socket_path(broker_id: int, root: Path) -> Path:
    return root / f"broker-{broker_id}.sock"


def broker_args(broker_id: int, root: Path) -> list[str]:
    extra = [arg for setting in BROKER_SETTINGS for arg in ("--set", setting)]
    if UNIX_SOCKETS:
        extra += ["--set", f"unix.socket.path={socket_path(broker_id, root)}"]
    return ["--standalone", "--host", "127.0.0.1", "--log-dir", str(root / f"broker-{broker_id}"),
            "--broker-id", str(broker_id), "--num-partitions", str(PARTITIONS_PER_BROKER),
            "--set", "log_flush_interval=100000000", *extra]


def produce(brokers: dict[int, BrokerAddress], keys: list[PartitionKey], messages: int, payload_bytes: int) -> float:
    rng = random.Random(42)
    pool = [rng.randbytes(payload_bytes) for _ in range(4096)]
    per_key = messages // len(keys)
    started = time.perf_counter()
    for key in keys:
        address = brokers[key.broker]
        with BrokerConnection(address.host, address.port, timeout_s=120) as conn:
            for first in range(0, per_key, PRODUCE_BATCH):
                count = min(PRODUCE_BATCH, per_key - first)
                payloads = [pool[(first + i) % len(pool)] for i in range(count)]
                part = ProducePart(key.topic, key.partition, build_message_set(payloads))
                (result,) = conn.produce_acked([part], timeout_ms=120_000)
                assert result.error == ErrorCode.NO_ERROR, result
    return time.perf_counter() - started


def plain_read(args: tuple[BrokerAddress, PartitionKey]) -> tuple[int, int]:
    """Read one whole partition with a Spark task's body (``read_partition``: the blocking
    client, the column decoder, the RecordBatches), outside Spark; (messages, payload bytes)."""
    address, key = args
    with BrokerConnection(address.host, address.port) as conn:
        end = conn.visible_end(key.topic, key.partition)
    options = parse_options({"brokers": f"{address.broker_id}:{address.host}:{address.port}", "topics": key.topic,
                             **FETCH_OPTIONS})
    planned = PartitionRange(key, address.host, address.port, 0, end)
    count = size = 0
    for batch in read_partition(options, RangePartition(planned)):
        count += batch.num_rows
        size += batch.column("payload").buffers()[2].size
    return count, size


def time_plain(brokers, keys, workers: int) -> tuple[float, float, int, int]:
    """(wall s, whole-tree CPU s, messages, payload bytes) of reading every partition."""
    jobs = [(brokers[k.broker], k) for k in keys]
    cpu, started = tree_cpu_s(), time.perf_counter()
    if workers == 1:
        results = [plain_read(job) for job in jobs]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(plain_read, jobs, chunksize=1)
    elapsed = time.perf_counter() - started
    return elapsed, tree_cpu_s() - cpu, sum(r[0] for r in results), sum(r[1] for r in results)


FETCH_OPTIONS: dict[str, str] = {}  # extra source options from the command line (--fetch-bytes, --prefetch)


def spark_reader(spark, broker_list: str, topic: str, stream: bool = False):  # type: ignore[no-untyped-def]
    reader = spark.readStream if stream else spark.read
    return (reader.format("trikafka").option("brokers", broker_list).option("topics", topic)
            .option("partitionsPerBroker", str(PARTITIONS_PER_BROKER)).options(**FETCH_OPTIONS))


def tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by ``pid`` (default: this process) and its
    descendants: the JVM, Spark's Python workers and the brokers.  Each live process counts
    itself and its reaped children, so no second is counted twice (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, [pid or os.getpid()]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo.extend(children.get(current, []))
    return total


def _measured(run) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds of the whole process tree) of ``run()``."""
    cpu, started = tree_cpu_s(), time.perf_counter()
    run()
    return time.perf_counter() - started, tree_cpu_s() - cpu


def _batch_noop(df) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return _measured(lambda: df.write.format("noop").mode("overwrite").save())


def _stream_noop(df, checkpoint: Path) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return _measured(lambda: df.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                     .trigger(availableNow=True).start().awaitTermination())


def register_synthetic_source(spark, rows: int, payload_bytes: int, partitions: int,  # type: ignore[no-untyped-def]
                              batch_rows: int = 5000) -> str:
    """Register the floor-measuring source under the name it returns: ``rows`` rows of random
    ``payload_bytes`` payloads over ``partitions`` tasks, yielded as prebuilt RecordBatches
    (batch reads, and streaming reads with one micro-batch of all rows)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from trikafka.spark.columns import SCHEMA

    class SyntheticReader(DataSourceReader):
        BATCH_ROWS = batch_rows  # 5000: about what one 1 MiB fetch of 200-byte messages holds

        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            from trikafka.spark.columns import arrow_schema

            rng = random.Random(partition.value)
            n = self.BATCH_ROWS
            batch = pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar("bench", pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.repeat(pa.scalar(partition.value, pa.int32()), n), pa.array(range(n), pa.int64()),
                pa.array(range(1, n + 1), pa.int64()),
                pa.array([rng.randbytes(payload_bytes) for _ in range(n)], pa.binary()),
            ], schema=arrow_schema())
            left = rows // partitions
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self):  # type: ignore[no-untyped-def]
            return {"read": 0}

        def latestOffset(self, start=None, limit=None):  # type: ignore[no-untyped-def]
            return {"read": 1}

        def prepareForTriggerAvailableNow(self):  # type: ignore[no-untyped-def]
            pass

        def partitions(self, start, end):  # type: ignore[no-untyped-def]
            return SyntheticReader().partitions() if start != end else []

        def read(self, partition):  # type: ignore[no-untyped-def]
            return SyntheticReader().read(partition)

    class SyntheticSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "trikafka_bench_synthetic"

        def schema(self):  # type: ignore[no-untyped-def]
            return SCHEMA

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return SyntheticReader()

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return SyntheticStreamReader()

    spark.dataSource.register(SyntheticSource)
    return SyntheticSource.name()


def time_noop(spark, broker_list: str, topic: str, rows: int, payload_bytes: int, partitions: int,  # type: ignore[no-untyped-def]
              rounds: int, out: Path, floor_batch_rows: int = 5000) -> dict[str, list[float]]:
    """Wall and CPU seconds into the noop sink (Spark pulls every column, writes nothing) for
    our source and the synthetic floor, batch and streaming, interleaved over ``rounds`` so
    that load from other processes hits both alike.  CPU seconds (whole process tree) are the
    steadier measure on a shared machine: other processes slow the wall clock, not them."""
    synthetic = register_synthetic_source(spark, rows, payload_bytes, partitions, floor_batch_rows)
    # Warm up: Python workers, and the JVM's JIT on the whole path (a first full pass ran
    # about twice as long as later ones).
    _batch_noop(spark.read.format(synthetic).load())
    _batch_noop(spark_reader(spark, broker_list, topic).load())
    times: dict[str, list[float]] = {}
    for i in range(rounds):
        for key, (wall, cpu) in [
            ("floor_noop", _batch_noop(spark.read.format(synthetic).load())),
            ("noop", _batch_noop(spark_reader(spark, broker_list, topic).load())),
            ("floor_stream_noop", _stream_noop(spark.readStream.format(synthetic).load(), out / f"floor-ckpt-{i}")),
            ("stream_noop", _stream_noop(spark_reader(spark, broker_list, topic, stream=True).load(),
                                         out / f"noop-ckpt-{i}")),
        ]:
            times.setdefault(f"{key}_s", []).append(wall)
            times.setdefault(f"{key}_cpu_s", []).append(cpu)
    return times


def time_floor(spark, rows: int, payload_bytes: int, partitions: int, out: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    name = register_synthetic_source(spark, rows, payload_bytes, partitions)
    started = time.perf_counter()
    spark.read.format(name).load().write.mode("overwrite").parquet(str(out / "synthetic"))
    batch_s = time.perf_counter() - started
    assert spark.read.parquet(str(out / "synthetic")).count() == rows // partitions * partitions
    return {"floor_batch_s": batch_s}


def time_spark(spark, broker_list: str, topic: str, out: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    spark_reader(spark, broker_list, topic).load().write.mode("overwrite").parquet(str(out / "batch"))
    batch_s = time.perf_counter() - started
    started = time.perf_counter()
    query = (spark_reader(spark, broker_list, topic, stream=True).load().writeStream.format("parquet")
             .option("path", str(out / "stream")).option("checkpointLocation", str(out / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    stream_s = time.perf_counter() - started
    rows = spark.read.parquet(str(out / "stream")).count()
    return {"batch_s": batch_s, "stream_s": stream_s, "stream_rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--payload-bytes", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2, help="processes for the parallel plain read")
    parser.add_argument("--master", default="local[2]",
                        help="e.g. local-cluster[2,1,1024] (2 executor JVMs of 1 core and 1 GiB each)")
    # Ten: on a shared 2-core machine one round's ratio ranges from about 70% to 170%, and the
    # best of three rounds still moved by 10 points from run to run (a round takes ~10 s).
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of the noop-sink runs")
    parser.add_argument("--fetch-bytes", type=int, help="the source's fetchSize (default: the source's)")
    parser.add_argument("--floor-batch-rows", type=int, default=5000, help="rows per synthetic RecordBatch")
    parser.add_argument("--prefetch", action="store_true", help="the source's prefetch option (a fetch thread per task)")
    parser.add_argument("--broker-set", action="append", default=[], metavar="NAME=VALUE",
                        help="a broker setting, e.g. socket_send_buffer=102400 (0.7's fixed send buffer)")
    parser.add_argument("--unix-sockets", action="store_true",
                        help="brokers also listen on Unix sockets (unix.socket.path) and the source reads through "
                             "them (brokerSockets): the transport of a Spark on the brokers' machine; fetches are "
                             "short-circuit reads of the segment files (FETCH_LOCAL) unless --no-short-circuit")
    parser.add_argument("--no-short-circuit", action="store_true",
                        help="with --unix-sockets: the bytes come over the socket (the source's shortCircuit=false)")
    args = parser.parse_args()
    BROKER_SETTINGS.extend(args.broker_set)
    global UNIX_SOCKETS
    UNIX_SOCKETS = args.unix_sockets

    root = Path(tempfile.mkdtemp(prefix="trikafka-spark-bench-"))
    try:
        with contextlib.ExitStack() as stack:
            brokers = {}
            for broker_id in range(BROKERS):
                _proc, port = stack.enter_context(
                    served_broker(broker_args(broker_id, root), root / f"broker-{broker_id}.port"))
                brokers[broker_id] = BrokerAddress(broker_id, "127.0.0.1", port)
            keys = [PartitionKey("bench", b, p) for b in range(BROKERS) for p in range(PARTITIONS_PER_BROKER)]
            if UNIX_SOCKETS:
                FETCH_OPTIONS["brokerSockets"] = ",".join(f"{b}={socket_path(b, root)}" for b in range(BROKERS))
                FETCH_OPTIONS["shortCircuit"] = str(not args.no_short_circuit).lower()
            messages = args.messages // len(keys) * len(keys)
            produce_s = produce(brokers, keys, messages, args.payload_bytes)
            figures = report(args, brokers, keys, messages, produce_s, root)
            print(json.dumps(figures))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def report(args, brokers, keys, messages: int, produce_s: float, root: Path) -> dict:  # type: ignore[no-untyped-def]
    from trikafka.spark.session import build_session

    payload_mb = messages * args.payload_bytes / 1e6
    figures: dict = {"messages": messages, "payload_mb": payload_mb, "produce_s": produce_s,
                     "master": args.master, "fetch_bytes": args.fetch_bytes, "floor_batch_rows": args.floor_batch_rows,
                     "prefetch": args.prefetch, "broker_set": args.broker_set, "unix_sockets": args.unix_sockets,
                     "short_circuit": args.unix_sockets and not args.no_short_circuit}
    for workers in sorted({1, args.workers}):
        elapsed, cpu, count, size = time_plain(brokers, keys, workers)
        assert count == messages and size == messages * args.payload_bytes
        figures[f"plain_{workers}proc_s"], figures[f"plain_{workers}proc_cpu_s"] = elapsed, cpu
    spark = build_session("trikafka-bench", master=args.master)
    broker_list = format_broker_list(brokers.values())
    try:
        if args.fetch_bytes:
            FETCH_OPTIONS["fetchSize"] = str(args.fetch_bytes)
        if args.prefetch:
            FETCH_OPTIONS["prefetch"] = "true"
        runs = time_noop(spark, broker_list, "bench", messages, args.payload_bytes, len(keys), args.rounds,
                         root / "out", args.floor_batch_rows)
        figures["runs"] = runs
        figures.update({key: min(values) for key, values in runs.items()})
        figures.update(time_spark(spark, broker_list, "bench", root / "out"))
        figures.update(time_floor(spark, messages, args.payload_bytes, len(keys), root / "out"))
    finally:
        spark.stop()
    assert figures["stream_rows"] == messages
    transport = ("Unix sockets" + ("" if args.no_short_circuit else ", short-circuit reads")) if args.unix_sockets else "TCP"
    print(f"master {args.master}, transport {transport}, "
          f"fetchSize {args.fetch_bytes or 'default'}, prefetch {args.prefetch}, "
          f"broker settings {args.broker_set or 'default'}, "
          f"{args.floor_batch_rows} rows per synthetic batch; noop sink: best of {args.rounds} interleaved rounds (wall and CPU separately)")
    print(f"{'what':<38}{'seconds':>9}{'msgs/s':>12}{'MB/s':>9}")
    rows = [("produce (acks=-1)", "produce_s")] + [
        (f"plain read, {w} process(es)", f"plain_{w}proc_s") for w in sorted({1, args.workers})
    ] + [("  CPU s of 1 process, brokers included", "plain_1proc_cpu_s"),
         ("spark batch read -> noop sink", "noop_s"), ("  CPU s, whole process tree", "noop_cpu_s"),
         ("floor: synthetic batch -> noop sink", "floor_noop_s"), ("  CPU s, whole process tree", "floor_noop_cpu_s"),
         ("spark stream read -> noop sink", "stream_noop_s"), ("  CPU s, whole process tree", "stream_noop_cpu_s"),
         ("floor: synthetic stream -> noop sink", "floor_stream_noop_s"),
         ("  CPU s, whole process tree", "floor_stream_noop_cpu_s"),
         ("spark batch load -> parquet", "batch_s"), ("floor: synthetic batch -> parquet", "floor_batch_s"),
         ("spark stream load -> parquet", "stream_s")]
    for label, key in rows:
        seconds = figures[key]
        print(f"{label:<38}{seconds:>9.2f}{messages / seconds:>12,.0f}{payload_mb / seconds:>9.1f}")
    for key, values in runs.items():
        print(f"  {key} every round: {' '.join(f'{v:.2f}' for v in values)}")
    for ours, floor, label in [("noop_s", "floor_noop_s", "batch read -> noop, wall"),
                               ("noop_cpu_s", "floor_noop_cpu_s", "batch read -> noop, CPU"),
                               ("stream_noop_s", "floor_stream_noop_s", "stream read -> noop, wall"),
                               ("stream_noop_cpu_s", "floor_stream_noop_cpu_s", "stream read -> noop, CPU"),
                               ("batch_s", "floor_batch_s", "batch load -> parquet, wall")]:
        figures[f"{ours[:-2]}_vs_floor"] = figures[floor] / figures[ours]
        per_round = "" if ours not in runs else " (rounds: " + " ".join(
            f"{f / o:.0%}" for f, o in zip(runs[floor], runs[ours])) + ")"
        print(f"{label}: our rate / synthetic floor's rate = {figures[f'{ours[:-2]}_vs_floor']:.0%}{per_round}")
    # When Spark alone fills every core (it does on 2), the source's own CPU (fetching through the
    # brokers, decoding) adds to Spark's instead of overlapping it: the batch ratio stays near this
    # estimate (an estimate: the plain read's CPU and Spark's share of caches are measured apart).
    figures["cpu_bound_ceiling"] = figures["floor_noop_cpu_s"] / (figures["floor_noop_cpu_s"]
                                                                  + figures["plain_1proc_cpu_s"])
    print(f"batch read -> noop, estimated ceiling while the cores are full: floor CPU / (floor CPU + plain read CPU) = "
          f"{figures['cpu_bound_ceiling']:.0%}")
    figures["stream_vs_batch_noop"] = figures["noop_s"] / figures["stream_noop_s"]
    print(f"stream read / batch read rate (noop): {figures['stream_vs_batch_noop']:.0%}")
    return figures


if __name__ == "__main__":
    sys.exit(main())
