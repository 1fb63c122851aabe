"""The Kafka-groups world: one Kafka-protocol consumer group under faults, on a virtual clock
(docs/simulation.md, "Kafka-protocol groups").

Three brokers replicate the group's ``__consumer_offsets`` partition
(``kafka_coordinator.ReplicatedLog``); its leader's ``SimCoordinator`` runs the
real ``Group`` state machine.  Three members (``kafka_members.SimMember``)
consume a topic of ``PARTITIONS`` partitions whose log ends grow, and commit.
A nemesis draws faults from ``FAULT_TABLE``; ``kafka_group_promises`` states
what must hold.  Everything is a function of the seed: the clock is a heap of
events in ms, every random choice comes from a ``random.Random`` per kind of
choice (``determinism.derived_random``), and the member ids the real
coordinator makes come from a seeded stream too.  ``run_seed(seed)`` runs one
seed; its ``report()`` says what broke, the events before it, and the command
that replays it (``trikafka sim --world kafka-groups``).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.groups.group import Group, GroupSettings, GroupState
from trikafka.broker.kafka.groups.member import JoinAnswer, SyncAnswer

from .checker import Violation
from .determinism import seeded_member_ids
from .event_world import EventWorld, WorldResult, judge, replay_command
from .kafka_coordinator import ReplicatedLog, SimCoordinator
from .kafka_group_faults import FAULT_TABLE, FAULTS, MESSAGE_DELAY_MS, parse_faults
from .kafka_group_promises import SETTLES, GroupPromises
from .kafka_members import SimMember
from .plants import planted

__all__ = ["FAULTS", "FAULT_TABLE", "KafkaGroupsResult", "KafkaGroupsWorld", "parse_faults", "run_seed"]

GROUP, TOPIC = "kgsim", "events"
BROKERS, MEMBERS, PARTITIONS = 3, 3, 6
DURATION_MS, SETTLE_MS = 60_000, 15_000
WALL_EPOCH_MS = 1_700_000_000_000  # the wall clock the records carry: the virtual clock from this instant
SETTINGS = GroupSettings(initial_rebalance_delay_ms=300, min_session_timeout_ms=1000)
LATENCY_MS = (1, 20)
REPLICATION_MS = (1, 30)
LOAD_MS = (5, 200)
PRODUCE_EVERY_MS = 50
FAULT_GAP_MS = (300, 3000)
STREAMS = ("fault", "victim", "timing", "duration", "latency", "produce", "replication", "load", "ids")


class KafkaGroupsWorld(EventWorld):
    """Everything one seed runs: the clock, the brokers, the coordinator, the members, the nemesis."""

    def __init__(self, seed: int, duration_ms: int, faults: tuple[str, ...]):
        super().__init__(seed, duration_ms, faults, STREAMS)
        self.group_id, self.topic, self.partitions = GROUP, TOPIC, PARTITIONS
        self.log_ends = [0] * PARTITIONS
        self.log = ReplicatedLog()
        self.leader = 0
        self.down: set[int] = set()
        self.coordinator: SimCoordinator | None = None
        self.members: list[SimMember] = []
        self.incarnations = [0] * MEMBERS
        self.frozen: set[int] = set()
        self.names: dict[str, str] = {}  # member id -> member name in the trace
        self.outstanding: dict[int, tuple[SimCoordinator, Callable[[], None]]] = {}  # request -> its drop
        self.promises = GroupPromises()
        self.faults = self.failovers = self.acked_commits = 0
        self._requests = itertools.count()

    # ----------------------------------------------------------------- the run

    def run(self) -> None:
        self._elect(0)
        for slot in range(MEMBERS):
            self.start_member(slot)
        self.at(PRODUCE_EVERY_MS, self._produce)
        self.at(0, self._nemesis)
        self.run_until(self.duration_ms + SETTLE_MS)
        if self.violation is None:
            self.fail(self._settled())

    def _settled(self) -> Violation | None:
        """Promise 5: ``SETTLE_MS`` after the last fault, every live member is in the group's current
        generation, the group is Stable, and its members own every partition."""
        coordinator = self.coordinator
        group = coordinator.partition.group(GROUP) if coordinator is not None and coordinator.loaded else None
        if group is None:
            return Violation(SETTLES, "no coordinator serves the group")
        live = {m.member_id: m for m in self.members if m.alive}
        owned = sorted(p for m in live.values() for p in m.owned)
        stale = [m.name for m in live.values() if not m.stable or m.generation != group.generation]
        if group.state is not GroupState.STABLE or set(group.members) != set(live) or stale \
                or owned != list(range(PARTITIONS)):
            return Violation(SETTLES, f"group {group.state.value} at generation {group.generation} with "
                             f"{sorted(self.label(m) for m in group.members)}; members behind: {stale}; "
                             f"partitions owned: {owned}")
        self.trace.add(f"settled: generation {group.generation}, {len(live)} members")
        return None

    def wall_ms(self) -> int:
        return WALL_EPOCH_MS + self.now_ms

    def replication_delay_ms(self) -> int:
        return self.streams["replication"].randint(*REPLICATION_MS)

    # ----------------------------------------------------------------- brokers and the coordinator

    def _elect(self, broker: int) -> None:
        self.leader = broker
        coordinator = self.coordinator = SimCoordinator(self, broker, self.log, SETTINGS)
        load_ms = self.streams["load"].randint(*LOAD_MS)

        def load() -> None:
            if coordinator is not self.coordinator:
                return
            count = coordinator.load()
            fetched = coordinator.fetch(range(PARTITIONS))
            self.trace.add(f"coordinator {broker} loaded {count} records at leader epoch {self.log.leader_epoch}: "
                           f"offsets {fetched}")
            self.fail(self.promises.loaded(broker, fetched))

        self.at(self.now_ms + load_ms, load)

    def failover(self, duration_ms: int) -> None:
        old = self.coordinator
        assert old is not None
        broker = self.leader
        old.alive = False
        self.down.add(broker)
        lost = self.log.crash_leader()
        self.failovers += 1
        successor = next(b for b in range(broker + 1, broker + BROKERS) if b % BROKERS not in self.down) % BROKERS
        self.trace.add(f"fault coordinator-failover broker {broker} killed ({lost} records lost), broker "
                       f"{successor} leads, back in {duration_ms} ms")
        for request, (coordinator, drop) in list(self.outstanding.items()):
            if coordinator is old:
                del self.outstanding[request]
                drop()
        self._elect(successor)

        def back() -> None:
            self.down.discard(broker)
            self.trace.add(f"healed broker {broker}")

        self.at(self.now_ms + duration_ms, back)

    # ----------------------------------------------------------------- the network

    def send(self, member: SimMember, kind: str, request: object, answered: Callable[[object], None]) -> None:
        """``member``'s request reaches its coordinator after the network's latency (longer under
        message-delay); its answer comes back the same way.  A member's requests, and the answers,
        keep their order (one TCP connection per process: a pause does not close it)."""
        latency = self.streams["latency"]
        delay = latency.randint(*LATENCY_MS)
        extra = latency.randint(0, MESSAGE_DELAY_MS)
        if member.delayed_until_ms > self.now_ms:
            delay += extra
        target = member.coordinator
        connection = member.connection

        def back(answer: object) -> None:
            connection.answer_ms = max(connection.answer_ms, self.now_ms + latency.randint(*LATENCY_MS))
            self.at(connection.answer_ms, answered, answer)

        connection.request_ms = max(connection.request_ms, self.now_ms + delay)
        self.at(connection.request_ms, self._arrive, kind, request, target, back)

    def _arrive(self, kind: str, request: object, target: int | None, back: Callable[[object], None]) -> None:
        if kind == "find":
            back(self.leader if self.leader not in self.down else ErrorCode.coordinator_not_available)
            return
        coordinator = self.coordinator
        if target in self.down:
            back(_error(kind, request, ErrorCode.network_exception))
        elif coordinator is None or target != coordinator.broker:
            back(_error(kind, request, ErrorCode.not_coordinator))
        elif not coordinator.loaded:
            back(_error(kind, request, ErrorCode.coordinator_load_in_progress))
        else:
            number = next(self._requests)

            def reply(answer: object) -> None:
                if self.outstanding.pop(number, None) is not None:
                    back(answer)

            self.outstanding[number] = (coordinator, lambda: back(_error(kind, request, ErrorCode.network_exception)))
            _HANDLERS[kind](coordinator, request, reply)

    # ----------------------------------------------------------------- members and the topic

    def start_member(self, slot: int) -> None:
        self.incarnations[slot] += 1
        member = SimMember(self, slot, self.incarnations[slot])
        if slot < len(self.members):
            self.members[slot] = member
        else:
            self.members.append(member)
        self.trace.add(f"{member.name} starts")
        member.start()

    def name_member(self, member_id: str, name: str) -> None:
        self.names[member_id] = name

    def label(self, member_id: str) -> str:
        return self.names.get(member_id, member_id)

    def _produce(self) -> None:
        produce = self.streams["produce"]
        self.log_ends[produce.randrange(PARTITIONS)] += produce.randint(1, 3)
        if self.now_ms < self.duration_ms:
            self.at(self.now_ms + PRODUCE_EVERY_MS, self._produce)

    def owns(self, member: SimMember, generation: int, partitions: tuple[int, ...]) -> None:
        self.trace.add(f"{member.name} synced generation {generation}: partitions {list(partitions)}")
        self.fail(self.promises.own(member.name, generation, partitions))

    def consumed(self, member: SimMember, partition: int, start: int, end: int) -> None:
        self.promises.consume(partition, start, end)

    def acknowledged(self, member: SimMember, generation: int, offsets: dict[int, int]) -> None:
        self.acked_commits += 1
        self.trace.add(f"{member.name} commit acknowledged, generation {generation}: {offsets}")
        self.promises.acknowledge(offsets)

    def committed(self, group: Group, partitions: list[int]) -> None:
        """The coordinator applied the committed records of ``partitions``."""
        for partition in partitions:
            found = group.offsets.get((TOPIC, partition))
            if found is not None:
                self.fail(self.promises.apply(partition, found.value.offset))

    # ----------------------------------------------------------------- faults

    def _nemesis(self) -> None:
        self.at(self.now_ms + self.streams["timing"].randint(*FAULT_GAP_MS), self._nemesis_round)

    def _nemesis_round(self) -> None:
        """One fault on a member that is running; each round draws once from each of its streams
        whatever the kind and whether the fault starts, so the streams stay in step."""
        if self.now_ms >= self.duration_ms:
            return
        fault = FAULT_TABLE[self.streams["fault"].choice(self.fault_names)]
        slot = self.streams["victim"].randrange(MEMBERS)
        duration = self.streams["duration"]
        low, high = fault.durations_ms
        duration_ms = low + int((high - low) * duration.random())
        if self.members[slot].alive and slot not in self.frozen:
            self.faults += 1
            fault.inject(self, slot, duration_ms)
        self._nemesis()


def _error(kind: str, request: object, error: ErrorCode) -> object:
    """The answer of a request of ``kind`` that failed with ``error`` before its coordinator handled it."""
    if kind == "join":
        return JoinAnswer(error, getattr(request, "member_id", ""))
    if kind == "sync":
        return SyncAnswer(error)
    if kind == "commit":
        assert isinstance(request, tuple)
        return {p: error for p in request[2]}
    return error


def _fetch(coordinator: SimCoordinator, request: Any, reply: Callable[[object], None]) -> None:
    reply(coordinator.fetch(request))


# kind -> how the coordinator handles it (Any: each kind's request tuple, as the member sends it)
_HANDLERS: dict[str, Callable[[SimCoordinator, Any, Callable[[object], None]], None]] = {
    "join": lambda c, r, reply: c.join(r, reply),
    "sync": lambda c, r, reply: c.sync(r[0], r[1], r[2], r[3], reply),
    "heartbeat": lambda c, r, reply: c.heartbeat(r[0], r[1], reply),
    "commit": lambda c, r, reply: c.commit(r[0], r[1], r[2], reply),
    "fetch": _fetch,
    "leave": lambda c, r, reply: c.leave(r, reply),
}


@dataclass
class KafkaGroupsResult(WorldResult):
    """The outcome of one seed of the Kafka-groups world."""

    faults: int = 0
    failovers: int = 0
    acked_commits: int = 0


def run_seed(seed: int, *, duration_s: float = DURATION_MS / 1000, faults: tuple[str, ...] = FAULTS,
             plant: str | None = None) -> KafkaGroupsResult:
    """Run one seed of the Kafka-groups world (``duration_s`` of faults, then ``SETTLE_MS`` without) and judge it."""
    duration_ms = int(duration_s * 1000)
    world = KafkaGroupsWorld(seed, duration_ms, faults)
    inside = contextlib.ExitStack()
    inside.enter_context(seeded_member_ids(world.streams["ids"]))
    inside.enter_context(planted(plant))
    context = judge(world, world.run, inside)
    violation = world.violation
    return KafkaGroupsResult(seed, violation is None, world.trace.digest, world.now_ms / 1000, violation, context,
                             world.trace.lines, replay_command("kafka-groups", seed, duration_ms, faults, FAULTS, plant),
                             world.faults, world.failovers, world.acked_commits)
