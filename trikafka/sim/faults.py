"""The simulation's faults: one entry per kind in ``FAULT_TABLE`` (docs/simulation.md).

An entry says what the fault hits (a broker, or a group member: the victim
index modulo the members), how long it may last, whether it may hit a broker
that is stalled (a paused process can still be killed), what must hold before
it starts, and how it is injected.  The nemesis (``ClusterWorld._nemesis``) draws the
kind from the seed's ``fault`` stream and everything else from streams of
their own (``determinism.Streams``), so a kind added here changes which kinds
later seeds draw and nothing else.  Every injection runs until its fault heals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

import trio

from trikafka.wire import RequestType
from trikafka.zk import NoNodeError, paths
from trikafka.zk.replication_store import read_state

if TYPE_CHECKING:  # (types only: the command line reads this table before any broker code loads)
    from trikafka.testing import FakeZooKeeperClient, InProcessCluster
    from trikafka.zk.client import ZooKeeperClient

    from .determinism import Streams, Trace
    from .groups import GroupMembers

REPLICATION_REQUESTS = (RequestType.REPLICA_FETCH, RequestType.EPOCH_END_OFFSET)
BROKER_DURATIONS_S = (0.02, 0.3, 1.0, 4.0)  # a fault lasts one of these times a uniform [0, 1)
MEMBER_DURATIONS_S = (0.3, 1.0, 4.0, 8.0)
FSYNC_ERROR_WAIT_S = 2.0  # for the next fsync after an error is armed
FSYNC_HALT_WAIT_S = 20.0  # for a broker whose fsync failed to halt (a controlled shutdown included)



class FaultTarget(Protocol):
    """What a fault sees of the simulated world (``world.ClusterWorld``, which imports this table)."""

    cluster: InProcessCluster
    zk: ZooKeeperClient
    streams: Streams
    trace: Trace
    members: GroupMembers
    topic: str
    topics: tuple[str, ...]  # every replicated topic; each has ``partitions`` partitions laid out as ``replicas``
    brokers: int
    partitions: int
    replicas: tuple[tuple[int, ...], ...]
    down: set[int]  # brokers stopped right now (restart() takes one out)

    async def restart(self, broker: int) -> None: ...

    async def stall(self, duration_s: float, matches: Callable[[tuple[str, int], Any], bool],
                    delay_s: Callable[[], float] | None = None) -> None:
        """Hold the requests ``matches(address, request)`` selects (Any: every decoded request type) for
        ``duration_s``, or each for ``delay_s()`` while ``duration_s`` lasts."""


Inject = Callable[[FaultTarget, int, float], Awaitable[None]]  # (world, broker or member, duration_s)


@dataclass(frozen=True)
class Fault:
    """One kind of fault."""

    name: str
    inject: Inject
    on_member: bool = False  # the victim is a group member (else a broker)
    durations_s: tuple[float, ...] = BROKER_DURATIONS_S
    hits_a_stalled_broker: bool = False  # may start while the broker's only fault is a stall
    may_start: Callable[[FaultTarget], Awaitable[bool]] | None = None  # checked just before it starts

    def duration_s(self, step: float, scale: float) -> float:
        """How long it lasts, from two uniform [0, 1) draws: one of ``durations_s`` times ``scale``."""
        return self.durations_s[int(step * len(self.durations_s))] * scale


async def _restart(world: FaultTarget, broker: int, duration_s: float) -> None:
    """A graceful stop (controlled shutdown), then a start on the same disk."""
    world.down.add(broker)
    await world.cluster.stop(broker)
    await trio.sleep(duration_s)
    await world.restart(broker)


async def _kill(world: FaultTarget, broker: int, duration_s: float) -> None:
    """SIGKILL: the page cache keeps every write."""
    world.down.add(broker)
    await world.cluster.crash(broker, world.streams.disk, power_cut=False)
    await trio.sleep(duration_s)
    await world.restart(broker)


async def _crash(world: FaultTarget, broker: int, duration_s: float) -> None:
    """A power cut: unflushed writes lost or torn (drawn from the ``disk`` stream), then a reboot."""
    world.down.add(broker)
    await world.cluster.crash(broker, world.streams.disk, power_cut=True)
    await trio.sleep(duration_s)
    await world.restart(broker)


async def _may_crash(world: FaultTarget) -> bool:
    """A crash loses the unflushed tail of one replica, so acknowledged writes survive
    only while another in-sync replica holds them in memory: crash while no broker is
    down, no crashed broker is still catching up (each says its tail is intact again,
    docs/protocol.md §12.2), and every partition's ISR is full."""
    if world.down:
        return False
    for broker in range(world.brokers):
        try:
            data, _stat = await world.zk.get(paths.replication_broker(broker))
        except NoNodeError:
            return False
        if not json.loads(data).get("tail_intact", True):
            return False
    for topic in world.topics:
        states = [(await read_state(world.zk, topic, p)).state for p in range(world.partitions)]
        if not all(len(state.isr) == len(replicas) for state, replicas in zip(states, world.replicas)):
            return False
    return True


async def _fsync_error(world: FaultTarget, broker: int, duration_s: float) -> None:
    """Its next fsync fails: the broker halts (0.7's rule) and starts again."""
    fs = world.cluster.brokers[broker].fs
    fs.inject_error("fsync")
    with trio.CancelScope(shield=True):  # a halt under way is seen through to the restart
        with trio.move_on_after(FSYNC_ERROR_WAIT_S):
            await world.cluster.wait_stopped(broker)
        with trio.move_on_after(FSYNC_HALT_WAIT_S):  # an fsync that failed: the halt takes a moment
            if not fs.pending_errors:
                await world.cluster.wait_stopped(broker)
        fs.clear_errors()  # (no fsync came, or the failed one did not stop the broker)
        if broker in world.cluster.failures:
            world.trace.add(f"broker {broker} halted: {world.cluster.failures.pop(broker)!r}")
            world.down.add(broker)
            await trio.sleep(duration_s)
            await world.restart(broker)


def _session_of(world: FaultTarget, broker: int) -> FakeZooKeeperClient:
    """The ZooKeeper client a running broker registered with: the in-process cluster gives
    every broker its own ``FakeZooKeeperClient``, whose session a fault can expire or sever."""
    from trikafka.testing import FakeZooKeeperClient  # (broker code: loaded by the time a fault runs)

    zookeeper = world.cluster.brokers[broker].broker.zookeeper
    assert zookeeper is not None, f"broker {broker} is not registered in ZooKeeper"
    assert isinstance(zookeeper.coordinator, FakeZooKeeperClient), zookeeper.coordinator
    return zookeeper.coordinator


async def _stall(world: FaultTarget, broker: int, duration_s: float) -> None:
    """Every request to it waits: a paused process whose ZooKeeper session lives."""
    address = world.cluster.brokers[broker].address
    await world.stall(duration_s, lambda to, request: to == address)


async def _isolate(world: FaultTarget, broker: int, duration_s: float) -> None:
    """Cut from the other replicas and from ZooKeeper; clients still reach it."""
    address = world.cluster.brokers[broker].address
    _session_of(world, broker).expire()
    await world.stall(duration_s, lambda to, request: request.type in REPLICATION_REQUESTS and (
        to == address or request.replica_id == broker))


async def _expire(world: FaultTarget, broker: int, duration_s: float) -> None:
    """Its ZooKeeper session expires (it registers again with a new session)."""
    _session_of(world, broker).expire()


async def _zk_outage(world: FaultTarget, broker: int, duration_s: float) -> None:
    """ZooKeeper restarts: every broker loses it at once, for up to 8 s (past 6 s, every session expires)."""
    for index in range(len(world.cluster.brokers)):
        _session_of(world, index).sever(reconnect_after_s=2 * duration_s)
    await trio.sleep(2 * duration_s)


def _member_fault(name: str) -> Fault:
    async def inject(world: FaultTarget, member: int, duration_s: float) -> None:
        await world.members.fault(name, member, duration_s)
    return Fault(name, inject, on_member=True, durations_s=MEMBER_DURATIONS_S)


FAULT_TABLE: dict[str, Fault] = {fault.name: fault for fault in (
    Fault("restart", _restart),
    Fault("kill", _kill, hits_a_stalled_broker=True),
    Fault("crash", _crash, hits_a_stalled_broker=True, may_start=_may_crash),
    Fault("fsync-error", _fsync_error),
    Fault("stall", _stall),
    Fault("isolate", _isolate),
    Fault("expire", _expire),
    Fault("zk-outage", _zk_outage),
    _member_fault("member-crash"),  # semantics in groups.py
    _member_fault("member-pause"),
    _member_fault("member-twin"),
)}
FAULTS = tuple(FAULT_TABLE)
MEMBER_FAULTS = tuple(name for name, fault in FAULT_TABLE.items() if fault.on_member)


def parse_faults(text: str, table: dict[str, Fault] = FAULT_TABLE) -> tuple[str, ...]:
    """``restart,stall`` -> the fault names of ``table``; ValueError naming an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r} (known: {', '.join(table)})")
    return names
