"""Python Kafka clients side by side on one trikafka broker: trikafka's Trio client, aiokafka, kafka-python.

    python bench/client_bench.py [--messages N] [--size B] [--clients trikafka,aiokafka,kafka-python]

Starts ``trikafka serve --standalone --kafka-port 0`` (``served_broker``) and
creates, per client, two one-partition topics.  Each client then runs in a
process of its own (this script with ``--worker CLIENT``, under ``nice``):

1. produces N (default 50,000) B-byte (default 200) values with acks 1 and
   linger 5 ms to partition 0, the clock stopping once every record is
   acknowledged (``flush``);
2. consumes them from offset 0 (assigned, no group), reading every record's
   value, until N records came;
3. and 4. the same with an idempotent producer (acks all).

``trikafka-values`` is trikafka's client again, its consumer reading each
batch's value column (``RecordBatch.values``: no object per record) instead
of its records.

Prints msg/s per client and column, each column's ratio of trikafka's
client to aiokafka's (the goal of issue 42 is 2x), and the CPU time per
message of the client process (every thread) and of the broker in each
column: what bounds a rate.  The load average is
printed before and after: the machine is shared, figures move with it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

COLUMNS = ("produce acks=1", "consume", "produce idempotent", "consume idempotent")
CLIENTS = ("trikafka", "trikafka-values", "aiokafka", "kafka-python")
LINGER_MS = 5
WORKER_TIMEOUT_S = 300.0
SETTLE_S = 5.0  # the longest wait for the broker's deferred work after a column
SETTLE_POLL_S = 0.2


Measure = tuple[float, float, float]  # seconds, the client's CPU seconds, the broker's CPU seconds


class Meter:
    """Times one column: wall clock, this process's CPU (every thread) and the broker's (/proc)."""

    def __init__(self, broker_pid: int):
        self.broker_pid = broker_pid
        self._started: Measure = (0.0, 0.0, 0.0)

    def _now(self) -> Measure:
        from kafka_bench import cpu_seconds
        return time.perf_counter(), time.process_time(), cpu_seconds([self.broker_pid])

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> Measure:
        now = self._now()
        return now[0] - self._started[0], now[1] - self._started[1], self._broker_settled() - self._started[2]

    def _broker_settled(self) -> float:
        """The broker's CPU seconds once it stops using CPU (at most SETTLE_S): work it defers past an
        answer (an acks 1 append's flush) counts in the column that caused it, not in the next."""
        from kafka_bench import cpu_seconds
        deadline = time.monotonic() + SETTLE_S
        last = cpu_seconds([self.broker_pid])
        while time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)
            now = cpu_seconds([self.broker_pid])
            if now == last:
                break
            last = now
        return last


# ---------------------------------------------------------------------- workers (one process each)

def tally(batches: Iterable[Sequence[Any]], size: int) -> int:
    """How many records ``batches`` (lists of any client's records) hold, each value read and checked."""
    count = value_bytes = 0
    for records in batches:
        for record in records:
            value_bytes += len(record.value)
        count += len(records)
    assert value_bytes == count * size
    return count


def tally_values(values: Sequence[bytes], size: int) -> int:
    """``tally`` of a column of values."""
    value_bytes = 0
    for value in values:
        value_bytes += len(value)
    assert value_bytes == len(values) * size
    return len(values)


def trikafka_rates(bootstrap: str, topics: tuple[str, str], messages: int, size: int, meter: Meter,
                   values_only: bool = False) -> list[Measure]:
    """trikafka's Trio client; ``values_only``: its consumer reads each batch's value column (no
    record objects), where this checkout has one."""
    import trio

    from trikafka.client.kafka import KafkaClient, KafkaProducer, PartitionConsumer

    value = b"v" * size

    async def produce(topic: str, idempotent: bool) -> Measure:
        async with KafkaClient(bootstrap) as client:
            await client.partition_count(topic)  # metadata before the clock starts
            async with KafkaProducer.open(client, acks=-1 if idempotent else 1, idempotent=idempotent,
                                          linger_s=LINGER_MS / 1000) as producer:
                meter.start()
                for _ in range(messages):
                    await producer.submit(topic, value, partition=0)
                await producer.flush()
                return meter.stop()

    async def consume(topic: str) -> Measure:
        async with KafkaClient(bootstrap) as client, PartitionConsumer(client, topic, 0, 0) as consumer:
            await client.partition_count(topic)
            meter.start()
            count = 0
            if hasattr(consumer, "batches"):  # the batch API, where this checkout has it
                async for batch in consumer.batches():
                    if values_only and hasattr(batch, "values"):
                        count += tally_values(batch.values, size)
                    else:
                        count += tally((batch,), size)
                    if count >= messages:
                        break
            else:
                while count < messages:
                    count += tally((await consumer.fetch(),), size)
            return meter.stop()

    async def run() -> list[Measure]:
        plain, idempotent = topics
        return [await produce(plain, False), await consume(plain), await produce(idempotent, True),
                await consume(idempotent)]

    return trio.run(run)


def aiokafka_rates(bootstrap: str, topics: tuple[str, str], messages: int, size: int, meter: Meter) -> list[Measure]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    value = b"v" * size

    async def produce(topic: str, idempotent: bool) -> Measure:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all" if idempotent else 1,
                                    enable_idempotence=idempotent, linger_ms=LINGER_MS)
        await producer.start()
        try:
            await producer.partitions_for(topic)
            meter.start()
            for _ in range(messages):
                await producer.send(topic, value, partition=0)
            await producer.flush()
            return meter.stop()
        finally:
            await producer.stop()

    async def consume(topic: str) -> Measure:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            meter.start()
            count = 0
            while count < messages:
                count += tally((await consumer.getmany(timeout_ms=1000)).values(), size)
            return meter.stop()
        finally:
            await consumer.stop()

    async def run() -> list[Measure]:
        plain, idempotent = topics
        return [await produce(plain, False), await consume(plain), await produce(idempotent, True),
                await consume(idempotent)]

    return asyncio.run(run())


def kafka_python_rates(bootstrap: str, topics: tuple[str, str], messages: int, size: int, meter: Meter) -> list[Measure]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    value = b"v" * size

    def produce(topic: str, idempotent: bool) -> Measure:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all" if idempotent else 1,
                                 enable_idempotence=idempotent, linger_ms=LINGER_MS)
        try:
            producer.partitions_for(topic)
            meter.start()
            for _ in range(messages):
                producer.send(topic, value, partition=0)
            producer.flush()
            return meter.stop()
        finally:
            producer.close()

    def consume(topic: str) -> Measure:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest")
        try:
            consumer.assign([TopicPartition(topic, 0)])
            meter.start()
            count = 0
            while count < messages:
                count += tally(consumer.poll(timeout_ms=1000).values(), size)
            return meter.stop()
        finally:
            consumer.close()

    plain, idempotent = topics
    return [produce(plain, False), consume(plain), produce(idempotent, True), consume(idempotent)]


WORKERS: dict[str, Callable[[str, tuple[str, str], int, int, Meter], list[Measure]]] = {
    "trikafka": trikafka_rates, "trikafka-values": functools.partial(trikafka_rates, values_only=True),
    "aiokafka": aiokafka_rates, "kafka-python": kafka_python_rates}


# ---------------------------------------------------------------------- the driver

def run_worker(client: str, bootstrap: str, broker_pid: int, messages: int, size: int) -> list[Measure] | str:
    """Each column's (seconds, client CPU s, broker CPU s) for ``client``, measured in a process of its
    own; or why it failed."""
    cmd = ["nice", "-n", "5", sys.executable, __file__, "--worker", client, "--bootstrap", bootstrap,
           "--broker-pid", str(broker_pid), "--messages", str(messages), "--size", str(size)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no answer within {WORKER_TIMEOUT_S:.0f} s"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return [tuple(m) for m in json.loads(done.stdout.strip().splitlines()[-1])]  # type: ignore[misc]


def topics_of(client: str) -> tuple[str, str]:
    return f"{client}-plain", f"{client}-idempotent"


def table(title: str, measured: dict[str, list[Measure] | str], cell: Callable[[Measure], float],
          fmt: str) -> None:
    print(f"{title:20}" + "".join(f"{c:>20}" for c in COLUMNS))
    for client, row in measured.items():
        print(f"{client:20}" + (row if isinstance(row, str) else "".join(format(cell(m), fmt) for m in row)))


def ratios(what: str, measured: dict[str, list[Measure] | str], ratio: Callable[[Measure, Measure], float]) -> None:
    """Each trikafka row's ``ratio`` to aiokafka's, per column (the goal of issue 42: 2x)."""
    theirs = measured.get("aiokafka")
    for client in ("trikafka", "trikafka-values"):
        ours = measured.get(client)
        if isinstance(ours, list) and isinstance(theirs, list):
            label = client.replace("trikafka-", "") + "/aiokafka"
            print(f"{label:20}" + "".join(f"{ratio(a, b):>19.2f}x" for a, b in zip(ours, theirs))
                  + f"  ({what}, goal 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated, of " + ", ".join(CLIENTS))
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        meter = Meter(args.broker_pid)
        print(json.dumps(WORKERS[args.worker](args.bootstrap, topics_of(args.worker), args.messages, args.size,
                                              meter)))
        return
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown client(s) {', '.join(sorted(unknown))}: choose from {', '.join(CLIENTS)}")

    from kafka_bench import create_topic
    from served_broker import served_broker
    from trikafka.cli.serve import read_ready_file

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"{args.messages:,} messages of {args.size} B, one partition", flush=True)
    root = Path(tempfile.mkdtemp(prefix="trikafka-client-bench-"))
    measured: dict[str, list[Measure] | str] = {}
    try:
        ready = root / "broker.ready"
        with served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(root / "log")], ready) as (proc, _):
            bootstrap = f"127.0.0.1:{read_ready_file(str(ready))[1]}"
            for client in clients:
                for topic in topics_of(client):
                    create_topic(bootstrap, topic, 1)
                measured[client] = run_worker(client, bootstrap, proc.pid, args.messages, args.size)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    per_message_us = 1e6 / args.messages
    table("msg/s", measured, lambda m: args.messages / m[0], ">20,.0f")
    ratios("msg/s", measured, lambda ours, theirs: theirs[0] / ours[0])
    table("client CPU us/msg", measured, lambda m: m[1] * per_message_us, ">20.1f")
    ratios("client CPU", measured, lambda ours, theirs: theirs[1] / ours[1])
    table("broker CPU us/msg", measured, lambda m: m[2] * per_message_us, ">20.1f")
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
