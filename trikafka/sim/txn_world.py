"""The transactions world: idempotent and transactional producers and read_committed readers under
faults, on a virtual clock (docs/simulation.md, "Transactions").

Three output partitions and, per copier, an offsets partition (``txn_cluster.SimPartition``) hold
real v2 batches under the real producer state; a ``SimTxnCoordinator`` runs the real transaction
state machine over a replicated ``__transaction_state`` (``kafka_coordinator.ReplicatedLog``).  Two
transactional copiers, one idempotent producer, a read_committed reader and a read_uncommitted one
(``txn_clients``) run against them while a nemesis draws faults from ``txn_faults.FAULT_TABLE``;
``txn_promises`` judges what the reader was shown.  Everything is a function of the seed, as in the
Kafka-groups world: a heap of events in ms, a ``random.Random`` per kind of choice.  ``run_seed``
runs one seed; ``trikafka sim --world transactions`` is the command.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import TRANSACTIONAL, read_header
from trikafka.kafka.records import Record, build_batch
from trikafka.broker.kafka.transactions.machine import AT_REST
from trikafka.kafka.txn_records import TxnState, TxnValue
from trikafka.log.verification_guard import VerificationGuard

from .checker import Violation
from .event_world import EventWorld, WorldResult, judge, replay_command
from .kafka_coordinator import ReplicatedLog
from .plants import planted
from .txn_clients import Request, SimClient, SimCopier, SimIdempotent, SimReader
from .txn_cluster import SimPartition, SimTxnCoordinator, marker_batch
from .txn_faults import FAULT_TABLE, FAULTS, REQUEST_DELAY_MS, parse_faults
from .txn_promises import SETTLES, TxnHistory

__all__ = ["FAULTS", "FAULT_TABLE", "TransactionsResult", "TransactionsWorld", "parse_faults", "run_seed"]

BROKERS, COPIERS, OUTPUTS = 3, 2, 3
DURATION_MS, SETTLE_MS = 20_000, 12_000
WALL_EPOCH_MS = 1_700_000_000_000  # the wall clock the records carry: the virtual clock from this instant
LATENCY_MS = (1, 20)
REPLICATION_MS = (1, 30)
LOAD_MS = (5, 200)
FAULT_GAP_MS = (300, 2500)
FIRST_PRODUCER_ID = 1000
RESTART_MS = 200  # a fenced copier's process exits; its supervisor starts the next incarnation this much later
GROUP_KEY = b"copier"
STREAMS = ("fault", "victim", "timing", "duration", "latency", "replication", "load", "copier", "idempotent",
           "reader")


class TransactionsWorld(EventWorld):
    """Everything one seed runs: the clock, the partitions, the coordinator, the clients, the nemesis."""

    def __init__(self, seed: int, duration_ms: int, faults: tuple[str, ...]):
        super().__init__(seed, duration_ms, faults, STREAMS)
        self.output_partitions = OUTPUTS
        self.partitions = [SimPartition(self, ("out", p)) for p in range(OUTPUTS)] + \
                          [SimPartition(self, ("__consumer_offsets", s)) for s in range(COPIERS)]
        self._by_name = {p.name: p for p in self.partitions}
        self.log = ReplicatedLog()
        self.coordinator_broker = 0
        self.coordinator: SimTxnCoordinator | None = None
        self.coordinator_down = False
        self._producer_ids = itertools.count(FIRST_PRODUCER_ID)
        self.copiers: list[SimCopier] = []
        self.incarnations = [0] * COPIERS
        self.idempotent = SimIdempotent(self, 1, self.streams["idempotent"])
        self.clients: list[SimClient] = []
        self.reader = SimReader(self, True, self.streams["reader"])
        self.uncommitted = SimReader(self, False, self.streams["reader"])
        self.uncommitted_seen: set[bytes] = set()
        self.history = TxnHistory()
        self.counts = {"faults": 0, "commits": 0, "aborts": 0, "fenced": 0, "failovers": 0, "records_read": 0}

    # ----------------------------------------------------------------- the run

    def run(self) -> None:
        self._elect_coordinator(0)
        for source in range(COPIERS):
            self.restart_copier(source, False)
        self.clients = [*self.copiers, self.idempotent]
        self.idempotent.start()
        self.reader.start()
        self.uncommitted.start()
        self.at(self.streams["timing"].randint(*FAULT_GAP_MS), self._nemesis_round)
        self.run_until(self.duration_ms + SETTLE_MS)
        if self.violation is None:
            self._finish()

    def _finish(self) -> None:
        """The reader reads every partition to its end; then the whole history is judged."""
        for partition in range(OUTPUTS):
            while True:
                records, self.reader.positions[partition] = self.partitions[partition].read(
                    self.reader.positions[partition], True)
                if not records:
                    break
                self.shown(self.reader, partition, records)
        stuck = [p.name for p in self.partitions
                 if p.states.last_stable_offset(p.high_watermark) < p.high_watermark]
        offsets = {s: self._committed_position(s) for s in range(COPIERS)}
        self.counts["duplicates"] = sum(p.duplicates for p in self.partitions)
        unseen = sum(1 for v in self.uncommitted_seen if v not in self.history.seen)
        self.trace.add(f"end: {self.counts}; committed offsets {offsets}; open transactions on {stuck}; the "
                       f"read_uncommitted reader saw {unseen} records read_committed never showed")
        self.fail(self._settled(stuck))
        self.fail(self.history.finish(offsets))

    def _settled(self, stuck: list[tuple[str, int]]) -> Violation | None:
        coordinator = self.coordinator
        if coordinator is None or not coordinator.loaded:
            return Violation(SETTLES, "no coordinator serves __transaction_state")
        open_ids = {tid: v.state.name for tid, v in sorted(coordinator.part.ids.items()) if v.state not in AT_REST}
        if open_ids or stuck:
            return Violation(SETTLES, f"transactions still open: {open_ids}; LSO below the high watermark on {stuck}")
        return None

    def wall_ms(self) -> int:
        return WALL_EPOCH_MS + self.now_ms

    def replication_delay_ms(self) -> int:
        return self.streams["replication"].randint(*REPLICATION_MS)

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    # ----------------------------------------------------------------- the coordinator

    def _elect_coordinator(self, broker: int) -> None:
        self.coordinator_broker = broker
        coordinator = self.coordinator = SimTxnCoordinator(self, broker, self.log)
        load_ms = self.streams["load"].randint(*LOAD_MS)

        def load() -> None:
            if coordinator is self.coordinator:
                count = coordinator.load()
                self.trace.add(f"coordinator {broker} loaded {count} records at epoch {self.log.leader_epoch}: "
                               f"{ {t: v.state.name for t, v in sorted(coordinator.part.ids.items())} }")

        self.at(self.now_ms + load_ms, load)

    def coordinator_failover(self, duration_ms: int) -> None:
        old = self.coordinator
        if old is None or self.coordinator_down or not old.loaded:
            return
        old.alive = False
        lost = self.log.crash_leader()
        broker = self.coordinator_broker
        self.coordinator_down = True
        self.counts["failovers"] += 1
        successor = (broker + 1) % BROKERS
        self.trace.add(f"fault coordinator-failover broker {broker} killed ({lost} records lost), broker "
                       f"{successor} leads, broker {broker} back in {duration_ms} ms")
        self._elect_coordinator(successor)

        def back() -> None:
            self.coordinator_down = False

        self.at(self.now_ms + duration_ms, back)

    def decided(self, transactional_id: str, value: TxnValue) -> None:
        """A ``__transaction_state`` write of ``transactional_id`` is committed."""
        if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            commit = value.state == TxnState.PREPARE_COMMIT
            self.counts["commits" if commit else "aborts"] += 1
            self.trace.add(f"decided {transactional_id} {value.state.name} producer {value.producer_id} epoch "
                           f"{value.producer_epoch} on {list(value.partitions)}")
            self.fail(self.history.decided(value.producer_id, value.producer_epoch, commit))

    def write_marker(self, topic_partition: tuple[str, int], value: TxnValue, coordinator_epoch: int,
                     answer: Callable[[ErrorCode], None]) -> None:
        """WriteTxnMarkers to one partition's leader, its answer back after the network's latency."""
        latency = self.streams["latency"]
        partition = self._by_name[topic_partition]
        batch = marker_batch(value, coordinator_epoch, self.wall_ms())

        def arrive() -> None:
            partition.append(batch, lambda error, _offset: self.at(self.now_ms + latency.randint(*LATENCY_MS),
                                                                   answer, error))

        self.at(self.now_ms + latency.randint(*LATENCY_MS), arrive)

    # ----------------------------------------------------------------- the network

    def send(self, client: SimClient, request: Request, answered: Callable[[Any], None]) -> None:
        """``client``'s request reaches its broker after the latency (more under request-delay); the
        answer comes back the same way unless lost-answers drops it; one connection keeps its order."""
        connection, deliver = request
        latency = self.streams["latency"]
        delay = latency.randint(*LATENCY_MS)
        extra = latency.randint(0, REQUEST_DELAY_MS)
        if client.delayed_until_ms > self.now_ms:
            delay += extra
        arrival, answer_ms = client.connections.get(connection, (0, 0))
        arrival = max(arrival, self.now_ms + delay)
        client.connections[connection] = (arrival, answer_ms)

        def back(answer: object) -> None:
            if client.losing_until_ms > self.now_ms:
                return
            sent, last = client.connections[connection]
            last = max(last, self.now_ms + latency.randint(*LATENCY_MS))
            client.connections[connection] = (sent, last)
            self.at(last, answered, answer)

        self.at(arrival, deliver, back)

    def to_coordinator(self, call: Callable[[Any, Callable[[Any], None]], None],
                       error: Callable[[ErrorCode], Any]) -> Request:
        """A request the coordinator answers (FindCoordinator folded in: it goes to the current one)."""
        def deliver(reply: Callable[[Any], None]) -> None:
            coordinator = self.coordinator
            if coordinator is None or not coordinator.loaded:
                reply(error(ErrorCode.coordinator_load_in_progress))
            else:
                call(coordinator, reply)

        return "coordinator", deliver

    def produce(self, partition: tuple[str, int], data: bytes, transactional_id: str | None) -> Request:
        """A Produce of ``data`` (acks -1), a transactional one verified first (produce.py's ``_verify``
        through ``RoutedVerifier``)."""
        target = self._by_name[partition]

        def deliver(reply: Callable[[Any], None]) -> None:
            guard = None
            if transactional_id is not None:
                error, guard = self._verify(transactional_id, data, partition)
                if error != ErrorCode.none:
                    reply((error, -1))
                    return
            target.append(data, lambda e, offset: reply((e, offset)), guard)

        return repr(partition), deliver

    def _verify(self, transactional_id: str, data: bytes,
                partition: tuple[str, int]) -> tuple[ErrorCode, VerificationGuard | None]:
        """``verify_partition``'s answer: the error, and the guard the append presents (§19.5.7)."""
        header = read_header(data)
        guard = self._by_name[partition].states.start_verification(header.producer_id, header.producer_epoch)
        if guard is None:
            return ErrorCode.none, None  # verified at the transaction's first batch here
        coordinator = self.coordinator
        if coordinator is None or not coordinator.loaded:
            return ErrorCode.not_coordinator, guard
        return coordinator.verify(transactional_id, header.producer_id, header.producer_epoch, partition), guard

    def commit_offset(self, source: int, producer_id: int, producer_epoch: int, transactional_id: str,
                      offset: int) -> Request:
        """TxnOffsetCommit: the group coordinator writes the offset as the producer's transactional batch,
        numbered by the partition's producer state (§19.5.4)."""
        target = self._by_name[("__consumer_offsets", source)]

        def deliver(reply: Callable[[Any], None]) -> None:
            sequence = target.states.next_base_sequence(producer_id, producer_epoch)
            data = build_batch([Record(0, 0, GROUP_KEY, str(offset).encode())], producer_id=producer_id,
                               producer_epoch=producer_epoch, base_sequence=sequence,
                               control_attributes=TRANSACTIONAL, timestamp_ms=0)
            error, guard = self._verify(transactional_id, data, target.name)
            if error != ErrorCode.none:
                reply((error, -1))
            else:
                target.append(data, lambda e, at: reply((e, at)), guard)

        return repr(target.name), deliver

    def committed_offset(self, source: int) -> Request:
        """OffsetFetch of the copier's group: the last offset its offsets partition's read_committed view
        shows (NOT_LEADER_OR_FOLLOWER while that partition has no leader)."""
        def deliver(reply: Callable[[Any], None]) -> None:
            target = self._by_name[("__consumer_offsets", source)]
            reply(ErrorCode.not_leader_or_follower if target.electing else self._committed_position(source))

        return repr(("__consumer_offsets", source)), deliver

    def _committed_position(self, source: int) -> int:
        records, _ = self._by_name[("__consumer_offsets", source)].read(0, True)
        return int(records[-1][1]) if records else 0

    def read(self, partition: int, offset: int, committed: bool) -> Request:
        target = self.partitions[partition]

        def deliver(reply: Callable[[Any], None]) -> None:
            reply(ErrorCode.not_leader_or_follower if target.electing else target.read(offset, committed))

        return repr(target.name), deliver

    # ----------------------------------------------------------------- what clients report

    def restart_copier(self, source: int, zombie: bool) -> None:
        """The next incarnation of copier ``source`` (the same transactional id)."""
        self.incarnations[source] += 1
        copier = SimCopier(self, source, self.incarnations[source], self.streams["copier"])
        if source < len(self.copiers):
            self.copiers[source] = copier
            self.clients[source] = copier
        else:
            self.copiers.append(copier)
        self.trace.add(f"{copier.name} starts")
        copier.start()

    def fenced(self, client: Any) -> None:
        self.counts["fenced"] += 1
        if isinstance(client, SimCopier) and self.copiers[client.source] is client:
            self.at(self.now_ms + RESTART_MS, self.restart_copier, client.source, False)

    def began(self, producer_id: int, epoch: int, label: str) -> None:
        self.history.begin(producer_id, epoch, label)

    def acknowledged(self, label: str, partition: int, values: list[bytes]) -> None:
        self.history.acknowledged(label, partition, values)

    def commit_acknowledged(self, label: str) -> None:
        self.history.commit_acknowledged(label)

    def shown(self, reader: Any, partition: int, records: list[tuple[int, bytes]]) -> None:
        if reader is not self.reader:
            self.uncommitted_seen.update(v for _, v in records)
            return
        self.counts["records_read"] += len(records)
        for offset, value in records:
            self.fail(self.history.read(partition, offset, value))

    # ----------------------------------------------------------------- faults

    def _nemesis_round(self) -> None:
        """One fault; each round draws once from each of its streams whatever happens."""
        if self.now_ms >= self.duration_ms:
            return
        fault = FAULT_TABLE[self.streams["fault"].choice(self.fault_names)]
        victim = self.streams["victim"].randrange(1 << 16)
        low, high = fault.durations_ms
        duration_ms = low + int((high - low) * self.streams["duration"].random())
        self.counts["faults"] += 1
        fault.inject(self, victim, duration_ms)
        self.at(self.now_ms + self.streams["timing"].randint(*FAULT_GAP_MS), self._nemesis_round)


@dataclass
class TransactionsResult(WorldResult):
    """The outcome of one seed of the transactions world; ``counts``: what the world did."""

    counts: dict[str, int] = field(default_factory=dict)


def run_seed(seed: int, *, duration_s: float = DURATION_MS / 1000, faults: tuple[str, ...] = FAULTS,
             plant: str | None = None) -> TransactionsResult:
    """Run one seed of the transactions world (``duration_s`` of load and faults, then ``SETTLE_MS``
    without) and judge it."""
    duration_ms = int(duration_s * 1000)
    world = TransactionsWorld(seed, duration_ms, faults)
    context = judge(world, world.run, planted(plant))
    violation = world.violation
    return TransactionsResult(seed, violation is None, world.trace.digest, world.now_ms / 1000, violation, context,
                              world.trace.lines, replay_command("transactions", seed, duration_ms, faults, FAULTS,
                                                                plant), dict(world.counts))
