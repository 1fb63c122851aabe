"""Ten consumers joining at once: the herd effect, rebalance storms.

Every member watches the group's ids, so each join makes all of them
rebalance at the same time and race for the same owner znodes.  Ten join
together, then (flapping) five leave and three join together.  After each
wave the group must settle on exactly the assignment of its live members,
and every message must be consumed exactly once: nobody crashed.
Run on the fake ZooKeeper (mock clock) and on the real one.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from tests.helpers.group_world import FakeBackend, GroupWorld, group_config, open_kazoo_world, produce_everywhere
from tests.helpers.fault_seeds import fault_rng

HERD = 10


async def herd_scenario(world: GroupWorld, rng) -> None:
    await world.add_topic("t")
    await world.start_broker(0, 8)
    await world.start_broker(1, 4)
    await produce_everywhere(world, "t", rng.randint(5, 15))
    config = group_config(autocommit_enable=True)

    async def join(name: str) -> None:
        await world.add_consumer(name, {"t": 1}, config, credit=math.inf)

    async with trio.open_nursery() as nursery:
        for i in range(HERD):
            nursery.start_soon(join, f"h{i}")
    await world.settle()
    await produce_everywhere(world, "t", rng.randint(2, 6))

    leaving = rng.sample(sorted(world.consumers), 5)
    async with trio.open_nursery() as nursery:
        for name in leaving:
            nursery.start_soon(world.stop_consumer, name)
        for i in range(3):
            nursery.start_soon(join, f"late{i}")
    await produce_everywhere(world, "t", rng.randint(2, 6))
    await world.settle()
    await world.drain()
    world.check_deliveries()
    stats = world.stats()
    print("stats", stats)
    assert stats["duplicates"] == 0, "clean joins and leaves, yet a message came twice"
    owners = [c for c in world.live_consumers() if c.group_consumer.owned]
    assert len(owners) == len(world.live_consumers()) == 8, "12 partitions, 8 members: everyone owns some"


def test_ten_consumers_join_at_once_fake_zookeeper() -> None:
    rng = fault_rng("herd-fake")

    async def main() -> None:
        async with GroupWorld.open(FakeBackend()) as world:
            await herd_scenario(world, rng)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.zookeeper
async def test_ten_consumers_join_at_once_real_zookeeper(zk_chroot, zookeeper_server, tmp_path) -> None:
    rng = fault_rng("herd-real")
    async with open_kazoo_world(zk_chroot, zookeeper_server.connect_string, str(tmp_path)) as world:
        await herd_scenario(world, rng)
