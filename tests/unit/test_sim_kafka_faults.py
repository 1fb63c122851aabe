"""The Kafka world's ``copier-stall`` (docs/simulation.md, "The Kafka world"): armed on both copiers, it
holds the first running incarnation about to begin a transaction, one copier at a time, for a length
drawn from its own stream; the other client faults leave a stalled copier alone.  And its
``slow-broker``: each request to one broker is held a time drawn from the fault's stream."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from trikafka.sim.determinism import Trace
from trikafka.sim.kafka_faults import (SLOW_REQUEST_S, STALL_S, STALL_WAIT_S, Stall, _client_crash, _client_pause,
                                       _copier_stall, _slow_broker)
from trikafka.sim.kafka_world import KafkaWorld
from trikafka.sim.world import ClusterWorld


@dataclass
class FakeSlot:
    name: str
    incarnation: int = 1
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    moved_on: trio.Event = field(default_factory=trio.Event)
    paused: dict[int, trio.Event] = field(default_factory=dict)
    end_txn_sent: trio.Event | None = None
    stall: Stall | None = None


class FakeTrace:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)


class FakeWorld:
    """What the client faults read of ``KafkaWorld``: its slots (a producer, then the two copiers)."""

    def __init__(self) -> None:
        self.slots = [FakeSlot("producer-0"), FakeSlot("copier-0"), FakeSlot("copier-1")]
        self.first_copier = 1
        self.trace = FakeTrace()
        self.apart = {"copier-stall": random.Random(7)}


async def _begin(slot: FakeSlot, incarnation: int, done: list[tuple[str, float]]) -> None:
    """A copier about to begin a transaction (the world's own check, ``KafkaWorld._awake``)."""
    await KafkaWorld._awake(None, slot, incarnation, may_stall=True)  # type: ignore[arg-type]
    done.append((slot.name, trio.current_time()))


async def test_a_stall_holds_the_first_copier_to_begin_a_transaction_and_no_other(autojump_clock):
    world = FakeWorld()
    _producer, copier_0, copier_1 = world.slots
    stall_s = random.Random(7).uniform(*STALL_S)
    began: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_copier_stall, world, 0, 0.0)
        await trio.testing.wait_all_tasks_blocked()
        assert copier_0.stall is copier_1.stall is not None  # armed on both copiers
        nursery.start_soon(_copier_stall, world, 1, 0.0)  # one at a time: this one does nothing
        await trio.sleep(1.0)
        nursery.start_soon(_begin, copier_1, 1, began)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_begin, copier_0, 1, began)  # the other copier goes on
        await trio.testing.wait_all_tasks_blocked()
        assert began == [("copier-0", 1.0)]
    assert began == [("copier-0", 1.0), ("copier-1", 1.0 + stall_s)]
    assert world.trace.lines == [f"fault copier-stall copier-1.1 for {stall_s:.3f} s", "copier-1.1 resumed"]
    assert copier_0.stall is copier_1.stall is None


async def test_a_stall_does_not_strike_a_paused_or_past_incarnation_and_gives_up(autojump_clock):
    world = FakeWorld()
    _producer, copier_0, copier_1 = world.slots
    copier_0.paused[1] = trio.Event()
    copier_0.paused[1].set()  # a client-pause zombie, woken: fenced already by its successor
    began: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_copier_stall, world, 0, 0.0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_begin, copier_0, 1, began)
        nursery.start_soon(_begin, copier_1, 0, began)  # an incarnation that is not the running one
    assert sorted(began) == [("copier-0", 0.0), ("copier-1", 0.0)] and trio.current_time() == STALL_WAIT_S
    assert world.trace.lines == [] and copier_0.stall is copier_1.stall is None


async def test_the_other_client_faults_leave_a_stalled_copier_alone(autojump_clock):
    world = FakeWorld()
    _producer, copier_0, copier_1 = world.slots
    copier_0.stall = copier_1.stall = Stall(victim=("copier-0", 1))
    await _client_crash(world, 1, 0.0)
    await _client_pause(world, 0, 0.0)
    assert not copier_0.scope.cancel_called and not copier_0.moved_on.is_set() and world.trace.lines == []
    await _client_crash(world, 2, 0.0)  # the copier that is not stalled
    assert copier_1.scope.cancel_called and world.trace.lines == ["fault client-crash copier-1"]


async def test_a_slow_broker_holds_each_request_to_it_a_drawn_time_while_its_window_lasts(autojump_clock):
    world: Any = ClusterWorld(1, 1.0, (), Trace())  # its stall, on a network of three addresses
    world.cluster = SimpleNamespace(brokers=[SimpleNamespace(address=("b", i)) for i in range(3)],
                                    network=SimpleNamespace(before_request={}))
    world.apart = {"slow-broker": random.Random(7)}
    delays = random.Random(7)

    async def send(broker: int) -> float:
        """How long a request to ``broker`` is held."""
        start = trio.current_time()
        hook = world.cluster.network.before_request.get(("b", broker))
        if hook is not None:
            await hook(object())
        return trio.current_time() - start

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_slow_broker, world, 1, 5.0)
        await trio.testing.wait_all_tasks_blocked()
        assert await send(1) == pytest.approx(delays.uniform(*SLOW_REQUEST_S))
        assert await send(1) == pytest.approx(delays.uniform(*SLOW_REQUEST_S))
        assert await send(0) == 0.0 and await send(2) == 0.0
        await trio.sleep(4.99 - trio.current_time())
        assert await send(1) == pytest.approx(0.01)  # held past the window's end: it goes on then
    assert await send(1) == 0.0
    assert [line.split(maxsplit=1)[1] for line in world.trace.lines] == [
        "fault slow-broker broker 1 for 5.000 s", "healed slow-broker broker 1"]
