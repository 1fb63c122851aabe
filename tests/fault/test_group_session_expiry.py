"""Session expiry in the middle of a rebalance: the expiry lands before each of
its operations, so a claim may meet an owner ephemeral of the previous session
and a commit may come from a consumer whose session expired (a zombie commit).

Consumers ``x`` and ``y`` share a topic; ``z`` joins, which makes ``x``
rebalance.  ``x``'s session is expired right before its k-th coordinator
operation after the join (the operation then runs on the *new* session), for
every k until the rebalance has no k-th operation (fake ZooKeeper, mock clock)
or for a few seeded k (real ZooKeeper).  Each run must end settled (ownership =
assignment of the live group), with every message consumed and duplicates
only from ``x``'s uncommitted range at the expiry.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from tests.helpers.group_world import FakeBackend, GroupWorld, group_config, open_kazoo_world, produce_everywhere
from tests.helpers.fault_seeds import fault_rng

# Beyond this many operations a rebalance attempt of x is surely over.
MAX_OPERATION_INDEX = 80
REAL_POSITIONS = 3


async def expire_during_rebalance(world: GroupWorld, expire_before_op: int) -> bool:
    """The scenario; returns whether the expiry fired (x had that many operations)."""
    config = group_config()
    await world.add_topic("t")
    await world.start_broker(0, 3)
    await world.start_broker(1, 2)
    await produce_everywhere(world, "t", 3)
    x = await world.add_consumer("x", {"t": 1}, config, credit=math.inf)
    await world.add_consumer("y", {"t": 1}, config, credit=math.inf)
    await world.settle()
    await produce_everywhere(world, "t", 2)
    with trio.move_on_after(world.backend.settle_timeout_s):
        while world.missing():  # x and y hold consumed-but-uncommitted positions
            await trio.sleep(world.backend.poll_s)

    countdown = expire_before_op
    fired = False

    async def before_op(operation: str) -> None:
        nonlocal countdown, fired
        countdown -= 1
        if countdown == 0:
            fired = True
            world.note(f"expiring x's session before its {operation}")
            await world.expire_consumer("x")

    assert x.wrapper is not None
    x.wrapper.before_op = before_op
    await world.add_consumer("z", {"t": 1}, config, credit=math.inf)
    await world.settle()
    x.wrapper.before_op = None
    await produce_everywhere(world, "t", 2)
    await world.settle()
    await world.drain()
    world.check_deliveries()
    return fired


def test_session_expiry_before_each_operation_of_a_rebalance_fake() -> None:
    fired = 0
    for position in range(1, MAX_OPERATION_INDEX):
        async def main() -> bool:
            async with GroupWorld.open(FakeBackend()) as world:
                return await expire_during_rebalance(world, position)

        if not trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)):
            break
        fired += 1
    print(f"x's session expired before each of its first {fired} operations after the join")
    # A rebalance is commit, release, reads, claims: a handful of operations at least.
    assert fired >= 4, f"the expiry hit only {fired} positions"


@pytest.mark.zookeeper
async def test_session_expiry_during_a_rebalance_real_zookeeper(zk_chroot, zookeeper_server, tmp_path) -> None:
    rng = fault_rng("expiry-during-rebalance")
    positions = sorted(rng.sample(range(1, 16), REAL_POSITIONS))
    print("expiring before operations", positions)
    fired = 0
    for run, position in enumerate(positions):
        async with open_kazoo_world(f"{zk_chroot}/run{run}", zookeeper_server.connect_string,
                                    str(tmp_path / f"run{run}")) as world:
            fired += await expire_during_rebalance(world, position)
    assert fired >= 1, "no expiry landed inside a rebalance"
