"""Live Kafka groups in ZooKeeper (docs/protocol.md §17.7): the coordinator's marks, 0.7's check.

While a Kafka consumer group has members, its coordinator holds the ephemeral
``/trikafka/kafka-groups/<g>`` with value ``{"version": 1, "broker_id": N}``;
trikafka's 0.7 group consumer reads it before registering under
``/consumers/<g>/ids`` and refuses a group the Kafka protocol holds.
"""

from __future__ import annotations

import json

from . import paths
from .client import ZooKeeperClient
from .errors import BadVersionError, InvalidPathError, NoNodeError

VERSION = 1


def encode_mark(broker_id: int) -> bytes:
    """The mark's value: the coordinating broker, §8.4's compact sorted JSON."""
    return json.dumps({"broker_id": broker_id, "version": VERSION}, separators=(",", ":"), sort_keys=True).encode()


def decode_mark(data: bytes) -> int | None:
    """The coordinating broker a mark names; None for a value this version cannot read."""
    try:
        value = json.loads(data)
        broker_id = value["broker_id"]
    except (ValueError, KeyError, TypeError):
        return None
    return broker_id if isinstance(broker_id, int) else None


def mark_path(group: str) -> str | None:
    """The group's mark, or None for a group id that cannot be a znode name (never a 0.7 group)."""
    try:
        return paths.kafka_group(group)
    except (InvalidPathError, ValueError):
        return None


async def mark(zk: ZooKeeperClient, group: str, broker_id: int) -> None:
    """Hold ``group``'s mark in this session: a mark of another session (the group's previous
    coordinator, whose session may outlive its role) is replaced, so the mark lives and dies with the
    current coordinator's session."""
    path = mark_path(group)
    if path is not None:
        await zk.hold_ephemeral(path, encode_mark(broker_id))


async def unmark(zk: ZooKeeperClient, group: str) -> None:
    """Delete ``group``'s mark if this session holds it; one of another session is its holder's."""
    path = mark_path(group)
    if path is None:
        return
    try:
        _data, stat = await zk.get(path)
        if stat.ephemeral_owner == zk.session_id:
            await zk.delete(path, version=stat.version)
    except (NoNodeError, BadVersionError):
        pass


async def coordinator_of_live_group(zk: ZooKeeperClient, group: str) -> int | None:
    """The broker coordinating Kafka group ``group`` while it has members (-1 when its mark does not
    say which); None when it is not a live Kafka group."""
    path = mark_path(group)
    if path is None:
        return None
    try:
        data, _ = await zk.get(path)
    except NoNodeError:
        return None
    found = decode_mark(data)
    return -1 if found is None else found
