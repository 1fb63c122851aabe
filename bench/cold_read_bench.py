"""A hot client's fetch latency while another client reads cold data, against a real broker.

    python bench/cold_read_bench.py [--cold-mb 2048] [--rounds 2] [--dir DIR]

A log directory is prepared offline: topic ``cold`` holds ``--cold-mb`` MB,
topic ``hot`` 64 KB, both flushed, with a clean-shutdown marker.  For each
variant a ``trikafka serve --standalone`` starts on it, the cold segment is
evicted from the page cache (``posix_fadvise(DONTNEED)``), and two clients
run at once: the cold one (its own process, so its work never delays the
other's timing) fetches the whole ``cold`` topic 1 MB at a time, the hot one
fetches the same 64 KB of ``hot`` back to back until the cold one is done.  Printed: the hot client's fetch latency (p50, p99, max) and the cold
client's read rate, for

* ``sendfile always``: the broker as it was, sendfile on the loop even for
  bytes not in the page cache (the residency check patched to "hot");
* ``cold off-loop``: the broker as it is, cold regions read in worker threads;

and a ``hot alone`` run (no cold reader) for the floor.  Each variant runs
``--rounds`` times, alternating; latencies are pooled and cold rates summed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from served_broker import served_broker
from trikafka.client.connection import connect
from trikafka.log import LogConfig, LogManager, OsFileSystem, wall_clock_ms
from trikafka.wire.messageset import build_message_set

FETCH_BYTES = 1 << 20
HOT_BYTES = 64 << 10
ALWAYS_SENDFILE = [
    "-c",
    "import sys; import trikafka.broker.sendfile as s; "
    "s.page_cache_resident = lambda fd, position, length: True; "
    "from trikafka.cli import main; sys.exit(main())",
]


def prepare(log_dir: str, cold_mb: int) -> str:
    """Write the two topics offline; returns the cold segment's path."""
    config = LogConfig(flush_interval_messages=10**9, flush_interval_ms=10**9, segment_bytes=(cold_mb + 1) << 20)
    manager = LogManager(log_dir, config, OsFileSystem(), wall_clock_ms)
    manager.open()
    chunk = build_message_set([os.urandom(100_000)] * 10, magic=0)
    cold = manager.get_or_create("cold", 0)
    while cold.end_offset < cold_mb << 20:
        cold.append(chunk)
    hot = manager.get_or_create("hot", 0)
    while hot.end_offset < HOT_BYTES:
        hot.append(build_message_set([os.urandom(1000)] * 10, magic=0))
    path = cold.segments.segments[-1].path
    manager.close(clean=True)  # flushed, with the marker: the broker starts without a scan
    return path


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def hot_reader(port: int, done: trio.Event, latencies_s: list[float], min_fetches: int) -> None:
    async with await connect("127.0.0.1", port) as conn:
        while not done.is_set() or len(latencies_s) < min_fetches:
            started = time.perf_counter()
            result = await conn.fetch("hot", 0, 0, HOT_BYTES)
            latencies_s.append(time.perf_counter() - started)
            assert result.error == 0 and len(result.data) == HOT_BYTES, result.error


def whole_entries(data: bytes) -> int:
    """Bytes of the whole entries at the start of ``data`` (lengths only: the broker's CRCs are not timed here)."""
    pos = 0
    while pos + 4 <= len(data):
        end = pos + 4 + int.from_bytes(data[pos:pos + 4], "big")
        if end > len(data):
            break
        pos = end
    return pos


async def cold_reader(port: int) -> None:
    """The cold client (run as ``--cold-reader PORT`` in its own process): prints bytes and seconds."""
    offset = 0
    started = time.perf_counter()
    async with await connect("127.0.0.1", port) as conn:
        while True:
            result = await conn.fetch("cold", 0, offset, FETCH_BYTES)
            assert result.error == 0, result.error
            valid = whole_entries(result.data)
            if valid == 0:
                break
            offset += valid
    print(json.dumps([offset, time.perf_counter() - started]))


async def run_clients(port: int, with_cold: bool) -> tuple[list[float], tuple[int, float] | None]:
    latencies_s: list[float] = []
    done = trio.Event()
    cold: list[tuple[int, float]] = []

    async def cold_process() -> None:
        finished = await trio.run_process([sys.executable, __file__, "--cold-reader", str(port)],
                                          capture_stdout=True)
        cold.append(tuple(json.loads(finished.stdout)))
        done.set()

    async with trio.open_nursery() as nursery:
        # Alone: 2,000 fetches; next to the cold reader: only those made while it reads.
        nursery.start_soon(hot_reader, port, done, latencies_s, 0 if with_cold else 2000)
        if with_cold:
            nursery.start_soon(cold_process)
        else:
            done.set()
    return latencies_s, cold[0] if cold else None


def report(label: str, latencies_s: list[float], cold: tuple[int, float] | None) -> None:
    ms = sorted(x * 1000 for x in latencies_s)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    cold_text = f"{cold[0] / cold[1] / 1e6:8.1f} MB/s in {cold[1]:6.2f} s" if cold else f"{'-':>24}"
    print(f"  {label:16} {len(ms):>8,} {statistics.median(ms):>8.2f} {p99:>8.2f} {ms[-1]:>8.2f}   {cold_text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cold-mb", type=int, default=2048)
    parser.add_argument("--dir", help="where to write (default: a temp dir; must be on a real disk)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant (alternating)")
    parser.add_argument("--cold-reader", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_reader:
        trio.run(cold_reader, args.cold_reader)
        return
    root = tempfile.mkdtemp(prefix="trikafka-cold-bench-", dir=args.dir)
    try:
        log_dir = os.path.join(root, "logs")
        cold_path = prepare(log_dir, args.cold_mb)
        size = os.path.getsize(cold_path)
        print(f"hot client: {HOT_BYTES >> 10} KB fetches; cold client: {size / (1 << 20):,.0f} MB evicted, "
              f"{FETCH_BYTES >> 20} MB fetches")
        print(f"  {'broker':16} {'fetches':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   cold read")
        variants = {"hot alone": (None, False), "sendfile always": (ALWAYS_SENDFILE, True),
                    "cold off-loop": (None, True)}
        results: dict[str, tuple[list[float], list[tuple[int, float]]]] = {v: ([], []) for v in variants}
        for _ in range(args.rounds):  # the variants alternate, so a busy spell of the machine hits both
            for label, (launcher, with_cold) in variants.items():
                evict(cold_path)
                Path(log_dir, ".kafka_cleanshutdown").touch()
                with served_broker(["--standalone", "--log-dir", log_dir], Path(root, "ready"),
                                   launcher=launcher) as (_proc, port):
                    latencies_s, cold = trio.run(run_clients, port, with_cold)
                results[label][0].extend(latencies_s)
                if cold:
                    results[label][1].append(cold)
        for label, (latencies_s, colds) in results.items():
            total = (sum(c[0] for c in colds), sum(c[1] for c in colds)) if colds else None
            report(label, latencies_s, total)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
