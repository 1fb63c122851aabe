"""The cost of exactly-once on trikafka's Kafka listener (docs/protocol.md §19): acks all, plain
against idempotent and transactional, in one run.

    python bench/exactly_once_bench.py [--messages N] [--size B] [--rounds R] [--no-rf3] [--set KEY=VALUE]...

With confluent-kafka (librdkafka), ``acks=all``, linger.ms 5, no compression:
alternating rounds (default 3) of N (default 500,000) B-byte (default 200)
values to one partition, with ``enable.idempotence`` false then true, on a
``trikafka serve --standalone`` subprocess and (unless ``--no-rf3``) on a
three-broker ZooKeeper cluster with a replication-factor-3 topic
(``min.insync.replicas`` 2).  On the standalone broker more modes run in the
same alternation: confluent-kafka's transactional producer committing
transactions of 1000 and of 100 records (``init_transactions`` before the
clock, as a long-lived producer calls it once; one transaction before the
rounds creates ``__transaction_state``, and its time is printed on its own),
and trikafka's own Trio ``KafkaProducer`` (acks -1, linger 5 ms) plain,
idempotent and in transactions of 1000 records.  The cluster runs
confluent-kafka's plain, idempotent and transactions of 1000, whose first
batch on the partition its leader verifies with the transaction coordinator,
wherever that is (§19.5.7).  Each run ends
when every delivery report is in (and the last transaction committed).
Prints each run's msg/s and the broker CPU per message (from /proc), then the
medians and each mode's ratio to its client's plain mode.  ``--set`` passes a
setting to the standalone broker (``trikafka serve --set``), e.g.
``transaction.completion.wait.ms=0`` for Kafka's immediate
CONCURRENT_TRANSACTIONS answers instead of trikafka's wait (§19.5.3).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kafka_bench import create_topic, line, produce, three_brokers, timed  # noqa: E402
from served_broker import served_broker  # noqa: E402
from trikafka.cli.serve import read_ready_file  # noqa: E402

@dataclass(frozen=True)
class Mode:
    """One column: which producer, its settings, and how many records a transaction holds (0: none)."""

    client: str  # "confluent" (librdkafka settings) or "trio" (KafkaProducer keyword arguments)
    settings: dict[str, object]
    transaction_records: int = 0
    baseline: str = "plain"  # the mode its ratio is taken against


MODES = {
    "plain": Mode("confluent", {"acks": "all", "enable.idempotence": False}),
    "idempotent": Mode("confluent", {"acks": "all", "enable.idempotence": True}),
    "txn-1000": Mode("confluent", {"acks": "all", "enable.idempotence": True}, 1000),
    "txn-100": Mode("confluent", {"acks": "all", "enable.idempotence": True}, 100),
    "trio plain": Mode("trio", {"idempotent": False}, baseline="trio plain"),
    "trio idempotent": Mode("trio", {}, baseline="trio plain"),
    "trio txn-1000": Mode("trio", {}, 1000, baseline="trio plain"),
}
# The cluster's modes: confluent-kafka's, the Trio producer's being measured on the standalone broker.
REPLICATED_MODES = ("plain", "idempotent", "txn-1000")


def produce_trio(bootstrap: str, topic: str, messages: int, size: int, mode: Mode, transactional_id: str) -> float:
    """Seconds for trikafka's Trio producer to have ``messages`` values of ``size`` bytes acknowledged
    (acks -1, linger 5 ms), in committed transactions of ``mode.transaction_records`` when set."""
    import trio

    from trikafka.client.kafka import KafkaClient, KafkaProducer

    value = b"v" * size
    per_transaction = mode.transaction_records or messages

    async def run() -> float:
        async with KafkaClient(bootstrap) as client:
            await client.partition_count(topic)  # metadata before the clock starts, as librdkafka's
            async with KafkaProducer.open(client, transactional_id=transactional_id if mode.transaction_records
                                          else None, **mode.settings) as producer:
                if mode.transaction_records:
                    await producer.init_transactions()
                started = time.perf_counter()
                for first in range(0, messages, per_transaction):
                    async with (producer.transaction() if mode.transaction_records
                                else contextlib.nullcontext()):
                        for _ in range(min(per_transaction, messages - first)):
                            await producer.submit(topic, value, partition=0)
                    await producer.flush()
            return time.perf_counter() - started

    return trio.run(run)


def compare(bootstrap: str, pids: list[int], topic: str, messages: int, size: int, rounds: int, where: str,
            modes: tuple[str, ...] = tuple(MODES)) -> None:
    rates: dict[str, list[float]] = {name: [] for name in modes}
    if any(MODES[name].transaction_records for name in modes):
        # The cluster's first transaction creates __transaction_state (docs/protocol.md §19.5.1): a
        # one-time cost, printed on its own and kept out of the rounds.
        warm_up = {"bootstrap.servers": bootstrap, **MODES["txn-100"].settings,
                   "transactional.id": f"bench-{where}-warm-up".replace(" ", "-")}
        started = time.perf_counter()
        produce(warm_up, topic, 1, size, 1)
        print(f"{where + ' first transaction':34} {time.perf_counter() - started:>12.2f} s (creates "
              f"__transaction_state)", flush=True)
    for round_ in range(1, rounds + 1):
        for name in modes:
            mode = MODES[name]
            transactional_id = f"bench-{where}-{name}-{round_}".replace(" ", "-")
            if mode.client == "trio":
                def run() -> float:
                    return produce_trio(bootstrap, topic, messages, size, mode, transactional_id)
            else:
                config = {"bootstrap.servers": bootstrap, **mode.settings}
                if mode.transaction_records:
                    config["transactional.id"] = transactional_id

                def run() -> float:
                    return produce(config, topic, messages, size, mode.transaction_records)
            elapsed, cpu_s = timed(pids, run)
            rates[name].append(line(f"{where} {name} #{round_}", messages, size, elapsed, cpu_s,
                                    mode.transaction_records))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    print(f"{where + ' medians':34} " + ", ".join(f"{m} {r:,.0f} msg/s" for m, r in medians.items()), flush=True)
    for name in modes:
        baseline = MODES[name].baseline
        if name != baseline and baseline in medians:
            print(f"{where + ' ' + name + ' / ' + baseline:34} {medians[name] / medians[baseline]:>12.0%}", flush=True)


def standalone(root: Path, messages: int, size: int, rounds: int, settings: list[str]) -> None:
    ready = root / "standalone.ready"
    with served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(root / "standalone"),
                        *(arg for setting in settings for arg in ("--set", setting))], ready) as (proc, _port):
        bootstrap = f"127.0.0.1:{read_ready_file(str(ready))[1]}"
        print(f"standalone broker pid {proc.pid}, {bootstrap}; {messages:,} messages of {size} B", flush=True)
        create_topic(bootstrap, "eos", 1)
        compare(bootstrap, [proc.pid], "eos", messages, size, rounds, "RF 1")


def replicated(root: Path, messages: int, size: int, rounds: int) -> None:
    with three_brokers(root) as cluster:
        if cluster is None:
            return
        bootstrap = cluster.kafka_bootstrap
        print(f"cluster: Kafka listeners {bootstrap}; {messages:,} messages of {size} B", flush=True)
        create_topic(bootstrap, "eos-rf3", 3)
        compare(bootstrap, [m.pid for m in cluster.brokers], "eos-rf3", messages, size, rounds, "RF 3",
                REPLICATED_MODES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per mode (median)")
    parser.add_argument("--no-rf3", action="store_true", help="skip the 3-broker ZooKeeper cluster")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the standalone broker (trikafka serve --set), repeatable")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    root = Path(tempfile.mkdtemp(prefix="trikafka-eos-bench-"))
    try:
        standalone(root, args.messages, args.size, args.rounds, args.set)
        if not args.no_rf3:
            replicated(root, args.messages // 2, args.size, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
