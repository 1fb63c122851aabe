"""Log engine throughput: append, read and crash recovery, in-process, on the real file system.

    python bench/log_bench.py [--messages N] [--recovery-mb M] [--dir DIR]

* append: 200-byte magic-0 messages in pre-built sets of 50 (the paper's batch),
  each set validated (framing, CRC, size) and written, as the broker does;
  reported cold (fresh page-cache pages) and warm (the same pages reused);
* read: every visible byte read back through ``Log.read`` regions (pread);
* recovery: a newest segment of M MB (default 1024) without the clean-shutdown
  marker, CRC-scanned by ``LogManager.open``.

Figures are msgs/s and MB/s of message bytes on the wire format.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from trikafka.log import LogConfig, LogManager, OsFileSystem, wall_clock_ms
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


def recovery_run(root: str, megabytes: int) -> tuple[float, int]:
    message_set = build_message_set([b"r" * PAYLOAD_BYTES] * BATCH_MESSAGES, magic=0)
    chunk = message_set * max(1, (4 << 20) // len(message_set))
    target = megabytes << 20
    directory = os.path.join(root, "recover-0")
    os.makedirs(directory)
    with open(os.path.join(directory, "%020d.kafka" % 0), "wb") as f:
        written = 0
        while written < target:
            f.write(chunk)
            written += len(chunk)
        f.write(b"\x00\x00\x01\x00torn")  # a torn tail for recovery to cut
        f.flush()
        os.fsync(f.fileno())
    manager = LogManager(root, LogConfig(), OsFileSystem(), wall_clock_ms)
    started = time.perf_counter()
    manager.open()  # no clean-shutdown marker: the newest segment is scanned
    elapsed = time.perf_counter() - started
    assert manager.recovered
    end = manager.get("recover", 0).end_offset
    assert end == written, (end, written)
    manager.close(clean=True)
    return elapsed, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--recovery-mb", type=int, default=1024)
    parser.add_argument("--dir", help="where to write (default: a temp dir)")
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
        elapsed, size = recovery_run(os.path.join(root, "recovery"), args.recovery_mb)
        print(f"recovery:   {size / (1 << 20):,.0f} MB newest segment scanned in {elapsed:.2f} s "
              f"({size / elapsed / 1e6:,.0f} MB/s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
