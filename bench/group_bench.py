"""Consumer-group throughput and rebalance latency.

Starts a private ZooKeeper and one ``trikafka serve`` with 8 partitions,
produces ``--messages`` messages of ``--payload-bytes`` bytes spread over the
partitions, then measures:

* **throughput**: 1, 2 and 4 ``trikafka consume TOPIC --group G`` processes
  (each run a fresh group, stdout to /dev/null), from launch until the group's
  committed offsets reach every partition's end.  The figure includes process
  start, joining and the first rebalance, and the last autocommit (every
  100 ms);
* **join / leave**: in one Trio process, group consumers on their own ZooKeeper
  sessions; with 3 members settled, a 4th joins (and later leaves); the time
  until the owner nodes in ZooKeeper equal ``assign()`` of the new membership
  and every member's ``owned`` agrees.  Repeated ``--rounds`` times, once with
  an *idle* group (started at the log end) and once with a group *draining*
  the whole backlog meanwhile (all members share this process's event loop,
  so this shows rebalancing under CPU load on this machine).

Run: ``python bench/group_bench.py`` (1M x 200 B; about a minute) or
``python bench/group_bench.py --messages 200000`` for a quick look.
Figures are msgs/s and MB/s of payload (1 MB = 10^6 bytes).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import trio

from served_broker import served_broker
from trikafka.client import connect, latest_offset
from trikafka.group import GroupConfig, GroupConsumer
from trikafka.group.assign import assign_group, partition_owners
from trikafka.group.registry import decode_offset, decode_owner, decode_topic_count
from trikafka.wire import ErrorCode, build_message_set
from trikafka.zk import KazooZooKeeperClient, NoNodeError, ZooKeeperProcess

TOPIC = "bench"
PARTITIONS = 8
BROKER_ID = 0
PRODUCE_BATCH = 200
COMMIT_INTERVAL_MS = 100
POLL_S = 0.01


@contextmanager
def broker_process(root: Path, zk_connect: str):
    args = ["--zookeeper", zk_connect, "--broker-id", str(BROKER_ID), "--num-partitions", str(PARTITIONS),
            "--log-dir", str(root / "logs")]
    with served_broker(args, root / "broker.port", log_level="WARNING") as (_proc, port):
        yield port


async def produce(port: int, messages: int, payload_bytes: int) -> dict[int, int]:
    """``messages`` spread round-robin over the partitions; returns each partition's end."""
    rng = random.Random(7)
    payloads = [rng.randbytes(payload_bytes) for _ in range(PRODUCE_BATCH)]
    message_set = build_message_set(payloads, magic=1)
    async with await connect("127.0.0.1", port) as conn:
        for batch in range(messages // PRODUCE_BATCH):
            await conn.produce(TOPIC, batch % PARTITIONS, message_set)
        # One flushed (acks -1) message per partition: everything before it is visible then.
        results = await conn.produce_acked([(TOPIC, p, build_message_set([b"x"], magic=1))
                                            for p in range(PARTITIONS)], acks=-1)
        assert all(r.error == ErrorCode.NO_ERROR for r in results), results
        return {p: await latest_offset(conn, TOPIC, p) for p in range(PARTITIONS)}


async def committed_total(zk: KazooZooKeeperClient, group: str) -> int:
    base = f"/consumers/{group}/offsets/{TOPIC}"
    try:
        names = await zk.children(base)
    except NoNodeError:
        return 0
    total = 0
    for name in names:
        data, _stat = await zk.get(f"{base}/{name}")
        total += decode_offset(data) or 0
    return total


async def throughput(zk_connect: str, members: int, ends: dict[int, int]) -> float:
    """Seconds for ``members`` CLI consumers to consume and commit everything."""
    group = f"throughput-{members}"
    target = sum(ends.values())
    cmd = [sys.executable, "-m", "trikafka", "--log-level", "WARNING", "consume", TOPIC, "--group", group,
           "--zookeeper", zk_connect, "--no-flush", "--commit-interval-ms", str(COMMIT_INTERVAL_MS)]
    async with KazooZooKeeperClient(zk_connect) as zk:
        start = time.perf_counter()
        procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL) for _ in range(members)]
        try:
            while await committed_total(zk, group) < target:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a consumer process ended early")
                await trio.sleep(POLL_S)
            return time.perf_counter() - start
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(30)


async def settled(admin: KazooZooKeeperClient, group: str, members: list[GroupConsumer]) -> bool:
    """Owner nodes == assign() of the registered members, and every member settled."""
    ids = f"/consumers/{group}/ids"
    counts = {}
    for member in await admin.children(ids):
        try:
            counts[member] = decode_topic_count((await admin.get(f"{ids}/{member}"))[0])
        except NoNodeError:
            return False  # leaving right now
    if set(counts) != {m.consumer_id for m in members}:
        return False
    registered = {}
    for broker in await admin.children(f"/brokers/topics/{TOPIC}"):
        registered[int(broker)] = int((await admin.get(f"/brokers/topics/{TOPIC}/{broker}"))[0])
    expected = partition_owners(assign_group(counts, {TOPIC: registered}))
    owners_path = f"/consumers/{group}/owners/{TOPIC}"
    try:
        names = await admin.children(owners_path)
    except NoNodeError:
        names = []
    owners = {}
    for name in names:
        try:
            owners[name] = decode_owner((await admin.get(f"{owners_path}/{name}"))[0])
        except NoNodeError:
            return False
    if owners != expected.get(TOPIC, {}):
        return False
    return all(m.owned == {(TOPIC, p) for p, t in owners.items() if t.rsplit("-", 1)[0] == m.consumer_id}
               for m in members)


async def wait_settled(admin: KazooZooKeeperClient, group: str, members: list[GroupConsumer]) -> float:
    start = time.perf_counter()
    with trio.fail_after(60):
        while not await settled(admin, group, members):
            await trio.sleep(POLL_S)
    return time.perf_counter() - start


async def join_leave(zk_connect: str, rounds: int, config: GroupConfig, label: str) -> tuple[list[float], list[float]]:
    """Join and leave latencies (seconds) of a 4th member next to 3 settled ones."""
    group = f"join-leave-{label}"
    joins, leaves = [], []
    async with KazooZooKeeperClient(zk_connect) as admin, trio.open_nursery() as nursery:
        members: list[GroupConsumer] = []

        async def member(name: str, stop: trio.Event, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with KazooZooKeeperClient(zk_connect) as zk:
                async with GroupConsumer(zk, group, {TOPIC: 1}, consumer_id=name, config=config) as consumer:
                    members.append(consumer)
                    task_status.started(consumer)
                    async with trio.open_nursery() as inner:
                        inner.start_soon(drain, consumer)
                        await stop.wait()
                        inner.cancel_scope.cancel()
                    members.remove(consumer)

        async def drain(consumer: GroupConsumer) -> None:
            async for _message in consumer:
                pass

        stops = [trio.Event() for _ in range(3)]
        for i, stop in enumerate(stops):
            await nursery.start(member, f"m{i}", stop)
        await wait_settled(admin, group, members)
        for round_ in range(rounds):
            stop = trio.Event()
            start = time.perf_counter()
            await nursery.start(member, f"extra{round_}", stop)
            await wait_settled(admin, group, members)
            joins.append(time.perf_counter() - start)
            start = time.perf_counter()
            stop.set()
            await wait_settled(admin, group, [m for m in members if not m.consumer_id.endswith(f"extra{round_}")])
            leaves.append(time.perf_counter() - start)
        for stop in stops:
            stop.set()
    return joins, leaves


def rate_line(label: str, messages: int, payload_bytes: int, seconds: float) -> None:
    print(f"{label:<34}{seconds:>8.2f} s{messages / seconds:>12,.0f} msgs/s"
          f"{messages * payload_bytes / seconds / 1e6:>9.1f} MB/s", flush=True)


def latency_line(label: str, values: list[float]) -> None:
    ms = sorted(v * 1000 for v in values)
    print(f"{label:<34}median {statistics.median(ms):7.0f} ms   min {ms[0]:6.0f}   max {ms[-1]:6.0f}"
          f"   ({len(ms)} rounds)", flush=True)


async def run(args: argparse.Namespace, zk_connect: str, port: int) -> None:
    start = time.perf_counter()
    ends = await produce(port, args.messages, args.payload_bytes)
    messages = args.messages // PRODUCE_BATCH * PRODUCE_BATCH + PARTITIONS
    rate_line(f"produce ({PARTITIONS} partitions)", messages, args.payload_bytes, time.perf_counter() - start)
    for members in (1, 2, 4):
        seconds = await throughput(zk_connect, members, ends)
        rate_line(f"group consume, {members} member(s)", messages, args.payload_bytes, seconds)
    for label, config in (("idle", GroupConfig(autocommit_enable=False, autooffset_reset="largest")),
                          ("draining", GroupConfig(autocommit_enable=False, autooffset_reset="smallest"))):
        joins, leaves = await join_leave(zk_connect, args.rounds, config, label)
        latency_line(f"4th member joins, {label}", joins)
        latency_line(f"4th member leaves, {label}", leaves)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--payload-bytes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"group bench: {args.messages:,} x {args.payload_bytes} B over {PARTITIONS} partitions, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="trikafka-group-bench-") as tmp:
        root = Path(tmp)
        with ZooKeeperProcess(root / "zookeeper") as zookeeper:
            with broker_process(root, zookeeper.connect_string) as port:
                trio.run(run, args, zookeeper.connect_string, port)


if __name__ == "__main__":
    main()
