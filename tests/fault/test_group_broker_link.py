"""The consumer-broker link dropped and stalled, through :class:`~tests.helpers.fault_proxy.FaultProxy`.

Brokers advertise a fault proxy in ZooKeeper, so every fetch of the group
consumers crosses it.  While a producer keeps appending, a seeded schedule of
named faults hits the proxies:

* ``drop``: every connection cut at once (the consumer must reconnect);
* ``stall``: bytes held both ways for a while, then released in order;
* ``outage``: connections cut and new ones refused for a while.

No consumer crashes and no session is lost, so the run must end with every
message consumed exactly once, in order.
"""

from __future__ import annotations

import math

import pytest
import trio

from tests.helpers.group_world import group_config, open_kazoo_world
from tests.helpers.fault_proxy import FaultMode
from tests.helpers.fault_seeds import fault_rng

FAULTS = ("drop", "stall", "outage")
FAULT_COUNT = 6
PRODUCE_ROUNDS = 30


async def apply_fault(world, proxy, name: str, duration_s: float) -> int:
    """Apply one named fault; returns how many live consumer connections it hit."""
    hit = proxy.live_connections
    world.note(f"fault {name} for {duration_s:.2f} s on port {proxy.port} ({hit} connections)")
    if name == "drop":
        proxy.sever()
    elif name == "stall":
        proxy.set_mode(FaultMode.STALL)
        await trio.sleep(duration_s)
        proxy.set_mode(FaultMode.FORWARD)
    elif name == "outage":
        proxy.set_mode(FaultMode.REFUSE)
        proxy.sever()
        await trio.sleep(duration_s)
        proxy.set_mode(FaultMode.FORWARD)
    else:
        raise AssertionError(name)
    return hit


@pytest.mark.zookeeper
async def test_broker_link_dropped_and_stalled(zk_chroot, zookeeper_server, tmp_path) -> None:
    rng = fault_rng("broker-link")
    schedule = [(rng.choice(FAULTS), rng.choice([0, 1]), rng.uniform(0.2, 1.5), rng.uniform(0.05, 0.4))
                for _ in range(FAULT_COUNT)]
    print("fault schedule (fault, broker, duration_s, pause_s):", schedule)
    async with open_kazoo_world(zk_chroot, zookeeper_server.connect_string, str(tmp_path)) as world:
        await world.add_topic("t")
        brokers = [await world.start_broker(0, 3, proxied=True), await world.start_broker(1, 2, proxied=True)]
        await world.add_consumer("x", {"t": 1}, group_config(autocommit_enable=True), credit=math.inf)
        await world.add_consumer("y", {"t": 1}, group_config(), credit=math.inf)
        await world.settle()

        async def keep_producing() -> None:
            for round_number in range(PRODUCE_ROUNDS):
                slot = brokers[round_number % 2]
                await world.produce("t", slot.broker_id, rng.randrange(slot.num_partitions), rng.randint(1, 5))
                await trio.sleep(0.1)

        hits = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_producing)
            for name, broker_index, duration_s, pause_s in schedule:
                await trio.sleep(pause_s)
                proxy = brokers[broker_index].proxy
                assert proxy is not None
                hits += await apply_fault(world, proxy, name, duration_s)
        await world.settle()
        await world.drain()
        world.check_deliveries()
        stats = world.stats()
        print("stats", stats, "connections hit", hits)
        assert stats["duplicates"] == 0, "no crash and no expiry, yet a message came twice"
        assert hits > 0, "the faults never hit a consumer connection"
