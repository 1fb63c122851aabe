"""The Kafka world's faults (``kafka_world``, docs/simulation.md "The Kafka world"): every broker fault of
the cluster world's ``faults.FAULT_TABLE`` (the same entries, the same nemesis) and six of its own, the
first five drawn as member faults are (the victim index picks a client or a copier), all but the last
three by the nemesis:

* ``client-crash``: a client dies where it stands, mid-transaction included (its incarnation is
  cancelled: nothing aborts, nothing flushes); the next incarnation starts later with a new client;
* ``client-pause``: a copier freezes (mid-transaction included) and its successor starts, fencing it;
  it wakes after the fault's duration and carries on as a zombie with its old epoch and generation;
* ``coordinator-move``: the broker coordinating a copier's transactional id restarts, so its
  partition of ``__transaction_state`` (and the offsets partitions it leads) moves and is loaded again;
* ``coordinator-crash``: a copier and the broker coordinating its transactional id die together right
  after the copier sends EndTxn (the broker is killed a moment later, while it writes the decision and
  its markers), so what that broker had not made durable is decided again by the next coordinator;
* ``copier-stall``: a copier that read its records stalls before their transaction (a slow step, a
  blocked call) while its group consumer's own tasks carry on; no successor starts, so its producer
  epoch stays the current one.  A rebalance meanwhile may hand its partitions to the other copier,
  which copies the records again; the stalled one then copies them and commits their offsets with the
  generation it read them in, and only the group coordinator's generation check (KIP-447) refuses them;
* ``slow-broker``: for a drawn window every request to one broker (the victim) is held a drawn time, a
  slow disk or a GC pause.
The nemesis draws none of the last three: each comes on a stream of its own (``APART_GAP_S``).

Light to import (no broker code), like ``faults``: the command line reads ``parse_faults``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

import trio

from trikafka.client.errors import ClientError

from . import faults
from .faults import FAULT_TABLE, Fault, FaultTarget

COPIERS = 2
COORDINATOR_KEY_TYPE_TRANSACTION = 1
END_TXN_WAIT_S = 10.0  # how long a ``coordinator-crash`` waits for its copier's next EndTxn
# The coordinator is killed this long after EndTxn is sent: while it writes the decision and its
# markers, each a replicated write of a few round trips (the world's latency is up to 30 ms a request).
CRASH_AFTER_END_TXN_S = (0.0, 0.04)
STALL_WAIT_S = 20.0  # how long a ``copier-stall`` waits for a copier about to begin a transaction
# How long a ``copier-stall`` lasts: long enough for a rebalance to start and finish meanwhile (the other
# members hear of it within a heartbeat, 1 s, and rejoin at once).  It strikes before the transaction's
# first request, so no transaction timeout runs while it lasts.
STALL_S = (3.0, 10.0)
# A ``slow-broker``: every request to the broker is held this long (drawn for each request), a slow disk
# or a GC pause (Jepsen's slow network), for one of these windows times a uniform [0, 1).
SLOW_REQUEST_S = (0.02, 0.2)
SLOW_WINDOWS_S = (4.0, 8.0, 16.0)
# What ends a client incarnation (the client's own errors, and a broken in-memory stream).
CLIENT_ERRORS = (ClientError, OSError, trio.BrokenResourceError, trio.ClosedResourceError)


def copier_id(index: int) -> str:
    """The transactional id of copier ``index`` (every incarnation's)."""
    return f"copier-{index}"


@dataclass
class Stall:
    """A ``copier-stall``, armed on every copier: the first running incarnation about to begin a
    transaction stalls there (``struck`` set, ``victim`` noted) until ``resumed`` is set."""

    victim: tuple[str, int] | None = None  # (the copier's name, its stalled incarnation), once struck
    struck: trio.Event = field(default_factory=trio.Event)
    resumed: trio.Event = field(default_factory=trio.Event)

    def holds(self, name: str, incarnation: int) -> bool:
        """Whether incarnation ``incarnation`` of copier ``name`` is stalled now."""
        return self.victim == (name, incarnation) and not self.resumed.is_set()


class Client(Protocol):
    """A client of the workload as a fault sees it: its name and its running incarnation's scope."""

    name: str
    scope: trio.CancelScope
    incarnation: int
    moved_on: trio.Event  # set: the next incarnation may start
    paused: dict[int, trio.Event]  # incarnation -> set when it wakes
    end_txn_sent: trio.Event | None  # set by the running incarnation as it sends EndTxn (armed by a fault)
    stall: Stall | None  # armed by ``copier-stall``


class KafkaFaultTarget(FaultTarget, Protocol):
    """What this world's faults see of ``kafka_world.KafkaFaultTarget`` (which imports this table)."""

    slots: list[Client]
    first_copier: int  # the copiers' index in ``slots``
    busy: dict[int, list[str]]  # brokers under a fault right now -> the faults
    apart: dict[str, random.Random]  # each kind of ``APART_GAP_S``: its own stream (all its draws)

    async def _fault(self, fault: Fault, broker: int, duration_s: float) -> None: ...


def _stalled(slot: Client) -> bool:
    """Whether the slot's running incarnation is under a ``copier-stall``: the other client faults leave
    it alone (its end, or a successor, would fence the zombie that fault exists to make)."""
    return slot.stall is not None and slot.stall.holds(slot.name, slot.incarnation)


async def _client_crash(world: KafkaFaultTarget, victim: int, duration_s: float) -> None:
    """A client process dies where it stands (mid-transaction included); it starts again later."""
    slot = world.slots[victim % len(world.slots)]
    if _stalled(slot):
        return
    world.trace.add(f"fault client-crash {slot.name}")
    slot.scope.cancel()


async def _client_pause(world: KafkaFaultTarget, victim: int, duration_s: float) -> None:
    """A copier freezes where it stands (a GC pause, a stopped VM) and its successor starts with the same
    transactional id, fencing it; the frozen one wakes later and carries on as a zombie."""
    slot = world.slots[world.first_copier + victim % COPIERS]
    if _stalled(slot):
        return
    woken = slot.paused.setdefault(slot.incarnation, trio.Event())
    world.trace.add(f"fault client-pause {slot.name}.{slot.incarnation} for {duration_s:.3f} s")
    slot.moved_on.set()
    await trio.sleep(duration_s)
    woken.set()


async def _coordinator_broker(world: KafkaFaultTarget, tid: str) -> int | None:
    """The broker coordinating ``tid`` now, if it is up and under no other fault (None otherwise)."""
    from trikafka.client.kafka.coordinators import find_coordinator  # (client code: loaded by then)

    with trio.move_on_after(2.0):
        try:
            async with world.cluster.kafka_client(max_retries=0) as client:
                broker = (await find_coordinator(client, tid, COORDINATOR_KEY_TYPE_TRANSACTION)).node_id
        except CLIENT_ERRORS:
            return None
        if broker in world.down or world.busy.get(broker):
            return None
        return broker
    return None


async def _coordinator_move(world: KafkaFaultTarget, victim: int, duration_s: float) -> None:
    """The broker coordinating a copier's transactional id restarts: its partition of the transaction
    log (and of the offsets topic it leads) moves to another broker, which loads it."""
    broker = await _coordinator_broker(world, copier_id(victim % COPIERS))
    if broker is None:
        return
    world.busy.setdefault(broker, []).append("restart")
    await world._fault(FAULT_TABLE["restart"], broker, duration_s)


async def _coordinator_crash(world: KafkaFaultTarget, victim: int, duration_s: float) -> None:
    """A copier and its transaction coordinator die together just after the copier sends EndTxn: the
    copier is cancelled (it neither retries nor aborts) and the coordinator's broker is killed within
    ``CRASH_AFTER_END_TXN_S``, while it writes the decision and its markers.  The decision's only
    witnesses are then what that broker made durable: a coordinator that wrote markers before the
    decision leaves partitions holding markers of a transaction its successor decides otherwise."""
    slot = world.slots[world.first_copier + victim % COPIERS]
    delay_s = world.apart["coordinator-crash"].uniform(*CRASH_AFTER_END_TXN_S)  # (drawn whether it strikes or not)
    sent = slot.end_txn_sent = slot.end_txn_sent if slot.end_txn_sent is not None else trio.Event()
    with trio.move_on_after(END_TXN_WAIT_S):
        await sent.wait()
    if slot.end_txn_sent is sent:
        slot.end_txn_sent = None
    if not sent.is_set():
        return
    # (the coordinator as the copier found it: a FindCoordinator passes no virtual time)
    broker = await _coordinator_broker(world, copier_id(victim % COPIERS))
    if broker is None:
        return
    await trio.sleep(delay_s)
    if broker in world.down or world.busy.get(broker):
        return
    world.trace.add(f"fault coordinator-crash {slot.name}.{slot.incarnation} and broker {broker} "
                    f"{delay_s:.3f} s after EndTxn")
    slot.scope.cancel()
    world.busy.setdefault(broker, []).append("kill")
    await world._fault(FAULT_TABLE["kill"], broker, duration_s)


async def _copier_stall(world: KafkaFaultTarget, victim: int, duration_s: float) -> None:
    """The first copier about to begin a transaction (its records read, with their generation) stalls
    there, while its group consumer's tasks carry on, and then goes on as a zombie if a rebalance moved
    its partitions meanwhile.  One copier stalls at a time (the other may take the partitions over), so
    a fault that finds one armed or stalled does nothing.  Its length is drawn from the fault's stream
    (``STALL_S``); ``victim`` and ``duration_s`` are not used."""
    stall_s = world.apart["copier-stall"].uniform(*STALL_S)  # (drawn whether it strikes or not)
    copiers = world.slots[world.first_copier:world.first_copier + COPIERS]
    if any(slot.stall is not None for slot in copiers):
        return
    stall = Stall()
    for slot in copiers:
        slot.stall = stall
    try:
        with trio.move_on_after(STALL_WAIT_S):
            await stall.struck.wait()
        if stall.victim is None:
            return
        stalled = "{}.{}".format(*stall.victim)
        world.trace.add(f"fault copier-stall {stalled} for {stall_s:.3f} s")
        await trio.sleep(stall_s)
        world.trace.add(f"{stalled} resumed")
    finally:
        stall.resumed.set()
        for slot in copiers:
            slot.stall = None


async def _slow_broker(world: KafkaFaultTarget, broker: int, duration_s: float) -> None:
    """For ``duration_s``, every request to ``broker`` (the 0.7 listener's: replication, the controller's
    calls) is held a time drawn from the fault's stream (``SLOW_REQUEST_S``) on top of the latency."""
    stream = world.apart["slow-broker"]
    address = world.cluster.brokers[broker].address
    world.trace.add(f"fault slow-broker broker {broker} for {duration_s:.3f} s")
    await world.stall(duration_s, lambda to, request: to == address, lambda: stream.uniform(*SLOW_REQUEST_S))
    world.trace.add(f"healed slow-broker broker {broker}")


KAFKA_FAULT_TABLE: dict[str, Fault] = {
    **{name: fault for name, fault in FAULT_TABLE.items() if not fault.on_member},
    "client-crash": Fault("client-crash", _client_crash, on_member=True),  # type: ignore[arg-type]
    "coordinator-move": Fault("coordinator-move", _coordinator_move, on_member=True),  # type: ignore[arg-type]
    "client-pause": Fault("client-pause", _client_pause, on_member=True),  # type: ignore[arg-type]
    "coordinator-crash": Fault("coordinator-crash", _coordinator_crash, on_member=True),  # type: ignore[arg-type]
    "copier-stall": Fault("copier-stall", _copier_stall, on_member=True),  # type: ignore[arg-type]
    "slow-broker": Fault("slow-broker", _slow_broker, durations_s=SLOW_WINDOWS_S),  # type: ignore[arg-type]
}


ALL_KAFKA_FAULTS = tuple(KAFKA_FAULT_TABLE)
# Kinds a run draws only when ``--faults`` names them.  ``slow-broker`` exposed an open violation of
# "group members never own a partition at once" (Kafka world seed 1053 of 60 s with every kind: a
# generation's number given twice, with two assignments, after the three brokers restarted: a
# coordinator serves what it loaded from its log end before that commits, §17.3, docs/simulation.md),
# so it stays out of the default mix and of CI's budget until that is fixed; the plant test that
# needs it names it.
OFF_BY_DEFAULT = ("slow-broker",)
KAFKA_FAULTS = tuple(kind for kind in ALL_KAFKA_FAULTS if kind not in OFF_BY_DEFAULT)
# Kinds the nemesis does not draw: each comes on a stream of its own, one every gap drawn from it, so
# adding one leaves the nemesis' draws (and every other kind's frequency) as they were.
APART_GAP_S: dict[str, tuple[float, float]] = {"coordinator-crash": (1.0, 4.0), "copier-stall": (1.0, 4.0),
                                               "slow-broker": (1.0, 4.0)}


def parse_faults(text: str) -> tuple[str, ...]:
    """``kill,client-crash`` -> the fault names; ValueError naming an unknown one."""
    return faults.parse_faults(text, KAFKA_FAULT_TABLE)
