"""Fenced commits: offsets written, owner nodes released, in one multi checked against our registration."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.ops import CheckOp, CreateOp, DeleteOp, Op, SetOp
from trikafka.zk.errors import (
    BadVersionError,
    ConnectionLossError,
    ZooKeeperClientError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from .config import GroupConfig
from .fetcher import PartitionKey
from .membership import Membership
from .ownership import Ownership, key_of, offset_path, owner_path
from .registry import encode_offset

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer

# Rounds of one commit multi (a partition lost or an offsets node flipping between rounds).
COMMIT_ATTEMPTS_MAX = 16


class FencedCommits:
    """Commits and releases that a lost session or partition can never push through.

    ``lock`` is the consumer's: commits, registrations and rebalances take turns.
    """

    def __init__(self, zk: ZooKeeperClient, group: str, config: GroupConfig, *, lock: trio.Lock,
                 membership: Membership, ownership: Ownership):
        self._zk = zk
        self._group = group
        self._config = config
        self._lock = lock
        self._membership = membership
        self._ownership = ownership

    async def commit(self) -> bool:
        """Write the position of every owned partition to its offsets node (see ``GroupConsumer.commit``)."""
        async with self._lock:
            self._membership.check_session()
            return await self.commit_and_release(self._ownership.owned)

    async def commit_and_release(self, commit_keys: Iterable[PartitionKey], *,
                                 release: Iterable[PartitionKey] = (), deregister: bool = False) -> bool:
        """One multi: check our ids node, write changed offsets, delete released owner nodes.

        A partition whose owner node is gone or replaced is left out and the
        rest retried; a missing ids node means the session is lost (returns
        False); one replaced by another session means our id was taken over.
        Every check and delete names the version we created, so a node
        re-created by a successor with our consumer id never passes for ours.
        """
        membership, ownership = self._membership, self._ownership
        commit_keys, release = set(commit_keys), set(release)
        if deregister:
            release |= commit_keys
        lost: set[PartitionKey] = set()
        for _attempt in range(COMMIT_ATTEMPTS_MAX):
            ops: list[Op] = [CheckOp(membership.ids_path, membership.ids_version)]
            written: list[tuple[PartitionKey, int]] = []
            for key in sorted(commit_keys - lost):
                position = ownership.committable(key)  # never past an unacknowledged batch
                owner = owner_path(self._group, key)
                if key not in release:
                    ops.append(CheckOp(owner, ownership.owner_versions.get(key, -1)))
                if position is not None and position != ownership.committed.get(key):
                    path = offset_path(self._group, key)
                    value = encode_offset(position)
                    ops.append(SetOp(path, value) if key in ownership.offset_nodes else CreateOp(path, value))
                    written.append((key, position))
            for key in sorted(release - lost):
                ops.append(DeleteOp(owner_path(self._group, key), ownership.owner_versions.get(key, -1)))
            if deregister:
                ops.append(DeleteOp(membership.ids_path, membership.ids_version))
            if len(ops) == 1:
                return not lost
            try:
                await self._zk.multi(ops)
            except (NoNodeError, NodeExistsError, BadVersionError) as exc:
                failed = ops[exc.op_index] if exc.op_index is not None else ops[0]
                if failed is ops[0] or (deregister and failed is ops[-1]):
                    log.warning("consumer %s: registration gone, commit fenced off", membership.consumer_id)
                    membership.registered = False
                    await membership.raise_if_taken_over()
                    return False
                key = key_of(failed.path)
                if isinstance(failed, (SetOp, CreateOp)) and failed.path == offset_path(self._group, key):
                    # The offsets node appeared or vanished under us: flip the op and retry.
                    ownership.flip_offset_node(key)
                    continue
                log.warning("consumer %s no longer owns %s/%s; not committing it", membership.consumer_id, *key)
                lost.add(key)
                continue
            ownership.committed_to(written, release - lost)
            if deregister:
                membership.registered = False
            return not lost
        raise ZooKeeperClientError(f"consumer {membership.consumer_id}: offsets nodes keep changing under the commit")

    async def autocommit_loop(self) -> None:
        """Commit every ``autocommit_interval_s`` (when ``autocommit_enable``)."""
        if not self._config.autocommit_enable:
            return
        while True:
            await trio.sleep(self._config.autocommit_interval_s)
            try:
                await self.commit()
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("consumer %s: autocommit skipped: %s", self._membership.consumer_id, exc)
