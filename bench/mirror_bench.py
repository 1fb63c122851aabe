"""Mirror throughput: messages per second copied from one cluster into another.

Run: ``python bench/mirror_bench.py [--messages 200000] [--payload-bytes 200]``.

Starts two clusters, each a private ZooKeeper and one ``trikafka serve``
broker (4 partitions per topic), fills two source topics through the
``Producer`` (acks 1, batches of 200): one with plain messages, one with
gzip-compressed batches (one wrapper per batch), then runs the mirror
(``run_mirror``, acks 1) on each topic and times it until the target
acknowledged every message: from the start (ZooKeeper sessions, joining the
group, creating the target topic included) and from the first acknowledged set.  The mirror passes sets through without
decompressing, so the gzip figure counts inner messages moved per second.
Prints msgs/s and MB/s (of source log bytes) per kind.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from served_broker import served_broker  # noqa: E402
from trikafka.mirror import MirrorConfig, MirrorStats, run_mirror  # noqa: E402
from trikafka.producer import Producer  # noqa: E402
from trikafka.wire import Codec  # noqa: E402
from trikafka.zk import ZooKeeperProcess  # noqa: E402

PARTITIONS = 4
BATCH = 200
POLL_S = 0.01


@contextmanager
def broker_process(root: Path, zk_connect: str):
    args = ["--zookeeper", zk_connect, "--broker-id", "1", "--num-partitions", str(PARTITIONS),
            "--log-dir", str(root / "logs")]
    with served_broker(args, root / "broker.port", log_level="WARNING"):
        yield


async def fill(zk_connect: str, topic: str, messages: int, payload_bytes: int, codec: Codec) -> None:
    rng = random.Random(11)
    # Text-like payloads (a small alphabet) so that gzip has something to do, as with real logs.
    alphabet = b"abcdefghij klmnop,:{}\"0123456789"
    payloads = [bytes(rng.choice(alphabet) for _ in range(payload_bytes)) for _ in range(BATCH)]
    async with Producer(zk_connect=zk_connect, acks=1, compression_codec=codec) as producer:
        for start in range(0, messages, BATCH):
            n = min(BATCH, messages - start)
            await producer.send_batch(topic, payloads[:n], keys=[start // BATCH] * n)


async def mirror_once(source: str, target: str, topic: str, messages: int) -> tuple[float, float, MirrorStats]:
    """(seconds from start, seconds from the first acknowledged set, stats) to copy ``messages``."""
    stats = MirrorStats()
    config = MirrorConfig([source], target, topic, group=f"bench-{topic}", consumer_id="bench")
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        await nursery.start(run_mirror, config, stats)
        while not stats.total_messages:
            await trio.sleep(POLL_S)
        first, first_count = time.perf_counter(), stats.total_messages
        while stats.total_messages < messages:
            await trio.sleep(POLL_S)
        ended = time.perf_counter()
        nursery.cancel_scope.cancel()
    stats.steady_messages = stats.total_messages - first_count  # type: ignore[attr-defined]
    return ended - started, ended - first, stats


async def run(args: argparse.Namespace, source: str, target: str) -> None:
    for kind, codec in (("plain", Codec.NONE), ("gzip", Codec.GZIP)):
        topic = f"bench-{kind}"
        await fill(source, topic, args.messages, args.payload_bytes, codec)
        elapsed, steady_s, stats = await mirror_once(source, target, topic, args.messages)
        moved = sum(stats.bytes.values())
        print(f"{kind:6s} {stats.total_messages:>9,} msgs in {elapsed:6.2f} s with start-up "
              f"({stats.total_messages / elapsed:>9,.0f} msgs/s, {moved / elapsed / 1e6:5.1f} MB/s of log); "
              f"after the first set: {stats.steady_messages / steady_s:>9,.0f} msgs/s "  # type: ignore[attr-defined]
              f"({sum(stats.batches.values())} sets)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--payload-bytes", type=int, default=200)
    args = parser.parse_args()
    print(f"mirror bench: {args.messages:,} x {args.payload_bytes} B per kind, {PARTITIONS} partitions, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="trikafka-mirror-bench-") as tmp:
        root = Path(tmp)
        with ZooKeeperProcess(root / "zk-source") as source_zk, ZooKeeperProcess(root / "zk-target") as target_zk:
            (root / "source").mkdir()
            (root / "target").mkdir()
            with broker_process(root / "source", source_zk.connect_string), \
                    broker_process(root / "target", target_zk.connect_string):
                trio.run(run, args, source_zk.connect_string, target_zk.connect_string)


if __name__ == "__main__":
    main()
