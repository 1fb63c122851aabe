"""Fault model "transactional copiers while brokers and copiers are SIGKILLed" (docs/protocol.md §19.5–§19.7),
Kafka's own transactions system test done with real processes.

Three ``trikafka serve --zookeeper`` processes serve an input and an output topic (replication factor 3,
``min.insync.replicas`` 2).  The input holds 100,000 records ``p<partition>-<n>``.  Copier processes
(``tests.helpers.kafka_txn_copier``: librdkafka consumers of one group and transactional producers) copy
each input partition to the same output partition in transactions of about 750 records, committing the
consumed positions in the same transaction.  Meanwhile, on a seeded schedule, brokers are SIGKILLed and
restarted (the transaction coordinator, leaders of input and output partitions), and so are copiers in
the middle of their transactions.  A copier that is fenced, or whose call does not complete, ends
and is restarted with its transactional id, as a supervisor restarts a worker; the test prints those.

The promise, checked by a librdkafka ``read_committed`` reader during the copy and by another after it:
every output partition reads as its input partition's records in order, each exactly once: no aborted
record, no duplicate, no gap (so no gap filled later), and in the end nothing missing.
"""

from __future__ import annotations

import functools
import logging
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from tests.helpers.broker_testing import ChildProcess, child_process
from tests.helpers.fault_seeds import fault_rng
from tests.helpers.kafka_clients import create_topic, high_watermarks, leader_of
from tests.helpers.kafka_groups import produce
from tests.helpers.kafka_processes import KafkaCluster, kafka_cluster
from tests.helpers.kafka_txn_copier import FATAL_EXIT, STUCK_EXIT
from tests.helpers.kafka_wire import find_transaction_coordinator, retry_while_retriable
from trikafka.kafka.group_records import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

logger = logging.getLogger(__name__)

SOURCE, TARGET, GROUP = "copier-input", "copier-output", "copiers"
PARTITIONS = 4
PER_PARTITION = 25_000
TOTAL = PARTITIONS * PER_PARTITION
COPIERS = 3
BATCH = 750
INTERNAL_PARTITIONS = 3
FLAGS = ("--set", f"offsets.topic.num.partitions={INTERNAL_PARTITIONS}",
         "--set", f"transaction.state.log.num.partitions={INTERNAL_PARTITIONS}",
         "--set", "group.initial.rebalance.delay.ms=0")
# What must have three replicas in sync before a broker is killed.
IN_SYNC_BEFORE_A_KILL = ((SOURCE, PARTITIONS), (TARGET, PARTITIONS), (OFFSETS_TOPIC, INTERNAL_PARTITIONS),
                         (TRANSACTION_STATE_TOPIC, INTERNAL_PARTITIONS))
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
# Where in the copy (records the reader has seen) the faults may fall.
FAULT_WINDOW = (0.05, 0.8)
BROKER_TARGETS = ("transaction coordinator", "input leader", "output leader")
COPIER_KILLS = 2
COPY_WAIT_S = 360.0  # an upper bound under load: a run takes about 45 s on an idle machine
READ_WAIT_S = 120.0
STOP_WAIT_S = 90.0
POLL_S = 0.5
READY_LINE = b"\nready"  # the copier's line once it runs (librdkafka's log lines come before it)


@dataclass
class OutputView:
    """What one ``read_committed`` reader has seen, checked record by record: output partition ``p``
    reads ``p-0, p-1, p-2, ...`` of input partition ``p``; the first departure is kept."""

    next_seq: dict[int, int] = field(default_factory=dict)
    where: dict[tuple[int, int], int] = field(default_factory=dict)  # (partition, seq) -> output offset
    count: int = 0
    violation: str | None = None

    def see(self, partition: int, offset: int, value: bytes | None) -> None:
        self.count += 1
        if self.violation is not None:
            return
        text = (value or b"").decode(errors="replace")
        source, _, seq_text = text.removeprefix("p").partition("-")
        if not (source.isdigit() and seq_text.isdigit()):
            self.violation = f"output {partition}@{offset}: {text!r} is no input record"
            return
        source_partition, seq = int(source), int(seq_text)
        expected = self.next_seq.get(partition, 0)
        if source_partition != partition:
            self.violation = f"output {partition}@{offset}: {text!r} belongs to output partition {source_partition}"
        elif seq < expected:
            self.violation = (f"output {partition}@{offset}: duplicate of p{partition}-{seq}, first read at "
                              f"offset {self.where.get((partition, seq))}")
        elif seq > expected:
            self.violation = (f"output {partition}@{offset}: p{partition}-{seq} where p{partition}-{expected} "
                              f"is due (missing or reordered: p{partition}-{expected}..{seq - 1})")
        else:
            self.next_seq[partition] = seq + 1
            self.where[(partition, seq)] = offset

    def missing(self) -> str | None:
        """The first input record of each partition not read yet, or None when all were."""
        short = {p: self.next_seq.get(p, 0) for p in range(PARTITIONS) if self.next_seq.get(p, 0) < PER_PARTITION}
        return ", ".join(f"p{p}-{n} (and the {PER_PARTITION - n} after it)" for p, n in short.items()) or None


def read_output(bootstrap: str, view: OutputView, done: threading.Event, *, to_end: bool) -> None:
    """Read the output with librdkafka ``read_committed`` into ``view`` until ``done`` is set, ``view``
    holds a violation, or (``to_end``) every partition reported its end (the last stable offset)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": to_end})
    try:
        consumer.assign([ConfluentPartition(TARGET, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        while not done.is_set() and view.violation is None and not (to_end and len(at_end) == PARTITIONS):
            for message in consumer.consume(10_000, POLL_S):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                elif error is not None:
                    logger.info("reader: %s", error)
                else:
                    at_end.discard(message.partition())
                    view.see(message.partition(), message.offset(), message.value())
    finally:
        consumer.close()


@dataclass
class Copiers:
    """``COPIERS`` copier processes, each restarted (same transactional id) whenever it ends, until
    it ends on :meth:`stop`'s SIGTERM.  ``started[n]`` is set while copier ``n``'s current run has
    said ``ready`` (its SIGTERM handler is installed).  An end the copier chose (fenced:
    ``FATAL_EXIT``; a call that did not complete: ``STUCK_EXIT``) is kept in ``restarts``, as a
    supervisor would restart it; any other end that the test did not ask for, and every jump a
    copier reports, in ``exits``."""

    cluster: KafkaCluster
    running: dict[int, ChildProcess] = field(default_factory=dict)
    started: dict[int, trio.Event] = field(default_factory=dict)
    exits: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    killed: int = 0
    stopping: bool = False
    stopped: int = 0
    all_stopped: trio.Event = field(default_factory=trio.Event)

    async def keep_running(self, number: int) -> None:
        self.started.setdefault(number, trio.Event())
        while True:  # a copier killed just before stop() runs again, so that the SIGTERM stops it
            program = [sys.executable, "-m", "tests.helpers.kafka_txn_copier"]
            async with child_process(self.cluster.bootstrap(), GROUP, SOURCE, TARGET, f"copier-{number}",
                                     str(BATCH), program=program) as child, trio.open_nursery() as watching:
                self.running[number] = child
                watching.start_soon(self._mark_started, number, child)
                code = await child.process.wait()
                watching.cancel_scope.cancel()
            if self.started[number].is_set():  # not replaced by kill(): an end the test did not cause
                self.started[number] = trio.Event()
            tail = bytes(child.stderr[-1500:]).decode(errors="replace")
            self.exits += [line for line in child.stderr.decode(errors="replace").splitlines() if "jump" in line]
            if code == 0 and self.stopping:
                self.stopped += 1
                if self.stopped == COPIERS:
                    self.all_stopped.set()
                return
            if code in (FATAL_EXIT, STUCK_EXIT):
                self.restarts.append(f"copier-{number} exited {code}: {tail.splitlines()[-1] if tail else ''}")
            elif code != -signal.SIGKILL:
                self.exits.append(f"copier-{number} exited {code}: {tail}")

    async def _mark_started(self, number: int, child: ChildProcess) -> None:
        """Set ``started[number]`` once the run says ``ready``: a SIGTERM before its handler is
        installed would end it at once instead of between transactions."""
        while READY_LINE not in child.stderr:
            await trio.sleep(0.1)  # polling the child's stderr
        self.started[number].set()

    async def kill(self, number: int, copy_done: Callable[[], bool]) -> None:
        """SIGKILL copier ``number`` once it has committed a transaction (so it dies in a later one),
        or once ``copy_done()``: a copier restarted late in the copy may find nothing left to copy."""
        await self.started[number].wait()
        child = self.running[number]
        with trio.fail_after(COPY_WAIT_S):
            while b"committed" not in child.stderr and not copy_done():
                await trio.sleep(0.1)  # polling the child's stderr
        child.signal(signal.SIGKILL)
        self.started[number] = trio.Event()  # set once the restarted copier says ready
        self.killed += 1

    async def stop(self) -> None:
        """SIGTERM every copier and wait until each has ended between transactions, with exit status 0."""
        self.stopping = True
        for number in range(COPIERS):
            await self.started[number].wait()
            self.running[number].signal(signal.SIGTERM)
        await self.all_stopped.wait()


def unregistered(bootstrap: str, broker_id: int) -> None:
    """Wait until Metadata no longer names ``broker_id`` (its ZooKeeper session expired), so that it may
    register again."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + READ_WAIT_S
    while broker_id in admin.list_topics(timeout=10).brokers:
        assert time.monotonic() < deadline, f"broker {broker_id} still registered"
        time.sleep(0.1)  # polling the cluster's metadata


async def broker_fault(cluster: KafkaCluster, nursery: trio.Nursery, target: str, rng: random.Random) -> int:
    """SIGKILL the broker that ``target`` names (once every partition of the topics and of the internal
    topics has its three replicas in sync again, as a rolling restart waits: one broker down at a time),
    wait until another broker leads in its place, and restart it on its log directory in ``nursery``."""
    bootstrap = cluster.bootstrap()
    if target == "transaction coordinator":
        transactional_id = f"copier-{rng.randrange(COPIERS)}"
        _, victim, _ = await trio.to_thread.run_sync(
            retry_while_retriable, lambda: find_transaction_coordinator(bootstrap.split(",")[0], transactional_id))
        topic, partition = None, None
    else:
        topic, partition = (SOURCE if target == "input leader" else TARGET), rng.randrange(PARTITIONS)
        victim = await leader_of(bootstrap, topic, partition)
    for name, count in IN_SYNC_BEFORE_A_KILL:
        for p in range(count):
            await leader_of(bootstrap, name, p)
    await cluster.brokers[victim].kill()
    survivors = cluster.bootstrap(without=(victim,))
    if topic is not None and partition is not None:
        await leader_of(survivors, topic, partition, isr=2, not_on=victim)
    await trio.to_thread.run_sync(unregistered, survivors, victim)
    await cluster.restart_in(nursery, victim, *FLAGS)
    return victim


async def test_transactional_copiers_copy_exactly_once_through_broker_and_copier_kills(zk_chroot, tmp_path):
    rng = fault_rng("test_kafka_txn_copier")
    seed = rng.seed_value  # type: ignore[attr-defined]
    order_rng, when_rng = random.Random(f"{seed}:order"), random.Random(f"{seed}:when")
    broker_rng, copier_rng = random.Random(f"{seed}:broker"), random.Random(f"{seed}:copier")
    faults: list[tuple[str, Any]] = [("broker", t) for t in BROKER_TARGETS]
    faults += [("copier", copier_rng.randrange(COPIERS)) for _ in range(COPIER_KILLS)]
    order_rng.shuffle(faults)
    thresholds = sorted(int(TOTAL * when_rng.uniform(*FAULT_WINDOW)) for _ in faults)
    print(f"faults: {list(zip(thresholds, faults))}")

    async with kafka_cluster(tmp_path, zk_chroot, 3, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        for topic in (SOURCE, TARGET):
            await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, topic, PARTITIONS,
                                                            TOPIC_CONFIGS, replication_factor=3))
        # Idempotent, so that a retried batch cannot land after later ones: input offset n holds record n.
        await trio.to_thread.run_sync(functools.partial(produce, bootstrap, SOURCE, PARTITIONS, PER_PARTITION,
                                                        **{"enable.idempotence": True}))
        assert await trio.to_thread.run_sync(high_watermarks, bootstrap, SOURCE, PARTITIONS) == \
            [PER_PARTITION] * PARTITIONS, "the input holds each record once"

        copiers = Copiers(cluster)
        during, after = OutputView(), OutputView()
        reader_done = threading.Event()
        done: list[str] = []
        try:
            async with trio.open_nursery() as nursery:  # copiers, the reader, restarted brokers
                for number in range(COPIERS):
                    nursery.start_soon(copiers.keep_running, number)
                nursery.start_soon(functools.partial(trio.to_thread.run_sync, functools.partial(
                    read_output, bootstrap, during, reader_done, to_end=False), abandon_on_cancel=True))
                with trio.fail_after(COPY_WAIT_S):
                    for threshold, (kind, what) in zip(thresholds, faults):
                        while during.count < threshold and during.violation is None:
                            await trio.sleep(POLL_S)  # polling the reader's progress
                        if during.violation is not None:
                            break
                        if kind == "broker":
                            victim = await broker_fault(cluster, nursery, what, broker_rng)
                            done.append(f"broker {victim} ({what}) at {during.count}")
                        else:
                            await copiers.kill(what, lambda: during.count >= TOTAL)
                            done.append(f"copier-{what} at {during.count}")
                        print(f"fault: {done[-1]}")
                    while during.count < TOTAL and during.violation is None:
                        await trio.sleep(POLL_S)  # polling the reader's progress
                assert during.violation is None, f"read_committed during the copy: {during.violation}"
                reader_done.set()
                with trio.fail_after(STOP_WAIT_S):
                    await copiers.stop()
                with trio.fail_after(READ_WAIT_S):
                    await trio.to_thread.run_sync(functools.partial(read_output, cluster.bootstrap(), after,
                                                                    threading.Event(), to_end=True))
                nursery.cancel_scope.cancel()  # the restarted brokers
        finally:
            reader_done.set()
            print("faults done:", done, "copier exits:", copiers.exits, "copier restarts:", copiers.restarts)
            for number, child in sorted(copiers.running.items()):
                print(f"copier-{number}, last run:", bytes(child.stderr[-3000:]).decode(errors="replace"))
            for broker_id, serve in sorted(cluster.brokers.items()):
                print(f"broker {broker_id}:", serve.stderr_tail)
        assert after.violation is None, f"read_committed after the copy: {after.violation}"
        assert after.missing() is None, f"missing from the output: {after.missing()}"
        assert after.count == TOTAL
        assert copiers.killed == COPIER_KILLS and len(done) == len(faults)
        assert not copiers.exits, f"copiers ended or jumped unasked: {copiers.exits}"
