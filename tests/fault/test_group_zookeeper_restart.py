"""The ZooKeeper server restarted under a running group.

A private server (``dedicated_zookeeper_server``, a ``trikafka.zk.server``
process of this test's own) sits behind a gating proxy, as the ZooKeeper
notes recommend (ZOOKEEPER-5051: a connection landing before the restarted
server serves can hang and lose the session).  Brokers and consumers run,
the proxy starts refusing, the server is SIGKILLed, messages keep being
produced during a seeded outage, the server comes back on the same port and
data, the proxy lets clients in again.  The group must settle again and
consume everything; sessions normally survive, and if one does not, its
consumer may only repeat what it had not committed before the outage.
"""

from __future__ import annotations

import math

import pytest
import trio

from tests.helpers.group_world import SessionLoss, group_config, open_kazoo_world, produce_everywhere
from tests.helpers.fault_seeds import fault_rng
from tests.helpers.fault_proxy import FaultMode
from tests.helpers.zookeeper_server import open_zookeeper_proxy

RESTART_TIMEOUT_S = 30.0


@pytest.mark.zookeeper
async def test_zookeeper_restarted_under_a_running_group(dedicated_zookeeper_server, tmp_path) -> None:
    rng = fault_rng("zookeeper-restart")
    outage_s = rng.uniform(0.2, 3.0)
    print(f"outage {outage_s:.2f} s")
    server = dedicated_zookeeper_server
    async with open_zookeeper_proxy(server.connect_string) as gate:
        async with open_kazoo_world(f"{gate.connect_string}/restart", server.connect_string,
                                    str(tmp_path / "brokers")) as world:
            await world.add_topic("t")
            await world.start_broker(0, 3)
            await world.start_broker(1, 2)
            await world.add_consumer("x", {"t": 1}, group_config(autocommit_enable=True), credit=math.inf)
            await world.add_consumer("y", {"t": 1}, group_config(), credit=math.inf)
            await produce_everywhere(world, "t", 5)
            await world.settle()
            committed_before = await world.committed_offsets()
            generations = {c.name: c.real_zk.session_generation.value for c in world.live_consumers()}

            gate.set_mode(FaultMode.REFUSE)
            gate.sever()
            server.stop()  # SIGKILL; on this (the main) thread, as the server wants
            world.note("ZooKeeper killed")
            await produce_everywhere(world, "t", 3)  # brokers need no ZooKeeper to take messages
            await trio.sleep(outage_s)
            server.spawn()
            with trio.fail_after(RESTART_TIMEOUT_S):
                await server.wait_ready()
            gate.set_mode(FaultMode.FORWARD)
            world.note("ZooKeeper back")

            await produce_everywhere(world, "t", 3)
            await world.settle()
            for consumer in world.live_consumers():
                if consumer.real_zk.session_generation.value != generations[consumer.name]:
                    world.note(f"{consumer.name} lost its session across the restart")
                    world.losses.append(SessionLoss(consumer.name, "expiry", committed_before))
            await world.drain()
            world.check_deliveries()
            print("stats", world.stats())
