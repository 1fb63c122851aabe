"""Producer throughput against a real broker, next to a raw batch-50 PRODUCE rate.

Run: ``python bench/producer_bench.py [--messages 500000] [--size 200]``.

Starts ``trikafka serve --standalone`` in a subprocess (port 0, a temporary
log dir), then measures, each on a fresh topic:

* ``raw batch-50``: one ``Connection``, ``build_message_set`` of 50 messages
  per PRODUCE: the floor the producer is compared with;
* the async ``Producer`` (``acks=0``, ``batch_size=200``), one ``send`` per
  message, with no compression, gzip (level 6, the default, and level 1) and snappy;
* the async ``Producer`` with ``acks=1`` and ``acks=-1``.

Each timing ends with an OFFSETS round trip on the connection that carried
the data, so the broker has taken every byte when the clock stops.  Prints
msgs/s and MB/s of payload, and the producer's rate as a share of the raw one.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from served_broker import served_broker  # noqa: E402
from trikafka.client import connect  # noqa: E402
from trikafka.producer import Producer  # noqa: E402
from trikafka.wire import build_message_set  # noqa: E402

RAW_BATCH = 50


def make_payloads(count: int, size: int, seed: int = 7) -> list[bytes]:
    """Log-line-like payloads (partly repetitive, so compression has something to do)."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
             for _ in range(500)]
    distinct = []
    for i in range(1000):
        line = b"%d GET /page/%d user=%d " % (i, rng.randint(0, 9999), rng.randint(0, 99999))
        while len(line) < size:
            line += rng.choice(words) + b" "
        distinct.append(line[:size])
    return [distinct[i % len(distinct)] for i in range(count)]


async def raw_batch(port: int, topic: str, payloads: list[bytes]) -> float:
    async with await connect("127.0.0.1", port) as conn:
        start = time.perf_counter()
        for i in range(0, len(payloads), RAW_BATCH):
            await conn.produce(topic, 0, build_message_set(payloads[i:i + RAW_BATCH]))
        await conn.offsets(topic, 0, -1, 1)
        return time.perf_counter() - start


async def producer_run(port: int, topic: str, payloads: list[bytes], **settings) -> float:
    async with Producer(brokers=[(0, "127.0.0.1", port)], partitions_per_broker=1,
                        producer_type="async", **settings) as producer:
        start = time.perf_counter()
        send = producer.send
        for payload in payloads:
            await send(topic, payload)
        await producer.flush()
        conn = await producer.pool.get(0)
        await conn.offsets(topic, 0, -1, 1)
        elapsed = time.perf_counter() - start
    if producer.messages_failed:
        raise RuntimeError(f"{producer.messages_failed} messages failed")
    return elapsed


def report(label: str, count: int, size: int, elapsed_s: float, raw_rate: float | None) -> float:
    rate = count / elapsed_s
    share = f"{rate / raw_rate:6.0%}" if raw_rate else "     -"
    print(f"{label:<34} {count:>9} {rate:>12,.0f} {rate * size / 1e6:>8.1f} {share}")
    return rate


async def run_all(port: int, count: int, size: int, acked_count: int) -> None:
    payloads = make_payloads(count, size)
    print(f"{'case':<34} {'messages':>9} {'msgs/s':>12} {'MB/s':>8} {'vs raw':>6}")
    raw_rate = report(f"raw PRODUCE, batch {RAW_BATCH}", count, size,
                      await raw_batch(port, "bench-raw", payloads), None)
    for codec, settings in (("none", {}), ("gzip", {}), ("gzip-1", {"gzip_level": 1}), ("snappy", {})):
        elapsed = await producer_run(port, f"bench-async-{codec}", payloads,
                                     compression_codec=codec.split("-")[0], **settings)
        report(f"Producer async acks=0 {codec}", count, size, elapsed, raw_rate)
    for acks in (1, -1):
        elapsed = await producer_run(port, f"bench-acks{acks}", payloads[:acked_count], acks=acks)
        report(f"Producer async acks={acks} none", acked_count, size, elapsed, raw_rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=200, help="payload bytes")
    parser.add_argument("--acked-messages", type=int, default=100_000, help="messages for the acks 1/-1 cases")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trikafka-producer-bench-") as tmp:
        serve_args = ["--standalone", "--log-dir", os.path.join(tmp, "data")]
        with served_broker(serve_args, Path(tmp) / "ready") as (_proc, port):
            trio.run(run_all, port, args.messages, args.size, args.acked_messages)


if __name__ == "__main__":
    main()
