"""Kafka-format logs: leader appends and the batch-index rebuild at open (docs/protocol.md §16.6).

    PYTHONPATH=. python bench/kafka_index_bench.py [--batches N] [--records R] [--value-bytes V] [--segment-mb M] [--dir DIR]

* append: ``N`` v2 batches of ``R`` records of ``V``-byte values, each appended
  as the leader appends (validated, CRC-checked, numbered by
  ``assign_offsets``) through ``Log.append`` on the real file system;
* open: the log dir reopened after a clean shutdown, so the time is the
  index rebuild alone (every segment's batch headers read in 8 MiB chunks),
  with the segments in the page cache (warm) and evicted from it
  (``posix_fadvise(DONTNEED)``, cold), best of three each;
* the index's memory: 24 bytes a batch in three ``array('q')``.

Figures are batches/s, MB/s of segment bytes and seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from tests.helpers.kafka_batches import make_batch  # the tests' batch builder: the log reads only headers
from trikafka.log import LogConfig, LogManager, OffsetAssignment, OsFileSystem, wall_clock_ms


def config(segment_bytes: int) -> LogConfig:
    return LogConfig(segment_bytes=segment_bytes, flush_interval_messages=10**9, flush_interval_ms=10**9,
                     record_format="v2")


def write_log(root: str, batch: bytes, batches: int, segment_bytes: int) -> float:
    manager = LogManager(root, config(segment_bytes), OsFileSystem(), wall_clock_ms)
    manager.open()
    log = manager.get_or_create("bench", 0)
    assign = OffsetAssignment(0)
    started = time.perf_counter()
    for _ in range(batches):
        log.append(bytearray(batch), assign=assign)
    elapsed = time.perf_counter() - started
    manager.close(clean=True)
    return elapsed


def evict(root: str) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def open_run(root: str, segment_bytes: int, cold: bool) -> tuple[float, int, int]:
    """Seconds to open the log dir (a clean restart: no recovery scan), its batches and segments."""
    if cold:
        evict(root)
    manager = LogManager(root, config(segment_bytes), OsFileSystem(), wall_clock_ms)
    started = time.perf_counter()
    manager.open()
    elapsed = time.perf_counter() - started
    log = manager.get("bench", 0)
    assert log is not None
    batches = sum(len(s.batches) for s in log.segments.segments if s.batches is not None)
    segments = len(log.segments.segments)
    manager.close(clean=True)
    return elapsed, batches, segments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=1)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--segment-mb", type=int, default=256)
    parser.add_argument("--dir", default=None, help="a directory on the disk to measure (default: a temporary one)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="kafka-index-bench-", dir=args.dir)
    try:
        batch = make_batch([b"v" * args.value_bytes] * args.records, base_timestamp_ms=wall_clock_ms())
        segment_bytes = args.segment_mb << 20
        total_mb = len(batch) * args.batches / 1e6
        print(f"{args.batches} batches of {args.records} record(s), {len(batch)} bytes each: {total_mb:.1f} MB, "
              f"{args.segment_mb} MB segments")
        elapsed = write_log(root, batch, args.batches, segment_bytes)
        print(f"append (leader, assign_offsets): {elapsed:.2f} s, {args.batches / elapsed:,.0f} batches/s, "
              f"{total_mb / elapsed:.1f} MB/s")
        for cold in (False, True):
            runs = [open_run(root, segment_bytes, cold) for _ in range(3)]
            best, batches, segments = min(runs)
            assert batches == args.batches, (batches, args.batches)
            print(f"open, index rebuild ({'cold' if cold else 'warm'} page cache, {segments} segments): "
                  f"{best:.3f} s, {batches / best:,.0f} batches/s, {total_mb / best:.1f} MB/s")
        print(f"index memory: {24 * args.batches / 1e6:.1f} MB (24 bytes a batch)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
