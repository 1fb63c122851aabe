"""Reads and conditional writes of the replication znodes, through the ZooKeeperClient API.

Every write that decides something is versioned: a controller sets a state
with the version it read, a leader changes the ISR with the version it read,
and ``BadVersionError`` tells the loser to re-read and re-decide (docs/protocol.md
§12.2).  The controller's own epoch comes from a versioned bump of
``/trikafka/controller_epoch`` made after winning ``/trikafka/controller``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Collection

from . import paths
from .client import ZooKeeperClient
from .ops import CreateOp, DeleteOp, Op, SetOp, Stat
from .errors import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from .replication_values import PartitionState, ReplicationValueError, TopicAssignment


class TopicExistsError(NodeExistsError):
    """The replicated topic (or a 0.7 topic of that name) already exists."""


@dataclass(frozen=True, slots=True)
class VersionedState:
    """A partition state and the znode version it was read at."""

    state: PartitionState
    version: int
    mzxid: int = 0  # the zxid of its last write: a leader registered after it lost its in-memory leadership


async def create_topic(zk: ZooKeeperClient, topic: str, assignment: TopicAssignment,
                       states: list[PartitionState]) -> None:
    """Create a replicated topic and its partitions' first states in one transaction.

    Raises TopicExistsError if ``/trikafka/topics/<t>`` exists already.
    """
    if len(states) != len(assignment.replicas):
        raise ValueError(f"{len(states)} states for {len(assignment.replicas)} partitions")
    await zk.ensure_path(paths.REPLICATED_TOPICS)
    topic_path = paths.replicated_topic(topic)
    ops = [CreateOp(topic_path, assignment.encode()), CreateOp(f"{topic_path}/partitions")]
    for partition, state in enumerate(states):
        state_path = paths.partition_state(topic, partition)
        ops += [CreateOp(paths.parent_of(state_path)), CreateOp(state_path, state.encode())]
    try:
        await zk.multi(ops)
    except NodeExistsError:
        raise TopicExistsError(f"topic {topic!r} already exists") from None


async def create_assigned_topic(zk: ZooKeeperClient, topic: str, assignment: TopicAssignment) -> None:
    """§12.12.2: create a replicated topic whose partitions start led by their first replica,
    at epoch 0, in the current controller epoch.  Raises TopicExistsError."""
    controller_epoch = await _controller_epoch(zk)
    states = [PartitionState(r[0], 0, r, controller_epoch) for r in assignment.replicas]
    await create_topic(zk, topic, assignment, states)


async def _controller_epoch(zk: ZooKeeperClient) -> int:
    try:
        return int((await zk.get(paths.CONTROLLER_EPOCH))[0])
    except NoNodeError:
        return 0


async def add_assigned_partitions(zk: ZooKeeperClient, topic: str,
                                  plan: Callable[[TopicAssignment], TopicAssignment]) -> TopicAssignment:
    """Grow a replicated topic (docs/protocol.md §16.4, CreatePartitions): ``plan(current)`` gives the
    longer assignment; one transaction sets the topic znode at the version read and creates the new
    partitions' first states (led by their first replica, epoch 0).  A concurrent change of the topic
    znode makes it read again and redo.  NoNodeError when the topic is not replicated; whatever
    ``plan`` raises passes through."""
    while True:
        found = await read_assignment_versioned(zk, topic)
        if found is None:
            raise NoNodeError(paths.replicated_topic(topic))
        current, version = found
        grown = plan(current)
        old = len(current.replicas)
        controller_epoch = await _controller_epoch(zk)
        ops: list[Op] = [SetOp(paths.replicated_topic(topic), grown.encode(), version)]
        for partition in range(old, len(grown.replicas)):
            replicas = grown.replicas[partition]
            state_path = paths.partition_state(topic, partition)
            ops += [CreateOp(paths.parent_of(state_path)),
                    CreateOp(state_path, PartitionState(replicas[0], 0, replicas, controller_epoch).encode())]
        try:
            await zk.multi(ops)
        except BadVersionError:
            continue
        return grown


async def delete_replicated_topic(zk: ZooKeeperClient, topic: str, attempts: int = 5) -> None:
    """Delete ``/trikafka/topics/<t>`` with its partitions and their states in one transaction
    (docs/protocol.md §16.4, DeleteTopics); brokers see it gone through their topic watch.
    NoNodeError when the topic is not replicated."""
    topic_path = paths.replicated_topic(topic)
    for attempt in range(attempts):
        await zk.get(topic_path)  # NoNodeError: no such replicated topic
        ops: list[Op] = []
        for path in await _subtree(zk, f"{topic_path}/partitions"):
            ops.append(DeleteOp(path))
        ops.append(DeleteOp(topic_path))
        try:
            await zk.multi(ops)
            return
        except (NoNodeError, NotEmptyError):
            if attempt == attempts - 1 or not await zk.exists(topic_path):
                raise  # gone meanwhile (another DeleteTopics), or it keeps changing
            # a partition came or went between the reads and the transaction: read again


async def _subtree(zk: ZooKeeperClient, path: str) -> list[str]:
    """``path`` and every node under it, children before their parents; [] when absent."""
    try:
        children = await zk.children(path)
    except NoNodeError:
        return []
    nodes: list[str] = []
    for child in children:
        nodes += await _subtree(zk, f"{path}/{child}")
    return nodes + [path]


async def replicated_topics(zk: ZooKeeperClient) -> list[str]:
    """Names of the replicated topics (sorted)."""
    try:
        return sorted(await zk.children(paths.REPLICATED_TOPICS))
    except NoNodeError:
        return []


async def partition_states(zk: ZooKeeperClient, on_bad_topic: Callable[[str, Exception], None],
                           topics: Collection[str] = ()
                           ) -> AsyncIterator[tuple[str, int, tuple[int, ...], PartitionState | None]]:
    """``(topic, partition, replicas, state)`` of every replicated partition (of ``topics`` only,
    if given); ``state`` is None when the partition has none or it does not parse.  A topic whose
    assignment does not parse is skipped after ``on_bad_topic(topic, exc)``."""
    for topic in await replicated_topics(zk):
        if topics and topic not in topics:
            continue
        try:
            assignment = await read_assignment(zk, topic)
        except ReplicationValueError as exc:
            on_bad_topic(topic, exc)
            continue
        for partition, replicas in enumerate(assignment.replicas if assignment else ()):
            try:
                state: PartitionState | None = (await read_state(zk, topic, partition)).state
            except (NoNodeError, ReplicationValueError):
                state = None
            yield topic, partition, replicas, state


async def read_assignment(zk: ZooKeeperClient, topic: str) -> TopicAssignment | None:
    """The topic's assignment, or None for a topic that is not replicated."""
    try:
        data, _stat = await zk.get(paths.replicated_topic(topic))
    except NoNodeError:
        return None
    return TopicAssignment.decode(data)


async def read_assignment_versioned(zk: ZooKeeperClient, topic: str) -> tuple[TopicAssignment, int] | None:
    """The topic's assignment and its znode version, or None for a topic that is not replicated."""
    try:
        data, stat = await zk.get(paths.replicated_topic(topic))
    except NoNodeError:
        return None
    return TopicAssignment.decode(data), stat.version


async def write_assignment(zk: ZooKeeperClient, topic: str, assignment: TopicAssignment, version: int) -> int:
    """Set the topic znode if it is still at ``version``; the new version.  BadVersionError if not."""
    stat: Stat = await zk.set(paths.replicated_topic(topic), assignment.encode(), version)
    return stat.version


async def read_state(zk: ZooKeeperClient, topic: str, partition: int) -> VersionedState:
    """The partition's state and its version; NoNodeError if there is none."""
    data, stat = await zk.get(paths.partition_state(topic, partition))
    return VersionedState(PartitionState.decode(data), stat.version, stat.mzxid)


async def write_state(zk: ZooKeeperClient, topic: str, partition: int, state: PartitionState, version: int) -> int:
    """Set the state if it is still at ``version``; the new version.  BadVersionError if not."""
    return (await write_state_versioned(zk, topic, partition, state, version)).version


async def write_state_versioned(zk: ZooKeeperClient, topic: str, partition: int, state: PartitionState,
                                version: int) -> VersionedState:
    """As ``write_state``; the state as now stored, with its new version and mzxid."""
    stat: Stat = await zk.set(paths.partition_state(topic, partition), state.encode(), version)
    return VersionedState(state, stat.version, stat.mzxid)


async def claim_controller(zk: ZooKeeperClient, broker_id: int) -> int | None:
    """Try to become the controller; its new controller epoch, or None if someone else is.

    The epoch is bumped only after the ephemeral ``/trikafka/controller`` is
    ours, with a versioned set, so two claimants can never share an epoch.
    """
    await zk.ensure_path(paths.TRIKAFKA)
    try:
        await zk.create(paths.CONTROLLER, b"", ephemeral=True)
    except NodeExistsError:
        return None
    while True:
        try:
            data, stat = await zk.get(paths.CONTROLLER_EPOCH)
            epoch = _parse_epoch(data) + 1
            await zk.set(paths.CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
        except NoNodeError:
            epoch = 1
            try:
                await zk.create(paths.CONTROLLER_EPOCH, b"1")
            except NodeExistsError:
                continue
        break
    value = {"version": 1, "broker_id": broker_id, "controller_epoch": epoch}
    await zk.set(paths.CONTROLLER, json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
    return epoch


def _parse_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ReplicationValueError(f"controller epoch {data!r} is not a decimal integer") from None
