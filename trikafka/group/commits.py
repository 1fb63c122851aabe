"""Fenced commits: offsets written, owner nodes released, in one multi checked against our registration."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from trikafka.zk import paths
from trikafka.zk.ops import CheckOp, CreateOp, DeleteOp, Op, SetOp
from trikafka.zk.errors import (
    BadVersionError,
    ConnectionLossError,
    CoordinatorError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from .fetcher import PartitionKey
from .registry import encode_offset, parse_partition_name

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer

# Rounds of one commit multi (a partition lost or an offsets node flipping between rounds).
COMMIT_ATTEMPTS_MAX = 16


class FencedCommits:
    """Commits and releases that a lost session or partition can never push through.

    Part of ``GroupConsumer``: the state it uses is set up in ``GroupConsumer.__init__``.
    """

    async def commit(self) -> bool:
        """Write the position of every owned partition to its offsets node.

        Fenced: nothing is written unless this consumer's session still holds
        its registration and the partitions.  Returns False when something
        could not be written (a lost session or partition; the new owner then
        starts from the previous commit, so messages may come again).  Raises
        ``ConsumerIdTakenOver`` when a newer process registered our id.
        """
        async with self._lock:
            self._check_session()
            return await self._commit_and_release(self.owned)

    async def _commit_and_release(self, commit_keys: Iterable[PartitionKey], *,
                                  release: Iterable[PartitionKey] = (), deregister: bool = False) -> bool:
        """One multi: check our ids node, write changed offsets, delete released owner nodes.

        A partition whose owner node is gone or replaced is left out and the
        rest retried; a missing ids node means the session is lost (returns
        False); one replaced by another session means our id was taken over.
        Every check and delete names the version we created, so a node
        re-created by a successor with our consumer id never passes for ours.
        """
        commit_keys, release = set(commit_keys), set(release)
        if deregister:
            release |= commit_keys
        lost: set[PartitionKey] = set()
        for _attempt in range(COMMIT_ATTEMPTS_MAX):
            ops: list[Op] = [CheckOp(self._ids_path, self._ids_version)]
            written: list[tuple[PartitionKey, int]] = []
            for key in sorted(commit_keys - lost):
                position = self._committable(key)  # never past an unacknowledged batch
                owner = self._owner_path(key)
                if key not in release:
                    ops.append(CheckOp(owner, self._owner_versions.get(key, -1)))
                if position is not None and position != self._committed.get(key):
                    path = self._offset_path(key)
                    value = encode_offset(position)
                    ops.append(SetOp(path, value) if key in self._offset_nodes else CreateOp(path, value))
                    written.append((key, position))
            for key in sorted(release - lost):
                ops.append(DeleteOp(self._owner_path(key), self._owner_versions.get(key, -1)))
            if deregister:
                ops.append(DeleteOp(self._ids_path, self._ids_version))
            if len(ops) == 1:
                return not lost
            try:
                await self._zk.multi(ops)
            except (NoNodeError, NodeExistsError, BadVersionError) as exc:
                failed = ops[exc.op_index] if exc.op_index is not None else ops[0]
                if failed is ops[0] or (deregister and failed is ops[-1]):
                    log.warning("consumer %s: registration gone, commit fenced off", self.consumer_id)
                    self._registered = False
                    await self._raise_if_taken_over()
                    return False
                key = self._key_of(failed.path)
                if isinstance(failed, (SetOp, CreateOp)) and failed.path == self._offset_path(key):
                    # The offsets node appeared or vanished under us: flip the op and retry.
                    self._offset_nodes.symmetric_difference_update({key})
                    continue
                log.warning("consumer %s no longer owns %s/%s; not committing it", self.consumer_id, *key)
                lost.add(key)
                continue
            for key, position in written:
                self._committed[key] = position
                self._offset_nodes.add(key)
            for key in release - lost:
                self._owner_versions.pop(key, None)
            if deregister:
                self._registered = False
            return not lost
        raise CoordinatorError(f"consumer {self.consumer_id}: offsets nodes keep changing under the commit")

    def _key_of(self, path: str) -> PartitionKey:
        parts = path.rsplit("/", 2)
        return parts[-2], parts[-1]

    def _owner_path(self, key: PartitionKey) -> str:
        broker_id, part = parse_partition_name(key[1])
        return paths.consumer_owner(self.group, key[0], broker_id, part)

    def _offset_path(self, key: PartitionKey) -> str:
        broker_id, part = parse_partition_name(key[1])
        return paths.consumer_offset(self.group, key[0], broker_id, part)

    async def _autocommit_loop(self) -> None:
        if not self.config.autocommit_enable:
            return
        while True:
            await trio.sleep(self.config.autocommit_interval_s)
            try:
                await self.commit()
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("consumer %s: autocommit skipped: %s", self.consumer_id, exc)
