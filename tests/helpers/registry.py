"""ZooKeeper registry helpers shared by the broker, controller and command-line tests.

They work on any coordinator (the fake or kazoo): writing what a starting broker
registers, and waiting, bounded by ``WAIT_S``, for a znode to reach a value.
"""

from __future__ import annotations

from typing import Any, Callable

import trio

from trikafka.broker.replication.membership import register_membership
from trikafka.zk.replication_values import PartitionState

WAIT_S = 20.0  # bound on waiting for a watch; a hang fails instead of stalling


async def wait_for_value(zk: Any, path: str,
                         predicate: Callable[[Any], bool] = lambda value: value is not None) -> Any:
    """The first (data, stat) or None at ``path`` satisfying ``predicate``."""
    with trio.fail_after(WAIT_S):
        async for value in zk.watch_data(path):
            if predicate(value):
                return value
    raise AssertionError(f"watch on {path} ended")


async def register_broker(zk: Any, broker_id: int) -> None:
    """What a starting broker writes for the controller: its 0.7 registration, then its replication
    membership (tail intact: until it says so, the controller does not elect it)."""
    await zk.create(f"/brokers/ids/{broker_id}", f"127.0.0.1-1:127.0.0.1:{9000 + broker_id}".encode(),
                    ephemeral=True, makepath=True)
    await register_membership(zk, broker_id, "127.0.0.1", 9000 + broker_id, intact=True)


async def wait_for_state(zk: Any, predicate: Callable[[PartitionState], bool]) -> PartitionState:
    """The first state of partition 0 of topic ``orders`` satisfying ``predicate``."""
    with trio.fail_after(WAIT_S):
        async for value in zk.watch_data("/trikafka/topics/orders/partitions/0/state"):
            if value is not None:
                state = PartitionState.decode(value[0])
                if predicate(state):
                    return state
    raise AssertionError("watch ended")
