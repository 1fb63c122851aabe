"""The settings of Kafka's config entities: users, client ids, their pairs and client IP addresses
(docs/protocol.md §20.1).

An entity is named by Kafka's entity path (``users/<u>``, ``clients/<c>``,
``users/<u>/clients/<c>``, ``ips/<ip>``; user and client names URL-encoded,
``<default>`` for a default).
``FileEntityConfigs`` keeps them in the log directory (standalone),
``ZooKeeperEntityConfigs`` in Kafka's znodes, following their change
notifications.  Both hold every entity in memory (``entities``) and call
``on_change`` with all of them after each change they apply.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import urllib.parse
from typing import Callable, Mapping, NamedTuple, Protocol

import trio

from trikafka.log.fs import OsFileSystem
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.entity_config_store import notify_change, read_entity_configs, update_entity_config

from .seams import RunBlocking

logger = logging.getLogger(__name__)

ENTITY_CONFIGS_FILE = ".trikafka-entity-configs.json"
FILE_VERSION = 1
DEFAULT_NAME = "<default>"  # an entity path's name for the default of its type
USER, CLIENT_ID, IP = "user", "client-id", "ip"  # the quota entity types (DescribeClientQuotas' names)
# Entity type -> its entity path's word, in the path's order (a user before its client id).
_PATH_WORDS = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
_TYPES_BY_WORD = {word: kind for kind, word in _PATH_WORDS.items()}

Entities = dict[str, dict[str, str]]  # entity path -> its settings
Edit = Callable[[dict[str, str]], dict[str, str]]


class EntityError(ValueError):
    """An entity that cannot be named (an unknown type, a type twice, a bad path); the message says which."""


def sanitize(name: str) -> str:
    """A name as an entity path holds it: URL-encoded as Java's ``URLEncoder`` does, ``*`` as ``%2A``
    (Kafka's ``Sanitizer``), so it never holds a ``/``."""
    return urllib.parse.quote_plus(name, safe="*").replace("*", "%2A").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote_plus(name)


def ip_key(address: str) -> str | None:
    """``address`` as IP entities compare it (``0:0::1`` is ``::1``); None when it is no IP address."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


# How each entity type's names appear in a path (IP addresses as given, as Kafka writes them).
_ENCODE_NAME: dict[str, Callable[[str], str]] = {USER: sanitize, CLIENT_ID: sanitize, IP: lambda name: name}
_DECODE_NAME: dict[str, Callable[[str], str]] = {USER: desanitize, CLIENT_ID: desanitize, IP: lambda name: name}


class Component(NamedTuple):
    """One part of an entity: its type and name (None: the default of the type)."""

    kind: str
    name: str | None


def entity_path(components: list[Component]) -> str:
    """The entity path of ``components`` (in any order); EntityError for an unknown or repeated type."""
    by_kind: dict[str, str | None] = {}
    for kind, name in components:
        if kind not in _PATH_WORDS:
            raise EntityError(f"entity type {kind!r} is not served (user, client-id and ip are)")
        if kind in by_kind:
            raise EntityError(f"entity type {kind!r} named twice")
        if kind == IP and name is not None and ip_key(name) is None:
            raise EntityError(f"{name!r} is not a valid IP address")
        by_kind[kind] = name
    if not by_kind:
        raise EntityError("an entity needs a user, a client-id or an ip")
    if IP in by_kind and len(by_kind) > 1:
        raise EntityError("entity type 'ip' cannot be combined with user or client-id")
    return "/".join(f"{_PATH_WORDS[kind]}/{DEFAULT_NAME if name is None else _ENCODE_NAME[kind](name)}"
                    for kind, name in sorted(by_kind.items(), key=lambda item: list(_PATH_WORDS).index(item[0])))


def components(path: str) -> list[Component]:
    """The components of an entity path (the inverse of ``entity_path``); EntityError for a bad one."""
    words = path.split("/")
    if len(words) % 2 or not words or any(word not in _TYPES_BY_WORD for word in words[::2]):
        raise EntityError(f"{path!r} is not an entity path")
    return [Component(_TYPES_BY_WORD[word], None if name == DEFAULT_NAME else _DECODE_NAME[_TYPES_BY_WORD[word]](name))
            for word, name in zip(words[::2], words[1::2])]


class EntityConfigStore(Protocol):
    """Where the entities live, as the apis see it."""

    entities: Entities  # this broker's view, by entity path

    async def update(self, edits: Mapping[str, Edit]) -> Entities:
        """Apply each entity's edit, store, and answer the entities now in force here."""


class FileEntityConfigs:
    """A standalone broker's entities: ``<log-dir>/.trikafka-entity-configs.json`` (§20.1)."""

    def __init__(self, log_dir: str, run_blocking: RunBlocking, on_change: Callable[[Entities], None]):
        self.path = os.path.join(log_dir, ENTITY_CONFIGS_FILE)
        self._log_dir = log_dir
        self._run_blocking = run_blocking
        self._on_change = on_change
        self._lock = trio.Lock()  # one read-modify-write at a time
        self.entities: Entities = {}

    async def load(self) -> None:
        """Read the file (in a worker thread) and put its entities in force."""
        self.entities = await self._run_blocking(self._read)
        self._on_change(self.entities)

    def _read(self) -> Entities:
        try:
            with open(self.path, "rb") as f:
                body = json.loads(f.read())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.error("%s: %s; no entity settings are in force", self.path, exc)
            return {}
        entities = body.get("entities") if isinstance(body, dict) and body.get("version") == FILE_VERSION else None
        if not isinstance(entities, dict):
            logger.error("%s: not a version-%d entity settings file; none is in force", self.path, FILE_VERSION)
            return {}
        return {str(path): {str(k): str(v) for k, v in config.items()}
                for path, config in entities.items() if isinstance(config, dict) and config}

    def _write(self, entities: Entities) -> None:
        fs = OsFileSystem()
        body = {"version": FILE_VERSION, "entities": entities}
        tmp = f"{self.path}.tmp"
        fs.write_synced(tmp, (json.dumps(body, sort_keys=True, indent=1) + "\n").encode())
        fs.rename(tmp, self.path)
        fs.fsync_dir(self._log_dir)

    async def update(self, edits: Mapping[str, Edit]) -> Entities:
        async with self._lock:
            after = {path: dict(config) for path, config in self.entities.items()}
            for path, edit in edits.items():
                config = edit(dict(after.get(path, {})))
                if config:
                    after[path] = config
                else:
                    after.pop(path, None)
            await self._run_blocking(self._write, after)
            self.entities = after
            self._on_change(after)
            return after


class ZooKeeperEntityConfigs:
    """A broker's view of Kafka's entity znodes, read again whole at each change notification (§20.1)."""

    def __init__(self, zk: ZooKeeperClient, on_change: Callable[[Entities], None]):
        self._zk = zk
        self._on_change = on_change
        self.entities: Entities = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow ``/config/changes`` until cancelled; started once the stored entities are in force."""
        await self._zk.ensure_path(paths.ENTITY_CONFIG_CHANGES)
        started = False
        async for _children in self._zk.watch_children(paths.ENTITY_CONFIG_CHANGES):
            await self._reload()
            if not started:
                task_status.started()
                started = True

    async def _reload(self) -> None:
        entities = await read_entity_configs(self._zk)
        if entities != self.entities:
            logger.info("entity settings from ZooKeeper: %d entities", len(entities))
        self.entities = entities
        self._on_change(entities)

    async def update(self, edits: Mapping[str, Edit]) -> Entities:
        for path, edit in edits.items():
            await update_entity_config(self._zk, path, edit)
            await notify_change(self._zk, path)
        await self._reload()  # in force here at once; the other brokers follow the notification
        return self.entities
