"""The registry for processes without a Trio loop (Spark planners and tasks): blocking kazoo.

Only the calls those processes need, behind one small class; every path and
value goes through ``trikafka.zk.paths`` and ``trikafka.zk.registry_values`` as in
the Trio ``ZooKeeperClient``.  The commit of an offset by a process that is not a
group member is fenced like a member's: see ``commit_offset_if_unowned``.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from . import paths
from .errors import ZooKeeperClientError

# The owner value a non-member holds for the instant of its fenced commit (never seen: same multi).
NON_MEMBER_OWNER = b"trikafka-non-member-commit"
# Rounds of one fenced commit (the offsets node appearing or vanishing between rounds).
COMMIT_ATTEMPTS_MAX = 16


class BlockingRegistry:
    """One blocking ZooKeeper session; ``connect`` may carry a chroot (``host:2181/kafka``).

    Raises ``ZooKeeperClientError`` when ZooKeeper cannot be reached.  Use as a
    context manager, or call ``close``.
    """

    def __init__(self, connect: str, *, timeout_s: float = 15.0):
        self.connect = connect
        self._zk = KazooClient(hosts=connect, timeout=timeout_s)
        try:
            self._zk.start(timeout=timeout_s)
        except Exception as exc:  # kazoo raises its own timeout type
            self._zk.close()
            raise ZooKeeperClientError(f"cannot reach ZooKeeper at {connect!r}: {exc}") from exc

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

    def __enter__(self) -> "BlockingRegistry":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def children(self, path: str) -> list[str]:
        """The children of ``path``; none when it does not exist."""
        try:
            return self._zk.get_children(paths.validate_path(path))
        except NoNodeError:
            return []

    def value(self, path: str) -> bytes | None:
        """The data of ``path``, or None when it does not exist."""
        try:
            return self._zk.get(paths.validate_path(path))[0]
        except NoNodeError:
            return None

    def commit_offset_if_unowned(
        self, group: str, topic: str, broker: int | None, partition: int, value: bytes
    ) -> bool:
        """Write ``value`` to the partition's offsets node unless a live group member owns it.

        A member commits only while it holds the partition's owner node (spec
        §8.3).  A non-member takes that node for the instant of the write:
        one multi creates it (ephemeral), writes the offset and deletes it.
        While a member owns the partition the create fails and nothing is
        written: returns False.  ``broker`` ``None`` names a partition of a
        replicated topic (``paths.REPLICATED_BROKER``).
        """
        owner = paths.consumer_owner(group, topic, broker, partition)
        path = paths.consumer_offset(group, topic, broker, partition)
        self._zk.ensure_path(paths.parent_of(owner))
        self._zk.ensure_path(paths.parent_of(path))
        exists = self._zk.exists(path) is not None
        for _attempt in range(COMMIT_ATTEMPTS_MAX):
            txn = self._zk.transaction()
            txn.create(owner, NON_MEMBER_OWNER, ephemeral=True)
            if exists:
                txn.set_data(path, value)
            else:
                txn.create(path, value)
            txn.delete(owner)
            results = txn.commit()
            if isinstance(results[0], NodeExistsError):
                return False  # a live member owns the partition
            if isinstance(results[1], (NodeExistsError, NoNodeError)):
                exists = not exists  # the offsets node appeared or vanished: flip and retry
                continue
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise ZooKeeperClientError(f"commit to {path} failed: {failed[0]!r}")
            return True
        raise ZooKeeperClientError(f"the offsets node {path} keeps changing under the commit")
