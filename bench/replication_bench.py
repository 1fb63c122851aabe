"""What replication costs and how long a partition is unavailable when its leader goes.

Run: ``python bench/replication_bench.py [--seconds 10] [--connections 4] [--batch 10]
[--payload-bytes 100] [--zk-session-ms 6000]``.

Throughput and latency: ``--connections`` connections each send PRODUCE_ACKED
requests of ``--batch`` messages back to back for ``--seconds`` (the first
second is warm-up) to

* one ``trikafka serve --standalone`` broker, an unreplicated topic, acks 1;
* the leader of a replicated topic (RF 3, ``min.insync.replicas=2``) on three
  ``trikafka serve --zookeeper`` brokers, acks -1 (answered once every ISR
  replica has the bytes).

Prints acknowledged messages per second and the p50/p99 of request latency.

Unavailability, on the three-broker cluster while one client sends a single
acks -1 message at a time (finding the leader through METADATA after every
error):

* controlled shutdown: SIGTERM to the leader -> the first acknowledged produce
  (the broker asks the controller to move its leadership away first);
* failover: SIGKILL of the leader -> the first acknowledged produce at the new
  leader (bounded below by the ZooKeeper session timeout: the controller learns
  of the death when the broker's session expires).

The terminated broker is restarted (same port) and the cluster is healthy
again before the SIGKILL.  Figures vary with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from served_broker import served_broker  # noqa: E402
from trikafka.client import ClientError, connect  # noqa: E402
from trikafka.wire import ErrorCode, build_message_set  # noqa: E402
from trikafka.zk import KazooZooKeeperClient, ZooKeeperProcess  # noqa: E402
from trikafka.zk.replication_store import create_topic, read_state  # noqa: E402
from trikafka.zk.replication_values import PartitionState, TopicAssignment  # noqa: E402
from trikafka.zk.server_setup import free_port  # noqa: E402

TOPIC = "bench"
BROKER_IDS = (1, 2, 3)
WARMUP_S = 1.0
GIVE_UP_S = 60.0
LINK_ERRORS = (ClientError, OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


async def throughput(port: int, acks: int, args: argparse.Namespace) -> tuple[float, float, float]:
    """(messages/s, p50 ms, p99 ms) of acknowledged requests after the warm-up."""
    latencies: list[float] = []
    acked = 0
    payloads = [b"x" * args.payload_bytes] * args.batch
    data = build_message_set(payloads)
    start = time.monotonic()
    measure_from, end = start + WARMUP_S, start + WARMUP_S + args.seconds

    async def sender() -> None:
        nonlocal acked
        async with await connect("127.0.0.1", port) as conn:
            while (now := time.monotonic()) < end:
                (result,) = await conn.produce_acked([(TOPIC, 0, data)], acks=acks, timeout_ms=10_000)
                done = time.monotonic()
                if result.error == ErrorCode.NO_ERROR and now >= measure_from:
                    latencies.append((done - now) * 1000)
                    acked += len(payloads)

    async with trio.open_nursery() as nursery:
        for _ in range(args.connections):
            nursery.start_soon(sender)
    return acked / args.seconds, percentile(latencies, 0.5), percentile(latencies, 0.99)


async def leader_port(ports: dict[int, int], skip: int | None = None) -> int | None:
    """The leader's port as METADATA from some broker names it (None: none yet)."""
    for broker_id, port in ports.items():
        if broker_id == skip:
            continue
        with trio.move_on_after(1.0):
            try:
                async with await connect("127.0.0.1", port) as conn:
                    (part,) = (await conn.metadata([TOPIC])).topic(TOPIC).partitions
                if part.leader >= 0:
                    return ports[part.leader]
            except LINK_ERRORS[:-1]:
                continue
    return None


async def first_ack_after(ports: dict[int, int], gone: int, t0: float) -> float | None:
    """Seconds from ``t0`` to the first acks -1 produce acknowledged by a broker other than ``gone``
    (None: none within ``GIVE_UP_S``)."""
    with trio.move_on_after(GIVE_UP_S):
        return await _first_ack(ports, gone, t0)
    return None


async def _first_ack(ports: dict[int, int], gone: int, t0: float) -> float:
    while True:
        port = await leader_port(ports, skip=gone)
        if port is not None and port != ports[gone]:
            with trio.move_on_after(2.0):
                try:
                    async with await connect("127.0.0.1", port) as conn:
                        (result,) = await conn.produce_acked([(TOPIC, 0, build_message_set([b"probe"]))],
                                                             acks=-1, timeout_ms=1000)
                    if result.error == ErrorCode.NO_ERROR:
                        return time.monotonic() - t0
                except LINK_ERRORS[:-1]:
                    pass
        await trio.sleep(0.01)


async def wait_healthy(zk_connect: str) -> PartitionState:
    async with KazooZooKeeperClient(zk_connect) as zk:
        with trio.fail_after(120):
            while True:
                state = (await read_state(zk, TOPIC, 0)).state
                # The preferred replica leads again (it takes over once back in the ISR).
                if state.leader == BROKER_IDS[0] and sorted(state.isr) == list(BROKER_IDS):
                    return state
                await trio.sleep(0.05)


async def create_replicated(zk_connect: str) -> None:
    async with KazooZooKeeperClient(zk_connect) as zk:
        await create_topic(zk, TOPIC, TopicAssignment((BROKER_IDS,), {"min.insync.replicas": "2"}),
                           [PartitionState(1, 0, BROKER_IDS, 0)])


def seconds(value: float | None) -> str:
    return f"none within {GIVE_UP_S:.0f} s" if value is None else f"{value:.3f} s"


def cluster_broker(root: Path, zk_connect: str, broker_id: int, port: int, session_ms: int):
    return served_broker(["--broker-id", str(broker_id), "--port", str(port), "--zookeeper", zk_connect,
                          "--log-dir", str(root / f"broker-{broker_id}"),
                          "--set", f"zk.sessiontimeout.ms={session_ms}"],
                         root / f"broker-{broker_id}.port", log_level="WARNING")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument("--zk-session-ms", type=int, default=6000)
    args = parser.parse_args()
    print(f"replication bench: {args.connections} connections x {args.batch} x {args.payload_bytes} B per "
          f"request, {args.seconds:g} s; python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="trikafka-replication-bench-") as tmp:
        root = Path(tmp)
        with served_broker(["--standalone", "--log-dir", str(root / "single")], root / "single.port",
                           log_level="WARNING") as (_proc, port):
            rate, p50, p99 = trio.run(throughput, port, 1, args)
        print(f"RF 1, acks 1 (one broker):     {rate:10,.0f} msgs/s   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms",
              flush=True)
        with ZooKeeperProcess(root / "zookeeper", tick_time_ms=100) as zookeeper, contextlib.ExitStack() as stack:
            zk_connect = zookeeper.connect_string
            trio.run(create_replicated, zk_connect)
            ports = {b: free_port() for b in BROKER_IDS}
            procs = {b: stack.enter_context(cluster_broker(root, zk_connect, b, ports[b], args.zk_session_ms))[0]
                     for b in BROKER_IDS}
            state = trio.run(wait_healthy, zk_connect)
            rf3, p50_3, p99_3 = trio.run(throughput, ports[state.leader], -1, args)
            print(f"RF 3, acks -1 (three brokers): {rf3:10,.0f} msgs/s   p50 {p50_3:6.1f} ms   p99 {p99_3:6.1f} ms"
                  f"   ({rf3 / rate:.0%} of RF 1 acks 1)", flush=True)

            leader = state.leader
            t0 = time.monotonic()
            procs[leader].send_signal(signal.SIGTERM)
            unavailable_s = trio.run(first_ack_after, ports, leader, t0)
            procs[leader].wait(60)
            print(f"controlled shutdown (SIGTERM of the leader -> first acknowledged produce): "
                  f"{seconds(unavailable_s)}; the broker stopped after {time.monotonic() - t0:.2f} s", flush=True)

            procs[leader] = stack.enter_context(
                cluster_broker(root, zk_connect, leader, ports[leader], args.zk_session_ms))[0]
            state = trio.run(wait_healthy, zk_connect)
            leader = state.leader
            t0 = time.monotonic()
            procs[leader].kill()
            failover_s = trio.run(first_ack_after, ports, leader, t0)
            print(f"failover (SIGKILL of the leader -> first acknowledged produce at the new leader): "
                  f"{seconds(failover_s)} with a {args.zk_session_ms} ms ZooKeeper session", flush=True)


if __name__ == "__main__":
    main()
