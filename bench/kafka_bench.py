"""Apache Kafka clients on trikafka's Kafka listener (docs/protocol.md §16): produce and consume rates.

    python bench/kafka_bench.py [--messages N] [--size B] [--rf3-messages N] [--no-rf3] [--set KEY=VALUE]...

Starts ``trikafka serve --standalone --kafka-port 0`` as a subprocess on a temp
log dir, then, with confluent-kafka (librdkafka):

1. produces N (default 1,000,000) B-byte (default 200) values with acks 1,
   linger.ms 5 and no compression to a one-partition topic created through
   CreateTopics, then with acks all, then idempotent (acks all), then in
   committed transactions of 1,000 and of 100 (``init_transactions`` before
   the clock; ``--producers`` picks), and the same to librdkafka's in-memory mock broker
   (``test.mock.num.brokers=1``): the rate the client itself allows, the
   ceiling for any broker.  Each run ends when ``flush`` has every delivery
   report, so the time covers every message acknowledged.  ``--rounds``
   (default 3) alternating runs of each; the ratio is of the medians;
2. consumes the N messages from trikafka (assign from the beginning, no group
   commits), counting delivered messages, with confluent-kafka's Python
   consumer and, where Debian's kcat is installed, with kcat (the same
   librdkafka without Python's per-message cost: ``kcat -C -c N``, the whole
   process timed, start-up included);
3. unless ``--no-rf3``: starts a ZooKeeper and three brokers (``trikafka
   cluster up`` with free ports), creates a topic with replication factor 3
   through confluent's AdminClient and produces with acks all, plain then
   idempotent, next to a replication-factor-1 topic with acks 1 on the same
   cluster (the goal: idempotent RF 3 at 80% of RF 1 acks 1).

``--set`` passes a setting to the standalone broker (``trikafka serve --set``),
e.g. ``acks.all.fsync=false`` for Kafka's one-replica acks=all (docs/protocol.md
§12.6).

Prints msg/s and MB/s of values, the trikafka/mock ratio, and the broker's CPU
time per message (utime + stime of the broker process from /proc/<pid>/stat,
before and after each run; for the cluster, the sum over its brokers).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from served_broker import served_broker  # noqa: E402
from trikafka.cli.serve import read_ready_file  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PRODUCER_SETTINGS = {"acks": "1", "linger.ms": 5, "compression.type": "none",
                     "queue.buffering.max.messages": 1_000_000}
# The producers compared with the mock: settings over PRODUCER_SETTINGS.
PRODUCERS: dict[str, dict[str, Any]] = {"acks 1": {}, "acks all": {"acks": "all"},
                                        "idempotent": {"acks": "all", "enable.idempotence": True},
                                        "txn 1000": {"acks": "all", "enable.idempotence": True},
                                        "txn 100": {"acks": "all", "enable.idempotence": True}}
# The transactional producers: records per committed transaction (each run its own transactional.id).
TRANSACTION_RECORDS = {"txn 1000": 1000, "txn 100": 100}
# "txn 100" has no ratio goal: its goal is the broker CPU per transaction (printed).
GOALS = {"produce acks 1 vs mock": 0.90, "produce acks all vs mock": 0.95, "produce idempotent vs mock": 0.90,
         "produce txn 1000 vs mock": 0.75, "consume msg/s": 1_000_000,
         "RF 3 idempotent acks all vs RF 1 acks 1": 0.80}
CLIENT_TIMEOUT_S = 30.0
POLL_EVERY = 10_000


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes ``pids``, in seconds."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def create_topic(bootstrap: str, topic: str, replication_factor: int, settings: dict[str, Any] | None = None) -> None:
    """CreateTopics through confluent's AdminClient: one partition, ``replication_factor`` replicas
    (``settings``: more client settings, e.g. TLS)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(settings or {})})
    futures = admin.create_topics([NewTopic(topic, 1, replication_factor)], operation_timeout=CLIENT_TIMEOUT_S,
                                  request_timeout=CLIENT_TIMEOUT_S)
    futures[topic].result(CLIENT_TIMEOUT_S)


def produce(config: dict[str, Any], topic: str, messages: int, size: int, transaction_records: int = 0) -> float:
    """Seconds to produce ``messages`` values of ``size`` bytes and have every delivery report.

    ``transaction_records`` > 0 (``config`` then names a ``transactional.id``):
    the values go in committed transactions of that many.  ``init_transactions``
    runs before the clock starts: it is once per producer, and its time is
    mostly librdkafka's own (it asks for the coordinator only once a broker
    connection is up, then on a 500 ms timer), not the broker's.  Any other
    producer first delivers one warm-up value before the clock, for the same
    reason: an idempotent one gets its producer id on that same 500 ms timer
    (measured: "No brokers available for Idempotent producer", then 500 ms),
    which was half of a 200,000-message RF 3 run; every producer also connects
    and learns the leader there.  The topic so holds one value more than
    ``messages``; consumers read the first ``messages``.
    """
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    producer = Producer({**PRODUCER_SETTINGS, **config})
    value = b"v" * size
    send = producer.produce
    poll = producer.poll
    if transaction_records:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    else:
        send(topic, value, on_delivery=delivered)
        if producer.flush(CLIENT_TIMEOUT_S) != 0:
            raise RuntimeError("the producer did not deliver its warm-up value in time")
    started = time.perf_counter()
    for i in range(messages):
        if transaction_records and i % transaction_records == 0:
            if i:
                producer.commit_transaction(CLIENT_TIMEOUT_S * 4)
            producer.begin_transaction()
        while True:
            try:
                send(topic, value, on_delivery=delivered)
                break
            except BufferError:  # the client's queue is full: let it drain
                poll(0.01)
        if i % POLL_EVERY == 0:
            poll(0)
    if transaction_records and messages:
        producer.commit_transaction(CLIENT_TIMEOUT_S * 4)  # flushes, then commits
    if producer.flush(CLIENT_TIMEOUT_S * 4) != 0:
        raise RuntimeError("the producer did not deliver every message in time")
    elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return elapsed


CONSUMER_GROUP = "kafka-bench-assign-only"


def warm_group_coordinator(bootstrap: str, topic: str) -> None:
    """Ask the consumer's group for its committed offset once, untimed: the broker creates and loads
    ``__consumer_offsets`` (50 logs) on a group's first coordinator lookup, a one-time cost that is
    not the consumer's per-message cost."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": CONSUMER_GROUP})
    try:
        consumer.committed([TopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
    finally:
        consumer.close()


def consume(bootstrap: str, topic: str, messages: int) -> float:
    """Seconds to receive ``messages`` from the start of ``topic``'s partition 0 (assign, no commits)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": CONSUMER_GROUP,
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen = 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S * 4
        while seen < messages:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {seen} of {messages} messages in time")
            for message in consumer.consume(POLL_EVERY, 1.0):
                if message.error():
                    raise KafkaException(message.error())
                seen += 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def consume_with_kcat(bootstrap: str, topic: str, messages: int, *settings: str) -> float:
    """Seconds for a ``kcat`` process to receive ``messages`` from the start of partition 0 and exit
    (``settings``: more kcat arguments, e.g. ``-X security.protocol=SSL``)."""
    started = time.perf_counter()
    subprocess.run(["kcat", "-C", "-b", bootstrap, *settings, "-t", topic, "-p", "0", "-o", "beginning",
                    "-c", str(messages), "-q", "-f", ""], check=True, stdout=subprocess.DEVNULL,
                   timeout=CLIENT_TIMEOUT_S * 4)
    return time.perf_counter() - started


def line(label: str, messages: int, size: int, seconds: float, broker_cpu_s: float | None,
         transaction_records: int = 0) -> float:
    """Print one run (broker CPU per message, and per transaction when ``transaction_records``); its msg/s."""
    rate = messages / seconds
    cpu = "" if broker_cpu_s is None else \
        f"; broker CPU {broker_cpu_s:.2f} s, {broker_cpu_s / messages * 1e6:.2f} us/msg"
    if broker_cpu_s is not None and transaction_records:
        cpu += f", {broker_cpu_s / messages * transaction_records * 1e6:,.0f} us/transaction"
    print(f"{label:34} {rate:>12,.0f} msg/s {rate * size / 1e6:>8.1f} MB/s ({seconds:.2f} s{cpu})", flush=True)
    return rate


def timed(pids: list[int], run: Callable[[], float]) -> tuple[float, float]:
    """(seconds the run reports, broker CPU seconds it cost)."""
    before = cpu_seconds(pids)
    elapsed = run()
    return elapsed, cpu_seconds(pids) - before


def compare_with_mock(kind: str, bootstrap: str, broker_pid: int, messages: int, size: int, rounds: int) -> None:
    """``rounds`` alternating produce runs of the ``kind`` producer (``PRODUCERS``) to trikafka and to
    librdkafka's mock broker; prints each, the medians and their ratio (the goal: ``GOALS``)."""
    records = TRANSACTION_RECORDS.get(kind, 0)

    def config(side: dict[str, Any], round_: int) -> dict[str, Any]:
        named = {"transactional.id": f"bench-{kind}-{round_}".replace(" ", "-")} if records else {}
        return {**side, **PRODUCERS[kind], **named}

    # Alternating rounds, the median of each side: on a small machine one run's rate moves by
    # 10% or more with whatever else runs, and both sides should see the same conditions.
    trikafka_rates, mock_rates = [], []
    for round_ in range(1, rounds + 1):
        elapsed, cpu_s = timed([broker_pid], lambda: produce(config({"bootstrap.servers": bootstrap}, round_),
                                                              "bench", messages, size, records))
        trikafka_rates.append(line(f"produce trikafka ({kind}) #{round_}", messages, size, elapsed, cpu_s, records))
        mock_rates.append(line(f"produce librdkafka mock ({kind}) #{round_}", messages, size,
                               produce(config({"test.mock.num.brokers": 1}, round_), "bench", messages, size,
                                       records), None))
    trikafka_rate, mock_rate = statistics.median(trikafka_rates), statistics.median(mock_rates)
    print(f"{'produce medians':34} {trikafka_rate:>12,.0f} msg/s trikafka, {mock_rate:,.0f} msg/s mock",
          flush=True)
    ratio = trikafka_rate / mock_rate
    goal = GOALS.get(f"produce {kind} vs mock")
    verdict = "" if goal is None else f"  goal {goal:.0%}: {'met' if ratio >= goal else 'NOT met'}"
    print(f"{f'produce {kind}: trikafka / mock':34} {ratio:>12.0%}{verdict}", flush=True)


def standalone(root: Path, messages: int, size: int, rounds: int, producers: list[str], settings: list[str]) -> None:
    log_dir = root / "standalone"
    ready = root / "standalone.ready"
    with served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(log_dir),
                        *(arg for setting in settings for arg in ("--set", setting))], ready) as (proc, _port):
        kafka_port = read_ready_file(str(ready))[1]
        bootstrap = f"127.0.0.1:{kafka_port}"
        print(f"broker pid {proc.pid}, Kafka listener {bootstrap}; {messages:,} messages of {size} B", flush=True)
        create_topic(bootstrap, "bench", 1)
        for kind in producers:
            compare_with_mock(kind, bootstrap, proc.pid, messages, size, rounds)
        warm_group_coordinator(bootstrap, "bench")
        elapsed, cpu_s = timed([proc.pid], lambda: consume(bootstrap, "bench", messages))
        rate = line("consume trikafka (Python consumer)", messages, size, elapsed, cpu_s)
        if shutil.which("kcat"):
            elapsed, cpu_s = timed([proc.pid], lambda: consume_with_kcat(bootstrap, "bench", messages))
            rate = max(rate, line("consume trikafka (kcat)", messages, size, elapsed, cpu_s))
        print(f"{'consume goal':34} {GOALS['consume msg/s']:>12,} msg/s: "
              f"{'met' if rate >= GOALS['consume msg/s'] else 'NOT met'}", flush=True)


@contextlib.contextmanager
def three_brokers(root: Path) -> Iterator[Any]:
    """``trikafka cluster up`` with a ZooKeeper and three brokers on free ports under ``root``, stopped
    on leaving; None (said in one line) when it cannot start."""
    from trikafka.cli.cluster_local import LocalClusterError, start, stop

    directory = root / "cluster"
    try:
        cluster = start(directory, brokers=3, zookeeper_port=0, first_port=0, first_kafka_port=0, extra=[])
    except LocalClusterError as exc:
        print(f"replication: no 3-broker cluster: {exc}", flush=True)
        with contextlib.suppress(LocalClusterError):  # nothing recorded: nothing started
            stop(directory)  # what did start is recorded in the directory: stop it too
        yield None
        return
    try:
        yield cluster
    finally:
        stop(directory)


def replicated(root: Path, messages: int, size: int) -> None:
    with three_brokers(root) as cluster:
        if cluster is None:
            return
        bootstrap = cluster.kafka_bootstrap
        pids = [m.pid for m in cluster.brokers]
        print(f"cluster: ZooKeeper {cluster.zookeeper_connect}, Kafka listeners {bootstrap}; "
              f"{messages:,} messages of {size} B", flush=True)
        rates: dict[str, float] = {}
        for label, topic, rf, settings in (
                ("RF 1 acks 1", "bench-rf1", 1, {"acks": "1"}),
                ("RF 3 acks all", "bench-rf3", 3, {"acks": "all"}),
                ("RF 3 idempotent acks all", "bench-rf3", 3, {"acks": "all", "enable.idempotence": True})):
            try:
                if label != "RF 3 idempotent acks all":  # the same topic as plain acks all
                    create_topic(bootstrap, topic, rf)
                elapsed, cpu_s = timed(pids, lambda: produce({"bootstrap.servers": bootstrap, **settings},
                                                             topic, messages, size))
            except (KafkaException, RuntimeError) as exc:
                print(f"{'produce ' + label:34} failed: {exc}", flush=True)
                continue
            rates[label] = line(f"produce {label} (3 brokers' CPU)", messages, size, elapsed, cpu_s)
        goal_key = "RF 3 idempotent acks all vs RF 1 acks 1"
        if {"RF 1 acks 1", "RF 3 idempotent acks all"} <= rates.keys():
            ratio = rates["RF 3 idempotent acks all"] / rates["RF 1 acks 1"]
            print(f"{goal_key:34} {ratio:>12.0%}  goal {GOALS[goal_key]:.0%}: "
                  f"{'met' if ratio >= GOALS[goal_key] else 'NOT met'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes")
    parser.add_argument("--rounds", type=int, default=3, help="alternating produce rounds per side (median)")
    parser.add_argument("--rf3-messages", type=int, default=200_000, help="messages for the cluster runs")
    parser.add_argument("--no-rf3", action="store_true", help="skip the 3-broker ZooKeeper cluster")
    parser.add_argument("--producers", default=",".join(PRODUCERS),
                        help="comma-separated producers compared with the mock, of " + ", ".join(PRODUCERS))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the standalone broker (trikafka serve --set), repeatable")
    args = parser.parse_args()
    producers = [p for p in args.producers.split(",") if p]
    unknown = set(producers) - set(PRODUCERS)
    if unknown:
        parser.error(f"unknown producer(s) {', '.join(sorted(unknown))}: choose from {', '.join(PRODUCERS)}")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    root = Path(tempfile.mkdtemp(prefix="trikafka-kafka-bench-"))
    try:
        standalone(root, args.messages, args.size, args.rounds, producers, args.set)
        if not args.no_rf3:
            replicated(root, args.rf3_messages, args.size)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
