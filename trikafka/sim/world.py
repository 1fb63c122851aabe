"""One seed, one simulated cluster: the real brokers under faults on a virtual clock.

``run_seed`` runs three real brokers (``trikafka.testing.open_cluster``: the
real broker, replica manager, controller and follower tasks) on fake file
systems, a fake ZooKeeper and an in-memory network, in one Trio run on a
``MockClock`` whose scheduling is a function of the seed
(``determinism.py``).  A producer writes with acks -1, a consumer reads
committed bytes from any replica, a consumer group reads the topic
(``groups.py``), and a nemesis injects the named faults;
then every fault heals, the cluster settles and ``checker`` judges the end
state.  Every random choice comes from ``random.Random(seed)``; the trace of
events hashes to the same digest on every run of the seed.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field

import trio
import trio.testing

from trikafka.client import ClientError, connect
from trikafka.testing import open_cluster
from trikafka.wire import ErrorCode, RemoteProtocolError, RequestType, build_message_set
from trikafka.wire.reading import parse_entries
from trikafka.zk import NoNodeError
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

from .checker import Ledger, Violation, check_end_state
from .determinism import Trace, deterministic_trio
from .groups import MEMBERS, GroupMembers
from .names import FAULTS, MEMBER_FAULTS
from .plants import planted

TOPIC = "sim"
BROKERS, PARTITIONS, REPLICATION_FACTOR = 3, 2, 3  # the default shape of the world
REPLICATION_REQUESTS = (RequestType.REPLICA_FETCH, RequestType.EPOCH_END_OFFSET)
PRODUCE_RATE_PER_S = 20.0
FAULT_GAP_S = (0.2, 2.0)
MAX_LATENCY_S = 0.03
FSYNC_ERROR_WAIT_S = 2.0  # for the next fsync after an error is armed
FSYNC_HALT_WAIT_S = 20.0  # for a broker whose fsync failed to halt (a controlled shutdown included)
SETTLE_S = 60.0  # after healing, simulated: session expiries, elections and catch-up fit in it
REQUEST_TIMEOUT_S = 5.0
FETCH_BYTES = 64 * 1024


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


def parse_faults(text: str) -> tuple[str, ...]:
    """``restart,stall`` -> the fault names; ValueError naming an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r} (known: {', '.join(FAULTS)})")
    return names


def replica_assignment(brokers: int, partitions: int) -> tuple[tuple[int, ...], ...]:
    """Partition p's replicas: ``REPLICATION_FACTOR`` brokers from p on, round the ring."""
    assert brokers >= REPLICATION_FACTOR, "the promises assume three replicas (one may lose power)"
    return tuple(tuple((p + i) % brokers for i in range(REPLICATION_FACTOR)) for p in range(partitions))


def run_seed(seed: int, *, duration_s: float = 30.0, faults: tuple[str, ...] = FAULTS,
             plant: str | None = None, brokers: int = BROKERS, partitions: int = PARTITIONS) -> SimResult:
    """Run one seed (blocking: its own ``trio.run``) and judge it; ``brokers`` and
    ``partitions`` change the world's shape (the default is the one CI runs)."""
    trace = Trace()
    clock = trio.testing.MockClock(autojump_threshold=0)
    previous = logging.getLogger("trikafka").level
    logging.getLogger("trikafka").setLevel(logging.CRITICAL + 1)  # brokers killed mid-task log their failure: noise here
    try:
        with deterministic_trio(seed), planted(plant):
            world = World(seed, duration_s, faults, trace, replica_assignment(brokers, partitions))
            trio.run(world.run, clock=clock)
    finally:
        logging.getLogger("trikafka").setLevel(previous)
    violation = world.violation
    context = trace.around(violation.trace_index if violation.trace_index >= 0 else len(trace.lines)) \
        if violation else []
    return SimResult(seed, violation is None, trace.digest, clock.current_time(), violation, context,
                     len(world.ledger.acked), world.faults, len(world.members.ledger.delivered), trace.lines)


class World:
    """Everything one seed runs."""

    def __init__(self, seed: int, duration_s: float, faults: tuple[str, ...], trace: Trace,
                 replicas: tuple[tuple[int, ...], ...] = replica_assignment(BROKERS, PARTITIONS)):
        self.rng = random.Random(seed)
        self.replicas = replicas
        self.brokers, self.partitions = 1 + max(max(r) for r in replicas), len(replicas)
        self.seed, self.duration_s, self.fault_names, self.trace = seed, duration_s, faults, trace
        self.ledger = Ledger()
        self.violation: Violation | None = None
        self.faults = 0
        self.down: set[int] = set()
        self.stalls: list[trio.Event] = []  # released at the latest when everything heals
        self.busy: dict[int, list[str]] = {}  # brokers under a fault right now -> the faults
        self.cluster = None
        self.members = GroupMembers(self, TOPIC)

    def fail(self, violation: Violation | None) -> None:
        if violation is not None and self.violation is None:
            self.trace.add(f"VIOLATION {violation.promise}: {violation.detail}")
            self.violation = Violation(violation.promise, violation.detail, len(self.trace.lines) - 1)

    async def run(self) -> None:
        async with open_cluster(self.brokers, seed=self.seed, log_flush_interval=self.rng.choice((1, 4, 50)),
                                survive_failures=True, loopback=False) as cluster, \
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

    def _hosted(self, broker: int, partition: int):
        replicas = self.cluster.brokers[broker].broker.replicas
        return replicas.hosted.get((TOPIC, partition)) if replicas is not None else None

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
            await trio.sleep(self.rng.expovariate(PRODUCE_RATE_PER_S))
            partition = self.rng.randrange(self.partitions)
            leader = await self._leader(partition)
            if leader < 0 or leader in self.down:
                continue
            data = build_message_set([b"s%d.%d.%d" % (self.seed, seq, i) for i in range(self.rng.randint(1, 3))])
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
            partition = self.rng.randrange(self.partitions)
            broker = self.rng.randrange(self.brokers)
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
        """Start faults at random moments; they overlap, so two brokers may be out at once."""
        async with trio.open_nursery() as faults:
            while True:
                await trio.sleep(self.rng.uniform(*FAULT_GAP_S))
                fault = self.rng.choice(self.fault_names)
                broker = self.rng.randrange(self.brokers)
                if fault in MEMBER_FAULTS:  # (the index names a group member)
                    self.faults += 1
                    duration_s = self.rng.choice((0.3, 1.0, 4.0, 8.0)) * self.rng.random()
                    faults.start_soon(self.members.fault, fault, broker % MEMBERS, duration_s)
                    continue
                current = self.busy.get(broker, [])
                kills_a_paused_process = fault in ("kill", "crash") and current == ["stall"]
                if broker in self.down or (current and not kills_a_paused_process):
                    continue  # otherwise one fault per broker at a time
                if fault == "crash" and not await self._may_crash():
                    continue
                self.faults += 1
                self.busy.setdefault(broker, []).append(fault)
                faults.start_soon(self._fault, fault, broker, self.rng.choice((0.02, 0.3, 1.0, 4.0)) * self.rng.random())

    async def _fault(self, fault: str, broker: int, duration_s: float) -> None:
        self.trace.add(f"fault {fault} broker {broker} for {duration_s:.3f} s")
        try:
            if fault == "restart":  # a graceful stop (controlled shutdown), then the same disk again
                self.down.add(broker)
                await self.cluster.stop(broker)
                await trio.sleep(duration_s)
                await self._restart(broker)
                self.down.discard(broker)
            elif fault in ("kill", "crash"):  # SIGKILL; a crash is a power cut too (unflushed writes lost or torn)
                self.down.add(broker)
                await self.cluster.crash(broker, self.rng, power_cut=fault == "crash")
                await trio.sleep(duration_s)
                await self._restart(broker)
                self.down.discard(broker)
            elif fault == "fsync-error":  # one fsync fails: the broker halts (0.7's rule) and starts again
                fs = self.cluster.brokers[broker].fs
                fs.inject_error("fsync")
                with trio.CancelScope(shield=True):  # a halt under way is seen through to the restart
                    with trio.move_on_after(FSYNC_ERROR_WAIT_S):
                        await self.cluster.wait_stopped(broker)
                    with trio.move_on_after(FSYNC_HALT_WAIT_S):  # an fsync that failed: the halt takes a moment
                        if not fs.pending_errors:
                            await self.cluster.wait_stopped(broker)
                    fs.clear_errors()  # (no fsync came, or the failed one did not stop the broker)
                    if broker in self.cluster.failures:
                        self.trace.add(f"broker {broker} halted: {self.cluster.failures.pop(broker)!r}")
                        self.down.add(broker)
                        await trio.sleep(duration_s)
                        await self._restart(broker)
                        self.down.discard(broker)
            elif fault == "stall":  # every request to it waits: a paused process, its session kept
                await self._stall(duration_s, lambda address, request: address == self.cluster.brokers[broker].address)
            elif fault == "isolate":  # cut from the other replicas and from ZooKeeper; clients still reach it
                self.cluster.brokers[broker].broker.zookeeper.coordinator.expire()
                await self._stall(duration_s, lambda address, request: request.type in REPLICATION_REQUESTS and (
                    address == self.cluster.brokers[broker].address or request.replica_id == broker))
            elif fault == "expire":
                self.cluster.brokers[broker].broker.zookeeper.coordinator.expire()
            elif fault == "zk-outage":  # ZooKeeper restarts: every broker loses it at once, for up to 8 s
                for member in self.cluster.brokers:  # (past 6 s, every session expires)
                    member.broker.zookeeper.coordinator.sever(reconnect_after_s=2 * duration_s)
                await trio.sleep(2 * duration_s)
        finally:
            self.busy[broker].remove(fault)
        self.trace.add(f"healed {fault} broker {broker}")

    async def _restart(self, broker: int) -> None:
        # A start that began runs to its end (the end of the run does not cut it short: a start
        # stopped half-way would shut down cleanly and vouch for a tail it never re-copied).
        with trio.CancelScope(shield=True):
            await self.cluster.restart(broker)
        self._push_hook(self.cluster.brokers[broker].address, self.latency)

    async def _may_crash(self) -> bool:
        """A crash loses the unflushed tail of one replica, so acknowledged writes survive
        only while another in-sync replica holds them in memory: crash while no broker is
        down, no crashed broker is still catching up (each says its tail is intact again,
        docs/protocol.md §12.2), and every partition's ISR is full."""
        if self.down:
            return False
        for broker in range(self.brokers):
            try:
                data, _stat = await self.zk.get(f"/trikafka/brokers/{broker}")
            except NoNodeError:
                return False
            if not json.loads(data).get("tail_intact", True):
                return False
        states = [(await read_state(self.zk, TOPIC, p)).state for p in range(self.partitions)]
        return all(len(state.isr) == len(replicas) for state, replicas in zip(states, self.replicas))

    async def _stall(self, duration_s: float, matches) -> None:
        """Hold every request ``matches(address, request)`` selects for ``duration_s``."""
        released = trio.Event()
        self.stalls.append(released)
        network = self.cluster.network

        def hook_for(address):
            async def hook(request):
                if matches(address, request) and not released.is_set():
                    await released.wait()
            return hook

        for member in self.cluster.brokers:
            self._push_hook(member.address, hook_for(member.address))
        try:
            await trio.sleep(duration_s)
        finally:
            released.set()

    def _add_latency(self) -> None:
        """Every request takes 0 to ``MAX_LATENCY_S`` to arrive (brokers restarted later get it too)."""
        async def latency(_request):
            await trio.sleep(self.rng.uniform(0, MAX_LATENCY_S))

        self.latency = latency
        for member in self.cluster.brokers:
            self._push_hook(member.address, latency)

    def _push_hook(self, address, hook) -> None:
        previous = self.cluster.network.before_request.get(address)

        async def chained(request):
            await hook(request)
            if previous is not None:
                await previous(request)

        self.cluster.network.before_request[address] = chained

    async def _heal(self) -> None:
        for released in self.stalls:
            released.set()
        for broker in sorted(self.down):
            await self._restart(broker)
        self.down.clear()
        self.trace.add("healed everything")

    # ----------------------------------------------------------------- the end state

    async def _settled(self) -> tuple[dict, dict, dict] | None:
        leaders, isrs, hws = {}, {}, {}
        for partition, replicas in enumerate(self.replicas):
            state = (await read_state(self.zk, TOPIC, partition)).state
            hosted = self._hosted(state.leader, partition) if state.leader >= 0 else None
            if hosted is None or hosted.leader is None or len(state.isr) < len(replicas):
                return None
            ends = {self._hosted(b, partition).log.end_offset for b in replicas if self._hosted(b, partition)}
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
