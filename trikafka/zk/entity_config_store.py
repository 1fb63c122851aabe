"""Kafka's entity configs in ZooKeeper (docs/protocol.md §20.1, §20.4): ``/config/users``,
``/config/clients``, ``/config/users/<u>/clients``, ``/config/ips`` and ``/config/brokers``, each znode
``{"version":1,"config":{...}}``, and the change notifications under ``/config/changes`` that tell
every broker to read them again.
"""

from __future__ import annotations

import json
import logging
from typing import Callable

from . import paths
from .client import ZooKeeperClient
from .errors import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from .replication_values import ReplicationValueError
from .topic_config_store import decode_topic_config, encode_topic_config

logger = logging.getLogger(__name__)

# The entity types a tree holds: (root's child, the child type under each entity, if any).
_TREES = (("users", "clients"), ("clients", None), ("ips", None), ("brokers", None))
NOTIFICATION_VERSION = 2  # Kafka's config_change_ value version


async def _children(zk: ZooKeeperClient, path: str) -> list[str]:
    try:
        return sorted(await zk.children(path))
    except NoNodeError:
        return []


async def _read_one(zk: ZooKeeperClient, entity_path: str, into: dict[str, dict[str, str]]) -> None:
    path = paths.entity_config(entity_path)
    try:
        data, _stat = await zk.get(path)
    except NoNodeError:
        return
    try:
        config = decode_topic_config(data) if data else {}
    except ReplicationValueError as exc:
        logger.error("%s: %s; the entity is ignored", path, exc)
        return
    if config:
        into[entity_path] = config


async def read_entity_configs(zk: ZooKeeperClient) -> dict[str, dict[str, str]]:
    """Every entity with settings, by entity path (a znode that does not parse is logged and skipped)."""
    found: dict[str, dict[str, str]] = {}
    for root, child_type in _TREES:
        for name in await _children(zk, paths.entity_config(root)):
            await _read_one(zk, f"{root}/{name}", found)
            if child_type is not None:
                for child in await _children(zk, paths.entity_config(f"{root}/{name}/{child_type}")):
                    await _read_one(zk, f"{root}/{name}/{child_type}/{child}", found)
    return found


async def update_entity_config(zk: ZooKeeperClient, entity_path: str,
                               edit: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """Store ``edit(current)`` as the entity's settings (a versioned write, redone after a concurrent
    one); an empty result deletes the znode unless it has children.  Returns what was stored."""
    path = paths.entity_config(entity_path)
    while True:
        try:
            data, stat = await zk.get(path)
        except NoNodeError:
            after = edit({})
            if not after:
                return after
            try:
                await zk.create(path, encode_topic_config(after), makepath=True)
            except NodeExistsError:
                continue
            return after
        after = edit(decode_topic_config(data) if data else {})
        try:
            if after:
                await zk.set(path, encode_topic_config(after), version=stat.version)
            else:
                try:
                    await zk.delete(path, version=stat.version)
                except NotEmptyError:
                    await zk.set(path, encode_topic_config({}), version=stat.version)
        except (BadVersionError, NoNodeError):
            continue
        return after


async def notify_change(zk: ZooKeeperClient, entity_path: str) -> None:
    """Create ``/config/changes/config_change_<n>`` naming ``entity_path``, then delete the older ones
    (every broker reads the whole trees at any change of the children, so none is needed again)."""
    value = json.dumps({"version": NOTIFICATION_VERSION, "entity_path": entity_path},
                       separators=(",", ":")).encode()
    created = await zk.create(f"{paths.ENTITY_CONFIG_CHANGES}/{paths.ENTITY_CONFIG_CHANGE_PREFIX}", value,
                              sequential=True, makepath=True)
    mine = created.rsplit("/", 1)[-1]
    for name in await _children(zk, paths.ENTITY_CONFIG_CHANGES):
        if name.startswith(paths.ENTITY_CONFIG_CHANGE_PREFIX) and name < mine:
            try:
                await zk.delete(f"{paths.ENTITY_CONFIG_CHANGES}/{name}")
            except NoNodeError:
                pass

