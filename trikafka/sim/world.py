"""One seed, one simulated cluster: the real brokers under faults on a virtual clock.

``run_seed`` runs three real brokers (``trikafka.testing.open_cluster``: the
real broker, replica manager, controller and follower tasks) on fake file
systems, a fake ZooKeeper and an in-memory network, in one Trio run on a
``MockClock`` whose scheduling is a function of the seed
(``determinism.py``).  A producer writes with acks -1, a consumer reads
committed bytes from any replica, a consumer group reads the topic
(``groups.py``), and a nemesis injects the named faults (``faults.py``);
then every fault heals, the cluster settles and ``checker`` judges the end
state.  Every random choice comes from the seed's ``Streams`` (one stream per
kind of choice); the trace of events hashes to the same digest on every run
of the seed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ContextManager, Iterator

import trio

from trikafka.client import ClientError, connect
from trikafka.testing import InProcessCluster, open_cluster
from trikafka.zk.client import ZooKeeperClient
from trikafka.wire import ErrorCode, RemoteProtocolError, build_message_set
from trikafka.wire.reading import parse_entries
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

from .checker import Ledger, Violation, check_end_state
from .determinism import Streams, Trace, deterministic_trio, virtual_clock
from .faults import FAULT_TABLE, FAULTS, Fault
from .groups import MEMBERS, GroupMembers
from .plants import planted

TOPIC = "sim"
BROKERS, PARTITIONS, REPLICATION_FACTOR = 3, 2, 3  # the default shape of the world
PRODUCE_RATE_PER_S = 20.0
FAULT_GAP_S = (0.2, 2.0)
MAX_LATENCY_S = 0.03
SETTLE_S = 60.0  # after healing, simulated: session expiries, elections and catch-up fit in it
REQUEST_TIMEOUT_S = 5.0
Address = tuple[str, int]
Hook = Callable[[Any], Awaitable[None]]  # awaited before a request goes on (Any: every decoded request type)
FETCH_BYTES = 64 * 1024
# Allocations between two young-generation collections while a seed runs (Python's default is 700):
# a seed allocates millions of short-lived objects, most freed by their reference count, and at the
# default a tenth of its CPU went to collections that found little (each older one walking the
# cluster's live objects); at this threshold they take about 1%.
SEED_GC_THRESHOLD = 20_000


@dataclass
class SimResult:
    """The outcome of one seed."""

    seed: int
    ok: bool
    digest: str
    simulated_s: float
    violation: Violation | None = None
    context: list[str] = field(default_factory=list)  # the trace just before the violation
    acked: int = 0
    faults: int = 0
    delivered: int = 0  # messages handed out to the consumer group
    trace_lines: list[str] = field(default_factory=list)
    replay: str = ""  # the command that runs this seed again, exactly

    def report(self) -> str:
        """What a failed seed prints: the promise, the events before it, its replay command and trace digest."""
        if self.violation is None:
            return f"seed {self.seed}: ok trace {self.digest}"
        return "\n".join([f"seed {self.seed}: BROKEN {self.violation.promise}: {self.violation.detail}",
                          *(f"  {line}" for line in self.context),
                          f"  replay: {self.replay}", f"  trace {self.digest}"])


def replay_command(seed: int, *, duration_s: float, faults: tuple[str, ...], plant: str | None, brokers: int = BROKERS,
                   partitions: int = PARTITIONS, world: str = "cluster", every_fault: tuple[str, ...] = FAULTS) -> str:
    """The ``trikafka sim`` command line that runs this seed of ``world`` with these settings
    (``every_fault``: the world's default faults, left out of the line)."""
    named = "" if world == "cluster" else f" --world {world}"
    parts = [f"trikafka sim{named} --seed {seed} --duration-s {duration_s:g}"]
    if faults != every_fault:
        parts.append(f"--faults {','.join(faults)}")
    if plant is not None:
        parts.append(f"--plant {plant}")
    if (brokers, partitions) != (BROKERS, PARTITIONS):
        parts.append(f"--brokers {brokers} --partitions {partitions}")
    return " ".join(parts)


def replica_assignment(brokers: int, partitions: int) -> tuple[tuple[int, ...], ...]:
    """Partition p's replicas: ``REPLICATION_FACTOR`` brokers from p on, round the ring."""
    assert brokers >= REPLICATION_FACTOR, "the promises assume three replicas (one may lose power)"
    return tuple(tuple((p + i) % brokers for i in range(REPLICATION_FACTOR)) for p in range(partitions))


def run_seed(seed: int, *, duration_s: float = 30.0, faults: tuple[str, ...] = FAULTS,
             plant: str | None = None, brokers: int = BROKERS, partitions: int = PARTITIONS) -> SimResult:
    """Run one seed (blocking: its own ``trio.run``) and judge it; ``brokers`` and
    ``partitions`` change the world's shape (the default is the one CI runs)."""
    trace = Trace()
    world = ClusterWorld(seed, duration_s, faults, trace, replica_assignment(brokers, partitions))
    simulated_s, context = run_world(world, plant)
    return SimResult(seed, world.violation is None, trace.digest, simulated_s, world.violation, context,
                     len(world.ledger.acked), world.faults, len(world.members.ledger.delivered), trace.lines,
                     replay_command(seed, duration_s=duration_s, faults=faults, plant=plant, brokers=brokers,
                                    partitions=partitions))


def run_world(world: ClusterWorld, plant: str | None, *inside: ContextManager[Any]) -> tuple[float, list[str]]:
    """Run ``world`` (blocking: its own ``trio.run`` on a mock clock, Trio's scheduling seeded by its
    seed) with the planted bug ``plant`` and the context managers ``inside`` entered; a crash of the
    simulation itself is a violation too.  (Simulated seconds, the trace around the violation and the
    crash's traceback.)"""
    clock = virtual_clock()
    previous = logging.getLogger("trikafka").level
    logging.getLogger("trikafka").setLevel(logging.CRITICAL + 1)  # brokers killed mid-task log their failure: noise here
    trace = world.trace
    crash: list[str] = []
    try:
        with deterministic_trio(world.seed), planted(plant), fewer_collections(), contextlib.ExitStack() as stack:
            for manager in inside:
                stack.enter_context(manager)
            trio.run(world.run, clock=clock)
    except Exception as exc:  # the simulation itself failed: a failed seed too, replayable like the rest
        world.violation = world.violation or Violation("the simulation runs to its end", repr(exc), len(trace.lines))
        crash = [line for chunk in traceback.format_exception(exc) for line in chunk.rstrip().splitlines()]
    finally:
        logging.getLogger("trikafka").setLevel(previous)
    violation = world.violation
    context = trace.around(violation.trace_index if violation.trace_index >= 0 else len(trace.lines)) \
        if violation else []
    return clock.current_time(), context + crash


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """The garbage collector's young generation collected every ``SEED_GC_THRESHOLD`` allocations
    inside the block (the older generations' ratios as they were), then as before."""
    saved = gc.get_threshold()
    gc.set_threshold(SEED_GC_THRESHOLD, *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)


class ClusterWorld:
    """Everything one seed runs."""

    fault_table: dict[str, Fault] = FAULT_TABLE  # the kinds the nemesis may draw (a subclass adds its own)

    def __init__(self, seed: int, duration_s: float, faults: tuple[str, ...], trace: Trace,
                 replicas: tuple[tuple[int, ...], ...] = replica_assignment(BROKERS, PARTITIONS)):
        self.streams = Streams(seed)
        self.replicas = replicas
        self.brokers, self.partitions = 1 + max(max(r) for r in replicas), len(replicas)
        self.seed, self.duration_s, self.fault_names, self.trace = seed, duration_s, faults, trace
        self.ledger = Ledger()
        self.violation: Violation | None = None
        self.faults = 0
        self.down: set[int] = set()
        self.stalls: list[trio.Event] = []  # released at the latest when everything heals
        self.busy: dict[int, list[str]] = {}  # brokers under a fault right now -> the faults
        self.topic = TOPIC
        self.topics: tuple[str, ...] = (TOPIC,)
        self.cluster: InProcessCluster  # set once run() opened it
        self.zk: ZooKeeperClient
        self.members = GroupMembers(self, TOPIC)

    def fail(self, violation: Violation | None) -> None:
        if violation is not None and self.violation is None:
            self.trace.add(f"VIOLATION {violation.promise}: {violation.detail}")
            self.violation = Violation(violation.promise, violation.detail, len(self.trace.lines) - 1)

    async def run(self) -> None:
        # The 0.7 world: its brokers serve no Kafka listener (kafka_port=None), whose tasks would
        # change every seed's course (the seeds that catch its plants, its speed).
        async with open_cluster(self.brokers, seed=self.seed, log_flush_interval=self.streams.config.choice((1, 4, 50)),
                                survive_failures=True, loopback=False, kafka_port=None) as cluster, \
                cluster.coordinator() as zk:
            self.cluster, self.zk = cluster, zk
            config = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "1000"}
            await create_topic(zk, TOPIC, TopicAssignment(self.replicas, config),
                               [PartitionState(r[0], 0, r, 0) for r in self.replicas])
            self.trace.add(f"topic {TOPIC}: replicas {self.replicas}")
            self._add_latency()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_leaders)
                nursery.start_soon(self._produce)
                nursery.start_soon(self._consume)
                nursery.start_soon(self.members.run)
                nursery.start_soon(self._nemesis)
                await trio.sleep(self.duration_s)
                nursery.cancel_scope.cancel()
            await self._heal()
            if self.violation is None:
                await self._judge()

    # ----------------------------------------------------------------- observers and clients

    def _hosted(self, broker: int, partition: int, topic: str = TOPIC):
        replicas = self.cluster.brokers[broker].broker.replicas
        return replicas.hosted.get((topic, partition)) if replicas is not None else None

    async def _watch_leaders(self) -> None:
        while True:
            for broker in range(self.brokers):
                if broker in self.down:
                    continue
                for partition in range(self.partitions):
                    hosted = self._hosted(broker, partition)
                    if hosted is not None and hosted.leader is not None:
                        self.fail(self.ledger.leading(partition, hosted.leader_epoch, broker))
            await trio.sleep(0.01)

    async def _leader(self, partition: int) -> int:
        return (await read_state(self.zk, TOPIC, partition)).state.leader

    async def _produce(self) -> None:
        for seq in range(10**9):
            await trio.sleep(self.streams.produce.expovariate(PRODUCE_RATE_PER_S))
            partition = self.streams.produce.randrange(self.partitions)
            leader = await self._leader(partition)
            if leader < 0 or leader in self.down:
                continue
            data = build_message_set([b"s%d.%d.%d" % (self.seed, seq, i) for i in range(self.streams.produce.randint(1, 3))])
            member = self.cluster.brokers[leader]
            outcome = "timeout"
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                try:
                    async with await connect(member.host, member.port, open_stream=self.cluster.open_stream) as conn:
                        [result] = await conn.produce_acked([(TOPIC, partition, data)], acks=-1, timeout_ms=2000)
                    if result.error == ErrorCode.NO_ERROR:
                        self.fail(self.ledger.ack(partition, result.base_offset, data))
                        outcome = f"acked @{result.base_offset}+{len(data)}"
                    else:
                        outcome = result.error.name
                except (ClientError, OSError, RemoteProtocolError, trio.BrokenResourceError) as exc:
                    outcome = type(exc).__name__
            self.trace.add(f"produce p{partition} to {leader}: {outcome}")

    async def _consume(self) -> None:
        offsets = [0] * self.partitions
        while True:
            await trio.sleep(0.05)
            partition = self.streams.consume.randrange(self.partitions)
            broker = self.streams.consume.randrange(self.brokers)
            if broker in self.down:
                continue
            member = self.cluster.brokers[broker]
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                try:
                    async with await connect(member.host, member.port, open_stream=self.cluster.open_stream) as conn:
                        result = await conn.fetch(TOPIC, partition, offsets[partition], FETCH_BYTES)
                except (ClientError, OSError, RemoteProtocolError, trio.BrokenResourceError):
                    continue
                if result.error != ErrorCode.NO_ERROR or not result.data:
                    continue
                data = bytes(result.data)
                parsed = parse_entries(data, offsets[partition])
                for entry in parsed.entries:
                    start = entry.offset - offsets[partition]
                    self.fail(self.ledger.see(partition, entry.offset, data[start:start + entry.next_offset - entry.offset]))
                if parsed.entries:
                    self.trace.add(f"consume p{partition} from {broker}: {offsets[partition]}.."
                                   f"{parsed.entries[-1].next_offset}")
                    offsets[partition] = parsed.entries[-1].next_offset

    # ----------------------------------------------------------------- faults

    async def _nemesis(self) -> None:
        """Start faults at random moments; they overlap, so two brokers may be out at once.

        Each round draws once from each of its streams (timing, fault, victim, and two from
        duration), whatever the kind and whether the fault starts, so the streams stay in step."""
        async with trio.open_nursery() as faults:
            while True:
                await trio.sleep(self.streams.timing.uniform(*FAULT_GAP_S))
                fault = self.fault_table[self.streams.fault.choice(self.fault_names)]
                victim = self.streams.victim.randrange(self.brokers)
                step, scale = self.streams.duration.random(), self.streams.duration.random()
                duration_s = fault.duration_s(step, scale)
                if fault.on_member:
                    self.faults += 1
                    faults.start_soon(fault.inject, self, victim % MEMBERS, duration_s)
                    continue
                current = self.busy.get(victim, [])
                kills_a_paused_process = fault.hits_a_stalled_broker and current == ["stall"]
                if victim in self.down or (current and not kills_a_paused_process):
                    continue  # otherwise one fault per broker at a time
                if fault.may_start is not None and not await fault.may_start(self):
                    continue
                self.faults += 1
                self.busy.setdefault(victim, []).append(fault.name)
                faults.start_soon(self._fault, fault, victim, duration_s)

    async def _fault(self, fault: Fault, broker: int, duration_s: float) -> None:
        self.trace.add(f"fault {fault.name} broker {broker} for {duration_s:.3f} s")
        try:
            await fault.inject(self, broker, duration_s)
        finally:
            self.busy[broker].remove(fault.name)
        self.trace.add(f"healed {fault.name} broker {broker}")

    async def restart(self, broker: int) -> None:
        """Start ``broker`` again (it is stopped), on the same address: the hooks there, the world's
        latency among them, hold its requests as before."""
        # A start that began runs to its end (the end of the run does not cut it short: a start
        # stopped half-way would shut down cleanly and vouch for a tail it never re-copied).
        with trio.CancelScope(shield=True):
            await self.cluster.restart(broker)
        self.down.discard(broker)

    async def stall(self, duration_s: float, matches: Callable[[Address, Any], bool],
                    delay_s: Callable[[], float] | None = None) -> None:
        """Hold every request ``matches(address, request)`` selects for ``duration_s``; given ``delay_s``,
        hold each for ``delay_s()`` instead (a slow broker), while the ``duration_s`` lasts."""
        released = trio.Event()
        self.stalls.append(released)

        def hook_for(address: Address) -> Hook:
            async def hook(request: Any) -> None:
                if not matches(address, request) or released.is_set():
                    return
                if delay_s is None:
                    await released.wait()
                else:  # (the window's end, or healing, lets a held request go on at once)
                    with trio.move_on_after(delay_s()):
                        await released.wait()
            return hook

        for member in self.cluster.brokers:
            self._push_hook(member.address, hook_for(member.address))
        try:
            await trio.sleep(duration_s)
        finally:
            released.set()

    def _add_latency(self) -> None:
        """Every request takes 0 to ``MAX_LATENCY_S`` to arrive (a broker restarted later keeps its
        address, and so the hook)."""
        async def latency(_request: Any) -> None:
            await trio.sleep(self.streams.latency.uniform(0, MAX_LATENCY_S))

        for member in self.cluster.brokers:
            self._push_hook(member.address, latency)

    def _push_hook(self, address: Address, hook: Hook) -> None:
        previous = self.cluster.network.before_request.get(address)

        async def chained(request: Any) -> None:
            await hook(request)
            if previous is not None:
                await previous(request)

        self.cluster.network.before_request[address] = chained

    async def _heal(self) -> None:
        for released in self.stalls:
            released.set()
        for broker in sorted(self.down):
            await self.restart(broker)
        self.trace.add("healed everything")

    # ----------------------------------------------------------------- the end state

    async def _settled(self, topic: str = TOPIC) -> tuple[dict, dict, dict] | None:
        """Each partition of ``topic`` led, its ISR full, every replica at the leader's end and the high
        watermark there: (leaders, ISRs, high watermarks), else None."""
        leaders, isrs, hws = {}, {}, {}
        for partition, replicas in enumerate(self.replicas):
            state = (await read_state(self.zk, topic, partition)).state
            hosted = self._hosted(state.leader, partition, topic) if state.leader >= 0 else None
            if hosted is None or hosted.leader is None or len(state.isr) < len(replicas):
                return None
            ends = {h.log.end_offset for b in replicas if (h := self._hosted(b, partition, topic))}
            if ends != {hosted.log.end_offset} or hosted.high_watermark != hosted.log.end_offset:
                return None
            leaders[partition], isrs[partition], hws[partition] = state.leader, state.isr, hosted.high_watermark
        return leaders, isrs, hws

    async def _judge(self) -> None:
        with trio.move_on_after(SETTLE_S):
            while (settled := await self._settled()) is None:
                await trio.sleep(0.1)
        if settled is None:
            self.fail(Violation("the cluster heals", f"not settled {SETTLE_S:.0f} s after healing"))
            return
        leaders, isrs, hws = settled
        logs = {p: {b: self.cluster.brokers[b].stored(TOPIC, p) for b in replicas} for p, replicas in enumerate(self.replicas)}
        self.trace.add(f"settled: leaders {leaders}, high watermarks {hws}, {len(self.ledger.acked)} acked")
        self.fail(check_end_state(self.ledger, logs, leaders, isrs, hws))
        self.fail(self.members.ledger.check_end({p: logs[p][leader] for p, leader in leaders.items()}))
