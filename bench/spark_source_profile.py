"""Where a Spark task of the trikafka source spends its time, per row, without Spark.

Starts one ``trikafka serve`` broker with one partition, produces
``--messages`` messages of ``--payload-bytes`` random bytes, then reads the
whole partition in this process the way a task does and times each stage:

* **fetch**: FETCH round trips on the blocking client into one reused
  buffer (``fetch_into``; broker work included);
* **decode**: ``wire.columns.decode_set`` with Arrow's gather (run
  detection, CRC checks, payloads gathered);
* **arrow**: ``RecordBatchBuilder.build`` (adopting the gathered payloads);
* **hop**: writing each batch to an Arrow IPC stream, the Python half of
  the hand-over to the JVM (Spark's worker does the same into a socket);
* **task**: ``read_partition`` end to end (prefetch thread included), and
  the per-task fixed costs (Arrow schema, connection).

``--profile`` adds a cProfile of one task.  Run:
``python bench/spark_source_profile.py`` (500k x 200 B).
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from served_broker import served_broker
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.spark.columns import RecordBatchBuilder, arrow_schema, decode_fetched
from trikafka.spark.offsets import PartitionKey
from trikafka.spark.options import parse_options
from trikafka.spark.planning import PartitionRange
from trikafka.spark.source import RangePartition, read_partition
from trikafka.wire import ErrorCode, ProducePart, build_message_set

KEY = PartitionKey("profile", 0, 0)
PRODUCE_BATCH = 5000


def produce(port: int, messages: int, payload_bytes: int) -> int:
    rng = random.Random(7)
    pool = [rng.randbytes(payload_bytes) for _ in range(4096)]
    with BrokerConnection("127.0.0.1", port, timeout_s=120) as conn:
        for first in range(0, messages, PRODUCE_BATCH):
            payloads = [pool[(first + i) % len(pool)] for i in range(min(PRODUCE_BATCH, messages - first))]
            (result,) = conn.produce_acked([ProducePart(KEY.topic, KEY.partition, build_message_set(payloads))],
                                           timeout_ms=120_000)
            assert result.error == ErrorCode.NO_ERROR, result
        return conn.visible_end(KEY.topic, KEY.partition)


def stages(port: int, end: int, fetch_bytes: int) -> dict[str, float]:
    """Seconds per stage for one serial read of the partition (no prefetch thread): the
    task's fetch loop, unrolled here so that each stage can be timed."""
    timings = {"fetch": 0.0, "decode": 0.0, "arrow": 0.0, "hop": 0.0}
    schema = arrow_schema()
    builder = RecordBatchBuilder(KEY, schema)
    sink = pa.MockOutputStream()
    buffer = bytearray(fetch_bytes)
    rows = batches = pos = 0
    clock = time.perf_counter
    with BrokerConnection("127.0.0.1", port) as conn, pa.ipc.new_stream(sink, schema) as writer:
        while pos < end:
            started = clock()
            error, size = conn.fetch_into(KEY.topic, KEY.partition, pos, min(fetch_bytes, end - pos), buffer)
            decoding = clock()
            decoded = decode_fetched(buffer, pos, size)
            building = clock()
            batch = builder.build(decoded)
            hop = clock()
            writer.write_batch(batch)
            done = clock()
            assert error == ErrorCode.NO_ERROR and decoded.valid_bytes, (error, pos)
            for stage, seconds in (("fetch", decoding - started), ("decode", building - decoding),
                                   ("arrow", hop - building), ("hop", done - hop)):
                timings[stage] += seconds
            pos += decoded.valid_bytes
            rows += batch.num_rows
            batches += 1
    timings["rows"], timings["batches"] = rows, batches
    return timings


def task(port: int, end: int, fetch_bytes: int) -> tuple[float, float, float, int]:
    """(fixed cost s, whole task s, rows) of ``read_partition``, as Spark runs it."""
    started = time.perf_counter()
    options = parse_options({"brokers": f"0:127.0.0.1:{port}", "topics": KEY.topic,
                             "fetchSize": str(fetch_bytes)})
    partition = RangePartition(PartitionRange(KEY, "127.0.0.1", port, 0, end))
    batches = read_partition(options, partition)
    first = next(batches)
    first_s = time.perf_counter() - started
    rows = first.num_rows + sum(b.num_rows for b in batches)
    return first_s, time.perf_counter() - started, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--payload-bytes", type=int, default=200)
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one task")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trikafka-source-profile-"))
    try:
        serve = ["--standalone", "--host", "127.0.0.1", "--log-dir", str(root / "log"), "--broker-id", "0",
                 "--num-partitions", "1", "--set", "log_flush_interval=100000000"]
        with served_broker(serve, root / "broker.port") as (proc, port):
            end = produce(port, args.messages, args.payload_bytes)
            report(args, port, end, proc.pid)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(args, port: int, end: int, broker_pid: int) -> None:  # type: ignore[no-untyped-def]
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # interleaved rounds, best of each: the machine is shared
        broker_cpu = cpu_s(broker_pid)
        for name, value in stages(port, end, args.fetch_bytes).items():
            best[f"stage {name}"] = min(best.get(f"stage {name}", float("inf")), value)
        best["broker cpu"] = min(best.get("broker cpu", float("inf")), cpu_s(broker_pid) - broker_cpu)
        first_s, task_s, rows = task(port, end, args.fetch_bytes)
        best["task first batch"] = min(best.get("task first batch", float("inf")), first_s)
        best["task total"] = min(best.get("task total", float("inf")), task_s)
        assert rows == args.messages
    rows = args.messages
    print(f"{rows:,} messages of {args.payload_bytes} B, fetch {args.fetch_bytes:,} B, "
          f"{int(best['stage batches'])} batches; best of {args.rounds} rounds")
    print(f"{'stage':<36}{'seconds':>9}{'ns/row':>9}")
    for label, key in [("fetch (FETCH round trips)", "stage fetch"), ("  of which broker CPU", "broker cpu"), ("decode (decode_set, Arrow gather)", "stage decode"),
                       ("arrow (RecordBatchBuilder)", "stage arrow"),
                       ("hop (Arrow IPC write, no socket)", "stage hop"),
                       ("task: read_partition, prefetching", "task total"),
                       ("task: until its first batch", "task first batch")]:
        print(f"{label:<36}{best[key]:>9.3f}{best[key] / rows * 1e9:>9.0f}")
    serial = sum(best[f"stage {k}"] for k in ("fetch", "decode", "arrow"))
    print(f"serial fetch+decode+arrow {serial:.3f} s; prefetching task {best['task total']:.3f} s")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        task(port, end, args.fetch_bytes)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
        print(out.getvalue())


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
