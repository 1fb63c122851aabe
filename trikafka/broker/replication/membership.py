"""A broker's replication membership: its ``/trikafka/brokers/<id>`` value and controlled shutdown.

``tail_intact`` decides what the controller may trust (docs/protocol.md §12.2,
§12.7): after a clean stop, or a crash that did not reboot the machine (the page
cache outlived the process), every byte the broker appended is still there;
after a reboot without a clean stop, its unflushed tail may be gone and it
must not lead a partition whose committed bytes might have been only there.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Iterable

import trio

from ...log.fs import FileSystem
from ...log.names import BOOT_ID_FILE
from ...zk import paths
from ...zk.client import ZooKeeperClient
from ...zk.errors import NodeExistsError, NoNodeError
from ...zk.replication_store import read_assignment, read_state, replicated_topics

logger = logging.getLogger(__name__)

def tail_intact(*, clean_shutdown: bool, boot_id_now: str | None, boot_id_at_last_start: str | None) -> bool:
    """Whether every byte appended before the last stop survived it."""
    if clean_shutdown:
        return True
    # Without boot ids to compare, a reboot cannot be ruled out.
    return boot_id_now is not None and boot_id_now == boot_id_at_last_start


def record_boot_id(fs: FileSystem, log_dir: str, boot_id_now: str | None) -> str | None:
    """The boot id recorded at the broker's previous start; records ``boot_id_now``. Blocking."""
    path = os.path.join(log_dir, BOOT_ID_FILE)
    previous = None
    if fs.exists(path):
        previous = fs.read_file(path).decode("ascii", "replace").strip() or None
    if boot_id_now is not None and boot_id_now != previous:
        fs.write_synced(path, boot_id_now.encode("ascii"))
        fs.fsync_dir(log_dir)
    return previous


async def register_membership(zk: ZooKeeperClient, broker_id: int, host: str, port: int, *, intact: bool,
                              copied: Iterable[tuple[str, int]] = (), kafka_port: int | None = None) -> None:
    """Write ``/trikafka/brokers/<id>`` (ephemeral, this session); while the tail is lost, ``copied``
    names the replicas copied again since this start (§12.2 ``tail_copied``); ``kafka_port``: the
    broker's Kafka-protocol listener (§16.1)."""
    fields: dict[str, Any] = {"version": 1, "host": host, "port": port, "tail_intact": intact}
    if kafka_port is not None:
        fields["kafka_port"] = kafka_port
    if not intact:
        fields["tail_copied"] = encode_tail_copied(copied)
    value = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    # A leftover of this broker's previous session (the id under /brokers/ids is ours now) is
    # replaced: written over, it would still vanish when that session expires.
    await zk.hold_ephemeral(paths.replication_broker(broker_id), value)


def encode_tail_copied(copied: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``{(t, 2), (t, 0)}`` -> ``{"t": [0, 2]}``, the ``tail_copied`` value (§12.2)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(copied)):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def decode_tail_copied(value: Any) -> frozenset[tuple[str, int]]:
    """A ``tail_copied`` value read from ZooKeeper -> its (topic, partition) pairs; nothing if malformed."""
    if not isinstance(value, dict):
        return frozenset()
    return frozenset((topic, p) for topic, parts in value.items() if isinstance(topic, str) and isinstance(parts, list)
                     for p in parts if isinstance(p, int) and not isinstance(p, bool))


async def registered_before(zk: ZooKeeperClient, broker_id: int, mzxid: int | None) -> bool:
    """Whether a state written at ``mzxid`` names this broker's current incarnation (§12.7):
    this session's ``/brokers/ids/<id>`` existed when it was written (None: not known, trust it)."""
    if mzxid is None:
        return True
    stat = await zk.exists(paths.broker_id(broker_id))
    return stat is not None and stat.ephemeral_owner == zk.session_id and stat.czxid < mzxid


async def partitions_led_by(zk: ZooKeeperClient, broker_id: int) -> list[tuple[str, int]]:
    """The replicated partitions whose state names ``broker_id`` as leader."""
    led = []
    for topic in await replicated_topics(zk):
        assignment = await read_assignment(zk, topic)
        for partition in range(len(assignment.replicas) if assignment else 0):
            try:
                if (await read_state(zk, topic, partition)).state.leader == broker_id:
                    led.append((topic, partition))
            except NoNodeError:
                continue
    return led


async def controlled_shutdown(zk: ZooKeeperClient, broker_id: int, timeout_s: float) -> bool:
    """Ask the controller to move every leadership away; True once this broker leads nothing.

    False when ``timeout_s`` passed first (the broker then stops anyway: its
    partitions fail over as after a crash).
    """
    try:
        await zk.create(paths.shutting_down(broker_id), b"", ephemeral=True, makepath=True)
    except NodeExistsError:
        pass
    with trio.move_on_after(timeout_s):
        for topic, partition in await partitions_led_by(zk, broker_id):
            async for value in zk.watch_data(paths.partition_state(topic, partition)):
                if value is None or json.loads(value[0]).get("leader") != broker_id:
                    break
        return True
    logger.warning("controlled shutdown: still leading after %.1f s; stopping anyway", timeout_s)
    return False
