"""Starting and cancelling a reassignment in ZooKeeper (docs/protocol.md §12.12.3): ``trikafka topics
reassign`` and AlterPartitionReassignments (§16.4) write the same plan the same way."""

from __future__ import annotations

from ...zk.client import ZooKeeperClient
from ...zk.errors import BadVersionError
from ...zk.registry import live_brokers
from ...zk.replication_store import read_assignment_versioned, write_assignment
from ...zk.replication_values import TopicAssignment
from .assignment import cancelled, plan_reassignment


async def start_reassignment(zk: ZooKeeperClient, topic: str, partition: int,
                             target: tuple[int, ...]) -> tuple[TopicAssignment, bool] | None:
    """Write the plan that moves ``topic``-``partition`` to ``target`` with the version read, deciding
    again on what is there after a concurrent write: the assignment it was decided on and whether a plan
    was written (False: nothing to do); None when ``topic`` is not a replicated topic.  Raises
    ``AssignmentError`` where ``plan_reassignment`` refuses."""
    live = set(await live_brokers(zk))
    while True:
        read = await read_assignment_versioned(zk, topic)
        if read is None:
            return None
        assignment, version = read
        plan = plan_reassignment(assignment, partition, target, live)
        if plan is None:
            return assignment, False
        try:
            await write_assignment(zk, topic, plan, version)
        except BadVersionError:
            continue  # someone wrote meanwhile
        return assignment, True


async def cancel_reassignment(zk: ZooKeeperClient, topic: str, partition: int) -> bool | None:
    """Undo ``topic``-``partition``'s move with the version read (§12.12.3): True once written, False when it
    is not moving, None when ``topic`` is not a replicated topic.  Raises ``AssignmentError`` where
    ``cancelled`` refuses."""
    while True:
        read = await read_assignment_versioned(zk, topic)
        if read is None:
            return None
        assignment, version = read
        undone = cancelled(assignment, partition)
        if undone is None:
            return False
        try:
            await write_assignment(zk, topic, undone, version)
        except BadVersionError:
            continue  # someone wrote meanwhile
        return True
