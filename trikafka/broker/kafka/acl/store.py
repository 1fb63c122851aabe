"""Where the ACLs live (docs/protocol.md §18.3): a file under the log dir, or one znode.

Both hold the same JSON list of ACL objects (``AclBinding.to_json``), sorted.
``FileAcls`` is synchronous (the CLI calls it directly, the broker from a
worker thread); ``ZooKeeperAcls`` goes through the project's coordinator.
Both edit by read-modify-write: the file by an atomic rename, the znode by a
versioned set that reads again when another writer came first.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Iterable

import trio

from trikafka.log.fs import FileSystem
from trikafka.log.names import ACL_FILE  # under the log dir, standalone (§18.3)
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import BadVersionError, NodeExistsError, NoNodeError

from ...seams import RunBlocking
from .model import AclBinding, AclSet

logger = logging.getLogger(__name__)
FILE_POLL_S = 1.0  # how often a standalone broker reads the ACL file for changes

ACL_ZNODE = paths.ACLS  # in a cluster (§18.3)

# Where a followed store delivers each new set (the authorizer's ``replace``).
Apply = Callable[[AclSet], None]
# An edit of the whole set: the ACLs before -> the ACLs after.
Edit = Callable[[AclSet], AclSet]


class AclStoreError(ValueError):
    """The stored ACLs do not decode; the message says where and why, in one line."""


def encode(acls: AclSet) -> bytes:
    """The stored form of ``acls``: a JSON list of ACL objects, sorted, one per line."""
    return ("[\n" + ",\n".join(json.dumps(a.to_json(), sort_keys=True) for a in acls.acls) + "\n]\n").encode()


def decode(raw: bytes, where: str) -> AclSet:
    """The ACLs of a stored value; empty for an empty value; AclStoreError naming ``where``."""
    if not raw.strip():
        return AclSet()
    try:
        items = json.loads(raw.decode("utf-8"))
        if not isinstance(items, list):
            raise ValueError("not a JSON list")
        return AclSet(AclBinding.from_json(item) for item in items)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AclStoreError(f"ACLs in {where} do not decode: {exc}") from None


def added(new: Iterable[AclBinding]) -> Edit:
    """An edit adding ``new`` (an ACL already there stays once)."""
    bindings = tuple(new)
    return lambda acls: AclSet((*acls.acls, *bindings))


def removed(gone: Iterable[AclBinding]) -> Edit:
    """An edit removing ``gone`` (an ACL not there is ignored)."""
    drop = frozenset(gone)
    return lambda acls: AclSet(a for a in acls.acls if a not in drop)


class FileAcls:
    """The standalone store, ``<log-dir>/.trikafka-acls.json``; blocking: call it off the event loop."""

    def __init__(self, fs: FileSystem, log_dir: str):
        self.fs = fs
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, ACL_FILE)

    def read_raw(self) -> bytes:
        """The file's bytes; empty when there is no file (no ACLs)."""
        return self.fs.read_file(self.path) if self.fs.exists(self.path) else b""

    def read(self) -> AclSet:
        return decode(self.read_raw(), self.path)

    def update(self, edit: Edit) -> AclSet:
        """Apply ``edit`` and write the result atomically (temporary file, fsync, rename, fsync dir)."""
        after = edit(self.read())
        self.fs.makedirs(self.log_dir)
        temporary = self.path + ".tmp"
        self.fs.write_synced(temporary, encode(after))
        self.fs.rename(temporary, self.path)
        self.fs.fsync_dir(self.log_dir)
        return after


class ZooKeeperAcls:
    """The cluster store, the znode ``/trikafka/acls``, through the project's coordinator."""

    def __init__(self, zk: ZooKeeperClient):
        self.zk = zk

    async def read(self) -> AclSet:
        try:
            data, _ = await self.zk.get(ACL_ZNODE)
        except NoNodeError:
            return AclSet()
        return decode(data, ACL_ZNODE)

    async def update(self, edit: Edit) -> AclSet:
        """Apply ``edit`` with a versioned set, reading again after a concurrent change."""
        while True:
            try:
                data, stat = await self.zk.get(ACL_ZNODE)
            except NoNodeError:
                after = edit(AclSet())
                try:
                    await self.zk.create(ACL_ZNODE, encode(after), makepath=True)
                    return after
                except NodeExistsError:
                    continue
            after = edit(decode(data, ACL_ZNODE))
            try:
                await self.zk.set(ACL_ZNODE, encode(after), version=stat.version)
                return after
            except BadVersionError:
                continue


async def follow_file(store: FileAcls, run_blocking: RunBlocking, apply: Apply, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Deliver the file's ACLs now, then again whenever its contents change (read once every
    ``FILE_POLL_S`` in a worker thread).  A file that does not decode keeps the last good set,
    logged once per distinct content."""
    last: bytes | None = None
    while True:
        try:
            raw = await run_blocking(store.read_raw)
        except OSError as exc:
            logger.warning("cannot read the ACL file %s: %s", store.path, exc)
            raw = last
        if raw is not None and raw != last:
            last = raw
            try:
                apply(decode(raw, store.path))
            except AclStoreError as exc:
                logger.error("%s; keeping the ACLs loaded before", exc)
        task_status.started()
        task_status = trio.TASK_STATUS_IGNORED
        await trio.sleep(FILE_POLL_S)


async def follow_znode(zk: ZooKeeperClient, apply: Apply, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Deliver ``/trikafka/acls``'s ACLs now, then on every change (a ZooKeeper data watch)."""
    async for value in zk.watch_data(ACL_ZNODE):
        try:
            apply(AclSet() if value is None else decode(value[0], ACL_ZNODE))
        except AclStoreError as exc:
            logger.error("%s; keeping the ACLs loaded before", exc)
        task_status.started()
        task_status = trio.TASK_STATUS_IGNORED
