"""The cost of exactly-once on trikafka's Kafka listener (docs/protocol.md §19): acks all, plain
against idempotent and transactional, in one run.

    python bench/exactly_once_bench.py [--messages N] [--size B] [--rounds R] [--no-rf3]

With confluent-kafka (librdkafka), ``acks=all``, linger.ms 5, no compression:
alternating rounds (default 3) of N (default 500,000) B-byte (default 200)
values to one partition, with ``enable.idempotence`` false then true, on a
``trikafka serve --standalone`` subprocess and (unless ``--no-rf3``) on a
three-broker ZooKeeper cluster with a replication-factor-3 topic
(``min.insync.replicas`` 2).  On the standalone broker two more modes run in
the same alternation: confluent-kafka's transactional producer committing
transactions of 1000 and of 100 records (``init_transactions`` included in
the time).  The cluster runs only plain and idempotent: a transaction there
needs its coordinator on every partition leader's broker (§19.5.7).  Each run
ends when every delivery report is in (and the last transaction committed).
Prints each run's msg/s and the broker CPU per message (from /proc), then the
medians and each mode's ratio to plain.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kafka_bench import create_topic, line, produce, three_brokers, timed  # noqa: E402
from served_broker import served_broker  # noqa: E402
from trikafka.cli.serve import read_ready_file  # noqa: E402

# mode -> (librdkafka settings, records per transaction: 0 without transactions)
MODES: dict[str, tuple[dict[str, object], int]] = {
    "plain": ({"acks": "all", "enable.idempotence": False}, 0),
    "idempotent": ({"acks": "all", "enable.idempotence": True}, 0),
    "txn-1000": ({"acks": "all", "enable.idempotence": True}, 1000),
    "txn-100": ({"acks": "all", "enable.idempotence": True}, 100),
}
REPLICATED_MODES = ("plain", "idempotent")  # §19.5.7: transactions need the coordinator on the leaders' broker


def compare(bootstrap: str, pids: list[int], topic: str, messages: int, size: int, rounds: int, where: str,
            modes: tuple[str, ...] = tuple(MODES)) -> None:
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for round_ in range(1, rounds + 1):
        for mode in modes:
            settings, per_transaction = MODES[mode]
            config = {"bootstrap.servers": bootstrap, **settings}
            if per_transaction:
                config["transactional.id"] = f"bench-{where}-{mode}-{round_}"
            elapsed, cpu_s = timed(pids, lambda: produce(config, topic, messages, size, per_transaction))
            rates[mode].append(line(f"{where} {mode} #{round_}", messages, size, elapsed, cpu_s))
    medians = {mode: statistics.median(r) for mode, r in rates.items()}
    print(f"{where + ' medians':34} " + ", ".join(f"{m} {r:,.0f} msg/s" for m, r in medians.items()), flush=True)
    for mode in modes[1:]:
        print(f"{where + ' ' + mode + ' / plain':34} {medians[mode] / medians['plain']:>12.0%}", flush=True)


def standalone(root: Path, messages: int, size: int, rounds: int) -> None:
    ready = root / "standalone.ready"
    with served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(root / "standalone")],
                       ready) as (proc, _port):
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
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    root = Path(tempfile.mkdtemp(prefix="trikafka-eos-bench-"))
    try:
        standalone(root, args.messages, args.size, args.rounds)
        if not args.no_rf3:
            replicated(root, args.messages // 2, args.size, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
