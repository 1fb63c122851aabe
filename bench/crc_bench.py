"""CRC-32 throughput: trikafka's crc32 (ISA-L, the hot path) against zlib.crc32 and crcmod's CRC-32 (the test oracle).

Run: ``python bench/crc_bench.py``.  Prints ns/op and MB/s for 200-byte and
1 MB inputs; takes a few seconds.
"""

from __future__ import annotations

import os
import time
import zlib

import crcmod.predefined

from trikafka.wire.crc import crc32

CRCMOD_CRC32 = crcmod.predefined.mkCrcFun("crc-32")
TARGET_SECONDS_PER_CASE = 0.5


def measure(fn, data: bytes) -> tuple[float, float]:
    """Return (ns per call, MB/s), repeating until the case took long enough."""
    fn(data)  # warm up
    calls, elapsed = 0, 0.0
    batch = 1
    while elapsed < TARGET_SECONDS_PER_CASE:
        start = time.perf_counter()
        for _ in range(batch):
            fn(data)
        elapsed += time.perf_counter() - start
        calls += batch
        batch *= 2
    ns_per_op = elapsed / calls * 1e9
    mb_per_s = len(data) * calls / elapsed / 1e6
    return ns_per_op, mb_per_s


def main() -> None:
    implementations = {
        "trikafka crc32": crc32,
        "zlib.crc32": zlib.crc32,
        "crcmod crc-32": CRCMOD_CRC32,
    }
    print(f"{'input':>8}  {'implementation':<14}  {'ns/op':>12}  {'MB/s':>9}")
    for label, size in (("200 B", 200), ("1 MB", 1_000_000)):
        data = os.urandom(size)
        expected = zlib.crc32(data) & 0xFFFFFFFF
        for name, fn in implementations.items():
            assert fn(data) == expected, name
            ns, mbs = measure(fn, data)
            print(f"{label:>8}  {name:<14}  {ns:12.0f}  {mbs:9.1f}")


if __name__ == "__main__":
    main()
