"""The server side of the in-process ZooKeeper: one znode tree, sessions, ephemerals, watches.

:class:`FakeZooKeeper` is the "ensemble" that :class:`~trikafka.testing.fake_zookeeper_client.FakeZooKeeperClient`
clients talk to.  Operations are synchronous and atomic; all timing is Trio time.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable

import trio

from trikafka.zk.ops import CheckOp, CreateOp, DeleteOp, Op, OpResult, SetOp, Stat, WatchCallback
from trikafka.zk.errors import (
    BadVersionError,
    ZooKeeperClientError,
    InvalidPathError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from trikafka.zk.paths import parent_of, validate_path

log = logging.getLogger(__name__)

FIRST_SESSION_ID = 0x100_0000_0000_0001


@dataclass
class _Znode:
    data: bytes
    czxid: int
    mzxid: int
    pzxid: int
    ctime_ms: int
    mtime_ms: int
    version: int = 0
    # Like ZooKeeper's DataNode, the node stores how many children were ever
    # *created* under it (this numbers sequential children); the cversion it
    # reports also counts deletes: 2 * creates - live children.
    child_creates: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        return Stat(
            czxid=self.czxid, mzxid=self.mzxid, pzxid=self.pzxid, ctime_ms=self.ctime_ms,
            mtime_ms=self.mtime_ms, version=self.version,
            cversion=2 * self.child_creates - len(self.children),
            ephemeral_owner=self.ephemeral_owner, data_length=len(self.data),
            num_children=len(self.children),
        )

    def copy(self) -> "_Znode":
        return dataclasses.replace(self, children=set(self.children))


def _trio_clock_ms() -> int:
    return int(trio.current_time() * 1000)


class FakeZooKeeper:
    """The server side: one znode tree shared by every FakeZooKeeperClient on it.

    Operations are synchronous and atomic; watch callbacks are invoked after
    the operation has been applied.  Paths here are absolute (chroot applied).

    Bookkeeping follows the real server (3.8): every write request, failed or
    not, and every session open/close is one transaction with one zxid (all
    ops of a multi share it); a sequential child is numbered by the parent's
    count of child *creates*, so deletes do not advance the numbering while
    they do advance the reported ``cversion``.
    """

    def __init__(self, *, clock_ms: Callable[[], int] = _trio_clock_ms) -> None:
        self._clock_ms = clock_ms
        self._zxid = 0
        self._nodes: dict[str, _Znode] = {"/": _Znode(b"", 0, 0, 0, 0, 0)}
        # live session id -> callback run when the server ends it (expiry or close)
        self._live_sessions: dict[int, Callable[[list[WatchCallback]], None] | None] = {}
        self._next_session_id = FIRST_SESSION_ID
        # path -> [(session id, callback)]; one-shot, like ZooKeeper's watches.
        self._data_watches: dict[str, list[tuple[int, WatchCallback]]] = {}
        self._child_watches: dict[str, list[tuple[int, WatchCallback]]] = {}
        self._to_fire: list[WatchCallback] = []
        # Called with (path, value) for every create and set that took effect,
        # in order (a failed multi calls nothing): a simulation's eye on every write.
        self.write_listeners: list[Callable[[str, bytes], None]] = []

    # -- sessions -----------------------------------------------------------------

    def open_session(self, on_end: Callable[[list[WatchCallback]], None] | None = None) -> int:
        """Start a session.  ``on_end(dropped_watch_callbacks)`` runs when the
        server ends it, after its ephemerals are gone."""
        session_id = self._next_session_id
        self._next_session_id += 1
        self._begin_transaction()  # createSession is a transaction
        self._live_sessions[session_id] = on_end
        return session_id

    def session_alive(self, session_id: int | None) -> bool:
        return session_id in self._live_sessions

    def expire_session(self, session_id: int) -> None:
        """End a session (expiry or close): delete its ephemerals, fire watches."""
        if session_id not in self._live_sessions:
            return
        on_end = self._live_sessions.pop(session_id)
        self._begin_transaction()  # closeSession: one zxid for every ephemeral it removes
        dropped = self.drop_watches(session_id)
        owned = [p for p, n in self._nodes.items() if n.ephemeral_owner == session_id]
        for path in sorted(owned, key=len, reverse=True):
            self._remove(path)
        self._fire_pending()
        if on_end is not None:
            on_end(dropped)

    def drop_watches(self, session_id: int) -> list[WatchCallback]:
        """Forget a session's watches; returns their callbacks (the client fires them)."""
        dropped: list[WatchCallback] = []
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                kept = [(sid, cb) for sid, cb in table[path] if sid != session_id]
                dropped.extend(cb for sid, cb in table[path] if sid == session_id)
                if kept:
                    table[path] = kept
                else:
                    del table[path]
        return dropped

    # -- inspection ---------------------------------------------------------------

    def snapshot(self) -> dict[str, bytes]:
        """Every znode's data by path (for test assertions)."""
        return {path: node.data for path, node in sorted(self._nodes.items())}

    # -- operations (session-tagged) ----------------------------------------------

    def create(self, session_id: int, path: str, value: bytes, ephemeral: bool,
               sequential: bool, makepath: bool) -> str:
        if makepath:
            self._make_parents(path)
        self._begin_transaction()
        created = self._create_node(session_id, path, value, ephemeral, sequential)
        self._written([(created, value)])
        self._fire_pending()
        return created

    def get(self, session_id: int, path: str, watch: WatchCallback | None) -> tuple[bytes, Stat]:
        node = self._node(path)
        if watch is not None:
            self._data_watches.setdefault(path, []).append((session_id, watch))
        return node.data, node.stat()

    def exists(self, session_id: int, path: str, watch: WatchCallback | None) -> Stat | None:
        if watch is not None:
            self._data_watches.setdefault(path, []).append((session_id, watch))
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def children(self, session_id: int, path: str, watch: WatchCallback | None) -> list[str]:
        node = self._node(path)
        if watch is not None:
            self._child_watches.setdefault(path, []).append((session_id, watch))
        return sorted(node.children)

    def set(self, path: str, value: bytes, version: int) -> Stat:
        self._begin_transaction()
        stat = self._set_node(path, value, version)
        self._written([(path, value)])
        self._fire_pending()
        return stat

    def delete(self, path: str, version: int) -> None:
        self._begin_transaction()
        self._delete_node(path, version)
        self._fire_pending()

    def multi(self, session_id: int, ops: list[Op]) -> list[OpResult]:
        """All or nothing: on the first failure restore the snapshot, fire nothing.
        (The failed multi still used up its zxid, as on the real server.)"""
        self._begin_transaction()
        saved = self._save()
        results: list[OpResult] = []
        for index, op in enumerate(ops):
            try:
                results.append(self._apply_op(session_id, op))
            except ZooKeeperClientError as exc:
                self._restore(saved)
                exc.op_index = index
                raise
        writes: list[tuple[str, bytes]] = []
        for op, result in zip(ops, results):
            if isinstance(op, CreateOp):
                assert isinstance(result, str)  # a create's result is the created path
                writes.append((result, bytes(op.value)))
            elif isinstance(op, SetOp):
                writes.append((op.path, bytes(op.value)))
        self._written(writes)
        self._fire_pending()
        return results

    # -- internals ----------------------------------------------------------------

    def _written(self, writes: list[tuple[str, bytes]]) -> None:
        for listener in self.write_listeners:
            for path, value in writes:
                listener(path, value)

    def _apply_op(self, session_id: int, op: Op) -> OpResult:
        if isinstance(op, CreateOp):
            return self._create_node(session_id, op.path, bytes(op.value), op.ephemeral, op.sequential)
        if isinstance(op, SetOp):
            return self._set_node(op.path, bytes(op.value), op.version)
        if isinstance(op, DeleteOp):
            self._delete_node(op.path, op.version)
            return None
        assert isinstance(op, CheckOp)
        self._check_version(self._node(op.path), op.path, op.version)
        return None

    def _node(self, path: str) -> _Znode:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def _begin_transaction(self) -> int:
        """Allocate the zxid every change of the coming transaction carries."""
        self._zxid += 1
        return self._zxid

    def _make_parents(self, path: str) -> None:
        missing = []
        parent = parent_of(path)
        while parent not in self._nodes:
            missing.append(parent)
            parent = parent_of(parent)
        for ancestor in reversed(missing):
            self._begin_transaction()  # kazoo creates each missing parent by its own request
            self._create_node(0, ancestor, b"", False, False)

    def _create_node(self, session_id: int, path: str, value: bytes, ephemeral: bool, sequential: bool) -> str:
        parent_path = parent_of(path.rstrip("/") + "/x" if path.endswith("/") else path)
        parent = self._node(parent_path)
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError(path)
        if sequential:
            path = f"{path}{parent.child_creates:010d}"
        validate_path(path)
        if path in self._nodes:
            raise NodeExistsError(path)
        zxid, now_ms = self._zxid, self._clock_ms()
        owner = session_id if ephemeral else 0
        self._nodes[path] = _Znode(value, zxid, zxid, zxid, now_ms, now_ms, ephemeral_owner=owner)
        parent.children.add(path.rsplit("/", 1)[1])
        parent.child_creates += 1
        parent.pzxid = zxid
        self._trigger(self._data_watches, path)
        self._trigger(self._child_watches, parent_path)
        return path

    def _set_node(self, path: str, value: bytes, version: int) -> Stat:
        node = self._node(path)
        self._check_version(node, path, version)
        node.data = value
        node.version += 1
        node.mzxid = self._zxid
        node.mtime_ms = self._clock_ms()
        self._trigger(self._data_watches, path)
        return node.stat()

    def _delete_node(self, path: str, version: int) -> None:
        if path == "/":
            raise InvalidPathError("cannot delete the root")
        node = self._node(path)
        self._check_version(node, path, version)
        if node.children:
            raise NotEmptyError(path)
        self._remove(path)

    def _remove(self, path: str) -> None:
        """Unlink a childless node and trigger the watches of a delete."""
        del self._nodes[path]
        parent_path = parent_of(path)
        parent = self._nodes[parent_path]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.pzxid = self._zxid
        self._trigger(self._data_watches, path)
        self._trigger(self._child_watches, path)
        self._trigger(self._child_watches, parent_path)

    @staticmethod
    def _check_version(node: _Znode, path: str, version: int) -> None:
        if version != -1 and version != node.version:
            raise BadVersionError(f"{path}: version {node.version}, expected {version}")

    def _trigger(self, table: dict[str, list[tuple[int, WatchCallback]]], path: str) -> None:
        for _session_id, callback in table.pop(path, []):
            self._to_fire.append(callback)

    def _fire_pending(self) -> None:
        to_fire, self._to_fire = self._to_fire, []
        for callback in to_fire:
            try:
                callback()
            except Exception:  # a watcher's bug must not corrupt the server
                log.exception("fake ZooKeeper watch callback failed")

    def _save(self) -> tuple:
        return (
            {path: node.copy() for path, node in self._nodes.items()},
            self._zxid,
            {path: list(w) for path, w in self._data_watches.items()},
            {path: list(w) for path, w in self._child_watches.items()},
            list(self._to_fire),
        )

    def _restore(self, saved: tuple) -> None:
        self._nodes, self._zxid, self._data_watches, self._child_watches, self._to_fire = saved
