"""Compaction: cleaner throughput, bytes reclaimed, and fetch rate of a compacted log.

    python bench/compaction_bench.py [--keys K] [--updates U] [--value-bytes B] [--dir DIR]

A log of K keys updated U times each (keyed messages, every round touching every
key in a shuffled order) is written to the real file system, rolled, and cleaned
once in this thread, unthrottled.  Printed:

* cleaner: MB/s of log bytes cleaned (the pass's input over its wall time), and
  the bytes read and written;
* reclaimed: disk blocks (``st_blocks``) before and after, and the live data;
* fetch: a 0.7 consumer's read of the whole log from offset 0 (300 KB fetches
  through ``Log.read``, parsed and CRC-checked), on the plain log and on the
  compacted one: MB/s of offsets covered and messages/s delivered.

The machine is shared; run it a few times and read the spread, not one figure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

from trikafka.log import Log, LogConfig, OsFileSystem, wall_clock_ms
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.wire import iter_messages, parse_entries
from trikafka.wire.keyed import encode_keyed_entry

FETCH_BYTES = 300 * 1024


def build(directory: str, keys: int, updates: int, value_bytes: int) -> tuple[Log, int, int]:
    os.makedirs(directory)
    log = Log.open(OsFileSystem(), directory, "bench", 0, LogConfig(segment_bytes=64 << 20,
                                                                      flush_interval_messages=10**9),
                   wall_clock_ms, False)
    rng = random.Random(7)
    live: dict[int, int] = {}
    for update in range(updates):
        order = list(range(keys))
        rng.shuffle(order)
        batch = [encode_keyed_entry(b"key-%08d" % k, rng.randbytes(value_bytes)) for k in order]
        for k, entry in zip(order, batch):
            live[k] = len(entry)
        log.append(b"".join(batch))
    log.flush()
    log.roll()
    return log, log.visible_end, sum(live.values())


def disk_bytes(log: Log) -> int:
    return sum(os.stat(s.path).st_blocks * 512 for s in log.segments.segments)


def fetch_all(log: Log) -> tuple[float, int]:
    started = time.perf_counter()
    offset, messages = 0, 0
    while offset < log.visible_end:
        data = log.read(offset, FETCH_BYTES).read()
        valid = parse_entries(data, offset).valid_bytes
        messages += sum(1 for _ in iter_messages(data[:valid], offset))
        offset += valid
    return time.perf_counter() - started, messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="compaction-bench-", dir=args.dir)
    try:
        log, total, live = build(os.path.join(root, "bench-0"), args.keys, args.updates, args.value_bytes)
        mb = total / 1e6
        plain_s, plain_messages = fetch_all(log)
        before = disk_bytes(log)
        cleaner = LogCleaner(OsFileSystem(), wall_clock_ms)
        started = time.perf_counter()
        result = cleaner.clean(log, CompactionPolicy(compact=True, delete=False))
        clean_s = time.perf_counter() - started
        for segment in result.segments:
            log.install_cleaned(segment)
        after = disk_bytes(log)
        compact_s, compact_messages = fetch_all(log)
        print(f"log: {args.keys} keys x {args.updates} updates of {args.value_bytes} B values = {mb:.1f} MB, "
              f"{live / 1e6:.2f} MB live")
        print(f"cleaner: {mb / clean_s:.1f} MB/s ({clean_s:.2f} s; read {result.read_bytes / 1e6:.1f} MB, "
              f"wrote {result.written_bytes / 1e6:.2f} MB, padded {result.padded_bytes / 1e6:.1f} MB)")
        print(f"reclaimed: on disk {before / 1e6:.1f} MB -> {after / 1e6:.2f} MB "
              f"({after / live:.2f}x live data)")
        print(f"fetch from 0, plain:     {mb / plain_s:7.1f} MB/s of offsets, {plain_messages / plain_s:9.0f} msgs/s "
              f"({plain_messages} messages)")
        print(f"fetch from 0, compacted: {mb / compact_s:7.1f} MB/s of offsets, "
              f"{compact_messages / compact_s:9.0f} msgs/s ({compact_messages} messages)")
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
