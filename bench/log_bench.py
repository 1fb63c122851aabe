"""Log engine throughput: append, read and crash recovery, on the real file system.

    python bench/log_bench.py [--messages N] [--recovery-mb M,M,...] [--no-served] [--dir DIR]

* append: 200-byte magic-0 messages in pre-built sets of 50 (the paper's batch),
  each set validated (framing, CRC, size) and written, as the broker does;
  reported cold (fresh page-cache pages) and warm (the same pages reused);
* read: every visible byte read back through ``Log.read`` regions (pread);
* recovery against segment size (default 64, 256, 1024 MB): a newest segment
  written through ``Log.append`` and flushed (so its flush wrote a recovery
  checkpoint), a torn tail added, no clean-shutdown marker; ``LogManager.open``
  timed with the checkpoint and without it (the full CRC scan of 0.7), each
  with the segment in the page cache (a process crash) and evicted from it
  (``posix_fadvise(DONTNEED)``, as after a machine crash), printed as a table;
* SIGKILL restart (largest size): a ``trikafka serve --standalone`` on that
  log dir takes one acknowledged produce, is killed with SIGKILL, and the
  restart is timed from spawn to its ready file, with and without the
  checkpoint, next to the same spawn on an empty log dir (the interpreter and
  imports, which are not recovery).

Figures are msgs/s and MB/s of message bytes on the wire format, and seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import trio

from served_broker import served_broker
from trikafka.client.connection import connect
from trikafka.log import CLEAN_SHUTDOWN_MARKER, LogConfig, LogManager, OsFileSystem, wall_clock_ms
from trikafka.log.checkpoint import CHECKPOINT_FILE_NAME
from trikafka.wire.messageset import build_message_set

PAYLOAD_BYTES = 200
BATCH_MESSAGES = 50


def append_run(root: str, message_set: bytes, sets: int) -> float:
    manager = LogManager(root, LogConfig(flush_interval_messages=10**9, flush_interval_ms=10**9),
                         OsFileSystem(), wall_clock_ms)
    manager.open()
    log = manager.get_or_create("bench", 0)
    append = log.append
    started = time.perf_counter()
    for _ in range(sets):
        append(message_set)
    elapsed = time.perf_counter() - started
    log.flush()
    manager.close(clean=True)
    return elapsed


def read_run(root: str, total_bytes: int, max_bytes: int = 1 << 20) -> float:
    manager = LogManager(root, LogConfig(), OsFileSystem(), wall_clock_ms)
    manager.open()
    log = manager.get("bench", 0)
    started = time.perf_counter()
    offset = 0
    while offset < total_bytes:
        region = log.read(offset, max_bytes)
        data = region.source.pread(region.position, region.length)
        offset += len(data)
    elapsed = time.perf_counter() - started
    manager.close(clean=True)
    return elapsed


TORN_TAIL = b"\x00\x00\x01\x00torn"  # an entry cut short by the crash, for recovery to cut


def build_newest_segment(root: str, megabytes: int) -> tuple[str, int]:
    """A log ``recover-0`` whose one segment holds ``megabytes`` MB, flushed (checkpoint written)."""
    config = LogConfig(flush_interval_messages=10**9, flush_interval_ms=10**9, segment_bytes=(megabytes + 1) << 20)
    manager = LogManager(root, config, OsFileSystem(), wall_clock_ms)
    manager.open()
    log = manager.get_or_create("recover", 0)
    message_set = build_message_set([b"r" * PAYLOAD_BYTES] * BATCH_MESSAGES, magic=0)
    chunk = message_set * max(1, (1 << 20) // len(message_set))
    while log.end_offset < megabytes << 20:
        log.append(chunk)
    log.flush()
    size = log.end_offset
    manager.close(clean=False)  # as if the process died right after the flush
    return os.path.join(root, "recover-0"), size


def crash_state(directory: str, checkpoint: bytes | None, cold: bool) -> None:
    """Torn tail on the segment, checkpoint present or not, page cache kept or dropped."""
    segment = os.path.join(directory, "%020d.kafka" % 0)
    with open(segment, "ab") as f:
        f.write(TORN_TAIL)
        f.flush()
        os.fsync(f.fileno())
        if cold:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    path = os.path.join(directory, CHECKPOINT_FILE_NAME)
    if checkpoint is None:
        if os.path.exists(path):
            os.unlink(path)
    else:
        Path(path).write_bytes(checkpoint)


def recovery_run(root: str, size: int) -> float:
    manager = LogManager(root, LogConfig(), OsFileSystem(), wall_clock_ms)
    started = time.perf_counter()
    manager.open()  # no clean-shutdown marker: the newest segment is scanned
    elapsed = time.perf_counter() - started
    assert manager.recovered
    end = manager.get("recover", 0).end_offset
    assert end == size, (end, size)
    manager.close(clean=False)
    return elapsed


def recovery_table(root: str, sizes_mb: list[int], rows: list[dict] | None = None) -> str:
    """Print the recovery table (each row also appended to ``rows``); returns the log dir of the largest size."""
    print("recovery after a crash (LogManager.open of one log, seconds):")
    print(f"  {'segment':>8} | {'full scan':>10} {'full scan':>10} | {'checkpoint':>10} {'checkpoint':>10}")
    print(f"  {'MB':>8} | {'cached':>10} {'evicted':>10} | {'cached':>10} {'evicted':>10}")
    for megabytes in sizes_mb:
        logs = os.path.join(root, f"recovery-{megabytes}")
        directory, size = build_newest_segment(logs, megabytes)
        checkpoint = Path(directory, CHECKPOINT_FILE_NAME).read_bytes()
        row = []
        for saved in (None, checkpoint):
            for cold in (False, True):
                crash_state(directory, saved, cold)
                row.append(recovery_run(logs, size))
        print(f"  {size / (1 << 20):>8,.0f} | {row[0]:>10.3f} {row[1]:>10.3f} | {row[2]:>10.3f} {row[3]:>10.3f}")
        if rows is not None:
            rows.append({"segment_mb": size / (1 << 20), "full_scan_cached_s": row[0], "full_scan_evicted_s": row[1],
                         "checkpoint_cached_s": row[2], "checkpoint_evicted_s": row[3]})
        if megabytes != sizes_mb[-1]:
            shutil.rmtree(logs)
    return logs


async def produce_one(port: int) -> None:
    async with await connect("127.0.0.1", port) as conn:
        [result] = await conn.produce_acked([("recover", 0, build_message_set([b"one more"]))])
        assert result.error == 0, result


# The newest segment must stay the newest: no roll at 1 GB (0.7's default log.file.size).
SERVE_ARGS = ["--standalone", "--set", "log.file.size=2147483647"]


def spawn_to_ready(root: str, log_dir: str, label: str) -> float:
    started = time.perf_counter()
    with served_broker([*SERVE_ARGS, "--log-dir", log_dir], Path(root, f"ready-{label}")):
        return time.perf_counter() - started


def sigkill_restart(root: str, logs: str, repeats: int) -> None:
    """Kill a serving broker with SIGKILL after a flushed produce; time the restart (median of ``repeats``)."""
    directory = os.path.join(logs, "recover-0")
    spawn_to_ready(root, os.path.join(root, "empty"), "warm-up")  # compiled modules, page cache: not timed
    times = {"empty log dir": [spawn_to_ready(root, os.path.join(root, "empty"), "empty") for _ in range(repeats)]}
    for label in ("checkpoint", "full scan"):
        times[label] = []
        for _ in range(repeats):
            Path(logs, CLEAN_SHUTDOWN_MARKER).touch()  # a clean start; the kill makes the next one recover
            with served_broker([*SERVE_ARGS, "--log-dir", logs], Path(root, "ready-first")) as (proc, port):
                trio.run(produce_one, port)  # acks=-1: flushed; the first flush after opening writes a checkpoint
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            if label == "full scan":
                os.unlink(os.path.join(directory, CHECKPOINT_FILE_NAME))
            times[label].append(spawn_to_ready(root, logs, label.replace(" ", "-")))
    segments = sorted(n for n in os.listdir(directory) if n.endswith(".kafka"))
    assert len(segments) == 1, segments
    size = os.path.getsize(os.path.join(directory, segments[0]))
    median = {label: statistics.median(values) for label, values in times.items()}
    print(f"SIGKILL restart, {size / (1 << 20):,.0f} MB newest segment "
          f"(spawn to ready file, seconds, median of {repeats}):")
    for label, values in times.items():
        print(f"  {label:>14}: {median[label]:.3f}   ({', '.join(f'{v:.3f}' for v in values)})")
    print(f"  recovery's share: {median['checkpoint'] - median['empty log dir']:+.3f} s with the checkpoint, "
          f"{median['full scan'] - median['empty log dir']:+.3f} s with the full scan")


def show_recovery_progress() -> None:
    """Print the scan's progress lines (the point of a long scan); not the per-run truncation notes."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("    log: %(message)s"))
    handler.addFilter(lambda record: record.getMessage().startswith("recovery scan of"))
    logger = logging.getLogger("trikafka.log")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--recovery-mb", default="64,256,1024",
                        help="newest-segment sizes for the recovery table, comma-separated")
    parser.add_argument("--no-served", action="store_true", help="skip the SIGKILL restart of a real broker")
    parser.add_argument("--repeats", type=int, default=3, help="restarts per SIGKILL figure")
    parser.add_argument("--dir", help="where to write (default: a temp dir)")
    parser.add_argument("--json", metavar="FILE", help="also write the recovery table here (for bench/charts.py)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="trikafka-log-bench-", dir=args.dir)
    try:
        message_set = build_message_set([b"m" * PAYLOAD_BYTES] * BATCH_MESSAGES, magic=0)
        sets = max(1, args.messages // BATCH_MESSAGES)
        messages, total = sets * BATCH_MESSAGES, sets * len(message_set)
        print(f"append: {messages:,} x {PAYLOAD_BYTES} B messages, {BATCH_MESSAGES} per set "
              f"({len(message_set)} B per set, {len(message_set) // BATCH_MESSAGES - PAYLOAD_BYTES} B overhead each)")
        for label in ("cold", "warm"):
            logs = os.path.join(root, "logs")
            elapsed = append_run(logs, message_set, sets)
            print(f"  {label:5} {messages / elapsed:>12,.0f} msgs/s {total / elapsed / 1e6:>8.1f} MB/s")
            if label == "cold":
                shutil.rmtree(logs)  # frees the pages the warm run reuses
        elapsed = read_run(os.path.join(root, "logs"), total)
        print(f"read:       {messages / elapsed:>12,.0f} msgs/s {total / elapsed / 1e6:>8.1f} MB/s")
        shutil.rmtree(os.path.join(root, "logs"))
        show_recovery_progress()
        rows: list[dict] = []
        logs = recovery_table(root, [int(m) for m in args.recovery_mb.split(",")], rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"bench": "log_bench", "recovery": rows}, indent=1) + "\n")
        if not args.no_served:
            sigkill_restart(root, logs, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
