"""Produce and consume throughput as one topic's log grows (1, 10, 20 GB by default).

Run: ``python bench/log_size_bench.py [--sizes-gb 1,10,20] [--window-mb 200] [--json FILE]``.

Starts ``trikafka serve --standalone`` on a temp log dir (``--dir`` picks where)
and, for each size in turn, fills the topic ``grow`` up to that size with
pipelined 0.7 PRODUCE requests of large batches, then measures:

Each figure is the median of ``--repeats`` windows (all kept in the JSON).

- produce: a ``--window-mb`` window of 200-byte magic-0 messages, batches of
  ``--batch``, timed until a PRODUCE_ACKED with acks = -1 sent after them is
  answered (every message appended and flushed);
- consume (tail): the same window read back from the end of the log, ~1 MB
  fetches, framing and CRC of every message checked: recent data, as a
  consumer keeping up reads it;
- consume (start): a window from offset 0, the oldest data: cold if the page
  cache no longer holds it (the machine's RAM decides).

The goal of the design is that throughput does not depend on the log size:
the last lines compare the largest size's figures with the first's.  Stops early, and
says so, if the disk would fall under ``--keep-free-gb``.  The data is deleted
at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import trio

from paper import PAYLOAD_BYTES, produce
from served_broker import served_broker
from trikafka.client import connect
from trikafka.wire.messageset import scan_valid_prefix

TOPIC = "grow"
MESSAGE_BYTES = PAYLOAD_BYTES + 9  # magic 0: 4 length + 1 magic + 4 CRC
FILL_CHUNK_MB = 512


async def end_offset(port: int) -> int:
    async with await connect("127.0.0.1", port) as conn:
        return (await conn.offsets(TOPIC, 0, -1, 1))[0]


async def consume(port: int, start: int, window_bytes: int, fetch_bytes: int) -> float:
    """Read ``window_bytes`` of messages from byte offset ``start``; seconds taken."""
    async with await connect("127.0.0.1", port) as conn:
        started = time.perf_counter()
        offset = start
        while offset - start < window_bytes:
            result = await conn.fetch(TOPIC, 0, offset, fetch_bytes)
            valid = scan_valid_prefix(result.data)  # framing + CRC of each message
            if valid == 0:
                raise RuntimeError(f"fetch at {offset} returned no whole message")
            offset += valid
        return time.perf_counter() - started


def log_bytes(log_dir: Path) -> int:
    return sum(f.stat().st_size for f in log_dir.glob(f"{TOPIC}-0/*.kafka"))


def write_json(path: str | None, sizes: list[float], rows: list[dict], note: str) -> None:
    if path:
        Path(path).write_text(json.dumps({"bench": "log_size_bench", "sizes_gb": sizes, "rows": rows,
                                          "note": note}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-gb", default="1,10,20", help="log sizes to measure at, comma-separated")
    parser.add_argument("--window-mb", type=int, default=200, help="bytes produced and consumed per figure")
    parser.add_argument("--batch", type=int, default=200, help="messages per PRODUCE request")
    parser.add_argument("--repeats", type=int, default=1, help="windows per size; the table shows the median")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--keep-free-gb", type=float, default=5.0, help="stop before the disk has less free")
    parser.add_argument("--dir", help="where to write (default: a temp dir)")
    parser.add_argument("--json", metavar="FILE", help="also write the table here (for bench/charts.py)")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes_gb.split(",")]
    window_msgs = args.window_mb * (1 << 20) // MESSAGE_BYTES // args.batch * args.batch
    window_bytes = window_msgs * MESSAGE_BYTES
    root = Path(tempfile.mkdtemp(prefix="trikafka-log-size-", dir=args.dir))
    rows: list[dict] = []
    note = ""
    try:
        log_dir = root / "logs"
        with served_broker(["--standalone", "--log-dir", str(log_dir)], root / "ready") as (_proc, port):
            print(f"{window_msgs:,} messages of {PAYLOAD_BYTES} B per window ({window_bytes / 1e6:.0f} MB), "
                  f"batches of {args.batch}")
            print(f"  {'log GB':>7} | {'produce msgs/s':>14} {'MB/s':>7} | {'tail msgs/s':>12} {'MB/s':>7} | "
                  f"{'start msgs/s':>12} {'MB/s':>7} | fill s")
            for size_gb in sizes:
                target = int(size_gb * (1 << 30))
                fill_s = 0.0
                while (have := log_bytes(log_dir)) < target - window_bytes:
                    free = shutil.disk_usage(root).free
                    chunk = min(FILL_CHUNK_MB << 20, target - window_bytes - have)
                    if free - chunk < args.keep_free_gb * (1 << 30):
                        note = f"stopped at {have / (1 << 30):.1f} GB: disk would fall under {args.keep_free_gb} GB free"
                        break
                    fill_s += trio.run(produce, port, TOPIC, max(args.batch, chunk // MESSAGE_BYTES), args.batch)
                if note:
                    break
                runs: dict[str, list[float]] = {"produce": [], "tail": [], "start": []}
                for _ in range(args.repeats):  # the median of a few windows damps a shared machine's noise
                    runs["produce"].append(trio.run(produce, port, TOPIC, window_msgs, args.batch))
                    end = trio.run(end_offset, port)
                    runs["tail"].append(trio.run(consume, port, end - window_bytes, window_bytes, args.fetch_bytes))
                    runs["start"].append(trio.run(consume, port, 0, window_bytes, args.fetch_bytes))
                produce_s, tail_s, start_s = (statistics.median(runs[k]) for k in ("produce", "tail", "start"))
                row = {"log_gb": log_bytes(log_dir) / (1 << 30), "window_messages": window_msgs,
                       "window_bytes": window_bytes, "fill_s": fill_s,
                       "produce_msgs_s": window_msgs / produce_s, "produce_mb_s": window_bytes / produce_s / 1e6,
                       "consume_tail_msgs_s": window_msgs / tail_s, "consume_tail_mb_s": window_bytes / tail_s / 1e6,
                       "consume_start_msgs_s": window_msgs / start_s,
                       "consume_start_mb_s": window_bytes / start_s / 1e6,
                       "runs_mb_s": {k: [window_bytes / v / 1e6 for v in vs] for k, vs in runs.items()}}
                rows.append(row)
                print(f"  {row['log_gb']:>7.1f} | {row['produce_msgs_s']:>14,.0f} {row['produce_mb_s']:>7.1f} | "
                      f"{row['consume_tail_msgs_s']:>12,.0f} {row['consume_tail_mb_s']:>7.1f} | "
                      f"{row['consume_start_msgs_s']:>12,.0f} {row['consume_start_mb_s']:>7.1f} | {fill_s:.0f}",
                      flush=True)
                write_json(args.json, sizes, rows, "run under way")  # a cut-short run keeps what it measured
        if note:
            print(f"  {note}")
        if len(rows) > 1:
            first, last = rows[0], rows[-1]
            for key in ("produce_msgs_s", "consume_tail_msgs_s"):
                change = last[key] / first[key] - 1
                print(f"  {key}: {change:+.0%} from {first['log_gb']:.1f} to {last['log_gb']:.1f} GB "
                      f"(goal: within 10%: {'met' if abs(change) <= 0.10 else 'NOT met'})")
        write_json(args.json, sizes, rows, note)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
