"""Produce -> long-poll consume latency, and the idle CPU of a broker with many logs.

Run: ``python bench/latency_bench.py [--rate 2000] [--seconds 10] [--flush-interval-ms 10]
[--idle-logs 1000 10000] [--idle-seconds 10]``.

Latency: ``trikafka serve --standalone`` in a subprocess with
``log.default.flush.scheduler.interval.ms`` (and so the flush interval) set to
``--flush-interval-ms``.  One connection sends ``--rate`` single-message
PRODUCE requests per second, each payload carrying its send time; another
long-polls with FETCH_WAIT and takes the latency of every message on arrival
(both in this process, one monotonic clock).  The first second is warm-up.
Prints p50, p99 and max.  A message can only be consumed once flushed, so the
floor is the flush interval's share plus one fsync.

Idle CPU: a log dir with N empty partitions is made directly on disk, a
broker loads it (same flush interval), and the broker's process CPU time
(user + system, from /proc) over ``--idle-seconds`` is printed as a share of
one core.  Nothing is sent: whatever it burns is periodic work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from served_broker import served_broker  # noqa: E402
from trikafka.client import connect  # noqa: E402
from trikafka.log.names import partition_dir_name, segment_file_name  # noqa: E402
from trikafka.wire import build_message_set, iter_messages  # noqa: E402

TOPIC = "latency"
STAMP = struct.Struct(">q")
WARMUP_S = 1.0
POLL_MAX_WAIT_MS = 1000


def flush_settings(flush_interval_ms: int) -> list[str]:
    return ["--set", f"log.default.flush.scheduler.interval.ms={flush_interval_ms}"]


async def measure_latency(port: int, rate: int, seconds: float) -> list[float]:
    """Latencies in ms of the messages sent after the warm-up."""
    latencies: list[float] = []
    count = int(rate * seconds)
    async with await connect("127.0.0.1", port) as producer, await connect("127.0.0.1", port) as consumer:
        await producer.produce(TOPIC, 0, build_message_set([STAMP.pack(0)]))  # creates the log
        offset = (await consumer.offsets(TOPIC, 0, -1, 1))[0]
        received = 0

        async def consume() -> None:
            nonlocal offset, received
            while received < count:
                [result] = await consumer.fetch_wait([(TOPIC, 0, offset, 1 << 20)], POLL_MAX_WAIT_MS)
                now_ns = time.monotonic_ns()
                for message in iter_messages(result.data, offset):
                    (sent_ns,) = STAMP.unpack(message.payload)
                    if sent_ns:
                        latencies.append((now_ns - sent_ns) / 1e6)
                        received += 1
                    offset = message.next_offset

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            start = trio.current_time()
            for i in range(count):
                await trio.sleep_until(start + i / rate)
                await producer.produce(TOPIC, 0, build_message_set([STAMP.pack(time.monotonic_ns())]))
    return latencies[int(rate * WARMUP_S):]


def percentile(sorted_values: list[float], share: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(share * len(sorted_values)))]


def make_idle_logs(log_dir: Path, count: int) -> None:
    """``count`` topics with one empty partition each, written straight to disk."""
    log_dir.mkdir(parents=True)
    for i in range(count):
        path = log_dir / partition_dir_name(f"idle{i}", 0)
        path.mkdir()
        (path / segment_file_name(0)).touch()


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def idle_cpu_share(root: Path, count: int, flush_interval_ms: int, seconds: float) -> float:
    log_dir = root / f"idle-{count}"
    make_idle_logs(log_dir, count)
    with served_broker(["--standalone", "--log-dir", str(log_dir), *flush_settings(flush_interval_ms)],
                       root / f"idle-{count}.port", start_timeout_s=600.0) as (proc, _port):
        time.sleep(2.0)  # past the start-up work
        before_s, started = process_cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds)
        return (process_cpu_s(proc.pid) - before_s) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    parser.add_argument("--flush-interval-ms", type=int, default=10)
    parser.add_argument("--idle-logs", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--json", metavar="FILE", help="also write the figures here (for bench/charts.py)")
    args = parser.parse_args()
    result: dict = {"bench": "latency_bench", "rate": args.rate, "flush_interval_ms": args.flush_interval_ms,
                    "idle_seconds": args.idle_seconds, "idle": []}
    with tempfile.TemporaryDirectory(prefix="trikafka-latency-") as tmp:
        root = Path(tmp)
        with served_broker(["--standalone", "--log-dir", str(root / "data"), *flush_settings(args.flush_interval_ms)],
                           root / "latency.port") as (_proc, port):
            latencies = sorted(trio.run(measure_latency, port, args.rate, args.seconds))
        print(f"produce -> long-poll consume, {args.rate} msg/s, flush interval {args.flush_interval_ms} ms, "
              f"{len(latencies)} messages:")
        print(f"  p50 {statistics.median(latencies):.1f} ms   p99 {percentile(latencies, 0.99):.1f} ms   "
              f"max {latencies[-1]:.1f} ms")
        result["latency_ms"] = {"p50": statistics.median(latencies), "p90": percentile(latencies, 0.90),
                                "p99": percentile(latencies, 0.99), "p99.9": percentile(latencies, 0.999),
                                "max": latencies[-1], "messages": len(latencies)}
        for count in args.idle_logs:
            share = idle_cpu_share(root, count, args.flush_interval_ms, args.idle_seconds)
            print(f"idle broker, {count} logs, flush interval {args.flush_interval_ms} ms: "
                  f"{share * 100:.2f}% of a core over {args.idle_seconds:.0f} s")
            result["idle"].append({"logs": count, "core_share": share})
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
