"""An in-process, deterministic ZooKeeper for unit tests and simulations.

:class:`FakeZooKeeper` is the "ensemble": the znode tree, sessions, ephemerals
and one-shot server-side watches.  :class:`FakeCoordinator` is a client with
kazoo's behaviour: requests made while SUSPENDED wait for the reconnect; a
disconnect fires and drops every watch of the client; a session that stays
disconnected for ``session_timeout_s`` of Trio time is expired by the server
(its ephemerals vanish at that moment, other clients' watches fire) and the
client only learns it on reconnect (LOST, then CONNECTED with a new session).

All timing is Trio time, so tests run under ``autojump_clock`` with no real sleeps.
Fault injection: :meth:`FakeCoordinator.disconnect`, :meth:`~FakeCoordinator.reconnect`,
:meth:`~FakeCoordinator.sever`, :meth:`~FakeCoordinator.expire`,
:meth:`~FakeCoordinator.lose_next_response`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import trio
from trio_util import wait_any

from .coordinator import (
    BaseCoordinator,
    CheckOp,
    CreateOp,
    DeleteOp,
    Op,
    OpResult,
    SessionState,
    SetOp,
    Stat,
    WatchCallback,
)
from .errors import (
    BadVersionError,
    ConnectionLossError,
    CoordinatorError,
    InvalidPathError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from .paths import parent_of, validate_path

log = logging.getLogger(__name__)

DEFAULT_RECONNECT_DELAY_S = 0.05
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
    """The server side: one znode tree shared by every FakeCoordinator on it.

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
            except CoordinatorError as exc:
                self._restore(saved)
                exc.op_index = index
                raise
        self._fire_pending()
        return results

    # -- internals ----------------------------------------------------------------

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


class FakeCoordinator(BaseCoordinator):
    """A client of :class:`FakeZooKeeper` with kazoo's session behaviour.

    Use as ``async with FakeCoordinator(server) as zk:``.  With no ``server`` a
    private one is created (``.server``).  ``chroot`` prefixes every path, like
    the chroot suffix of a connect string (created on start if missing).
    """

    def __init__(
        self,
        server: FakeZooKeeper | None = None,
        *,
        session_timeout_s: float = 6.0,
        chroot: str = "",
        reconnect_delay_s: float = DEFAULT_RECONNECT_DELAY_S,
    ) -> None:
        super().__init__()
        if chroot:
            validate_path(chroot)
        self.server = server if server is not None else FakeZooKeeper()
        self.session_timeout_s = session_timeout_s
        self.reconnect_delay_s = reconnect_delay_s
        self._chroot = "" if chroot in ("", "/") else chroot
        self._session: int | None = None
        self._started = False
        # Timers (expiry, reconnect) run as guarded system tasks, each in its own
        # cancel scope: the coordinator may be started and closed from different
        # tasks and nursery depths (a nursery held open between start() and
        # aclose() would corrupt the cancel-scope stack of the task closing it).
        self._background_scopes: set[trio.CancelScope] = set()
        self._expiry_timer: trio.CancelScope | None = None
        self._lose_next_response = False
        self._closing = False

    @property
    def session_id(self) -> int | None:
        return self._session if self.state.value is not SessionState.LOST else None

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Open the session (CONNECTED, generation 1)."""
        self._check_open()
        if self._started:
            raise RuntimeError("FakeCoordinator already started")
        self._started = True
        await trio.lowlevel.checkpoint()
        if self._chroot and self.server.exists(0, self._chroot, None) is None:
            self.server.create(0, self._chroot, b"", False, False, True)
        self._new_session()

    async def __aenter__(self) -> "FakeCoordinator":
        await self.start()
        return self

    async def aclose(self) -> None:
        """Close the session (its ephemerals vanish at once) and stop background tasks."""
        if self._closed:
            return
        self._closing = True
        if self._session is not None:
            self.server.expire_session(self._session)
        self._mark_closed()
        for scope in list(self._background_scopes):
            scope.cancel()
        await trio.lowlevel.checkpoint()

    # -- fault injection ------------------------------------------------------------

    def disconnect(self) -> None:
        """Drop the connection: SUSPENDED, watches fired and forgotten.  The
        server expires the session if it is not back within ``session_timeout_s``."""
        if self._closed or self.state.value is not SessionState.CONNECTED:
            return
        self._fire_dropped_watches()
        self._set_state(SessionState.SUSPENDED)
        self._start_expiry_timer()

    def reconnect(self) -> None:
        """Heal the connection: same session if it is still alive, else LOST then
        CONNECTED with a new session."""
        if self._closed or self.state.value is SessionState.CONNECTED:
            return
        self._cancel_expiry_timer()
        if self.state.value is SessionState.SUSPENDED and self.server.session_alive(self._session):
            self._set_state(SessionState.CONNECTED)
            return
        self._set_state(SessionState.LOST)
        self._new_session()

    def sever(self, reconnect_after_s: float | None = None) -> None:
        """Disconnect now and reconnect after ``reconnect_after_s`` (default
        ``reconnect_delay_s``), like a dropped TCP connection."""
        self.disconnect()
        self._schedule_reconnect(self.reconnect_delay_s if reconnect_after_s is None else reconnect_after_s)

    def expire(self) -> None:
        """Expire the session on the server now (ephemerals vanish); the client
        sees SUSPENDED, LOST, then CONNECTED with a new session ``reconnect_delay_s`` later."""
        if self._closed or self._session is None:
            return
        self.server.expire_session(self._session)

    def lose_next_response(self) -> None:
        """The next operation is applied by the server but its reply is lost:
        it raises ConnectionLossError and the connection is severed."""
        self._lose_next_response = True

    # -- internals ----------------------------------------------------------------

    def _new_session(self) -> None:
        self._session = self.server.open_session(self._on_session_end)
        self._set_state(SessionState.CONNECTED, new_session=True)

    def _on_session_end(self, dropped_watches: list[WatchCallback]) -> None:
        """The server ended our session.  Connected clients hear it at once (like
        kazoo after a duplicate-session close); disconnected ones on reconnect."""
        if self._closing or self.state.value is not SessionState.CONNECTED:
            return
        for callback in dropped_watches:
            callback()
        self._set_state(SessionState.SUSPENDED)
        self._set_state(SessionState.LOST)
        self._schedule_reconnect(self.reconnect_delay_s)

    def _fire_dropped_watches(self) -> None:
        if self._session is None:
            return
        for callback in self.server.drop_watches(self._session):
            callback()

    def _start_expiry_timer(self) -> None:
        self._cancel_expiry_timer()
        scope = trio.CancelScope()
        self._expiry_timer = scope
        self._spawn(self._expire_after_timeout, self._session, scope=scope)

    def _cancel_expiry_timer(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    async def _expire_after_timeout(self, session_id: int | None) -> None:
        await trio.sleep(self.session_timeout_s)
        if session_id is not None:
            self.server.expire_session(session_id)

    def _schedule_reconnect(self, delay_s: float) -> None:
        self._spawn(self._reconnect_later, delay_s)

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: object,
               scope: trio.CancelScope | None = None) -> None:
        """Run a timer task until done, cancelled, or the coordinator closes."""
        if self._closed:
            return
        scope = scope if scope is not None else trio.CancelScope()
        self._background_scopes.add(scope)
        trio.lowlevel.spawn_system_task(self._run_background, fn, args, scope,
                                        name=f"FakeCoordinator.{fn.__name__}")

    async def _run_background(self, fn: Callable[..., Awaitable[None]], args: tuple,
                              scope: trio.CancelScope) -> None:
        try:
            with scope:
                await fn(*args)
        except Exception:  # a system task must never raise: it would crash the run
            log.exception("fake ZooKeeper timer failed")
        finally:
            self._background_scopes.discard(scope)

    async def _reconnect_later(self, delay_s: float) -> None:
        await trio.sleep(delay_s)
        self.reconnect()

    async def _live_session(self) -> int:
        """The session an operation runs in; waits out SUSPENDED like kazoo's queue."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        session = self._session
        if self.state.value is SessionState.SUSPENDED:
            await wait_any(
                functools.partial(self.state.wait_value, lambda s: s is not SessionState.SUSPENDED),
                self._closed_event.wait,
            )
            self._check_open()
        if self.state.value is not SessionState.CONNECTED or self._session != session or session is None:
            raise SessionExpiredError("session expired")
        return session

    async def _run(self, operation: Callable[[int], object]):
        session = await self._live_session()
        result = operation(session)
        if self._lose_next_response:
            self._lose_next_response = False
            self.sever()
            raise ConnectionLossError("connection lost before the reply arrived")
        return result

    def _abs(self, path: str) -> str:
        if not self._chroot:
            return path
        return self._chroot if path == "/" else self._chroot + path

    def _rel(self, path: str) -> str:
        if not self._chroot:
            return path
        return path[len(self._chroot):] or "/"

    # -- primitives ---------------------------------------------------------------

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool, makepath: bool) -> str:
        created = await self._run(
            lambda sid: self.server.create(sid, self._abs(path), value, ephemeral, sequential, makepath))
        return self._rel(created)

    async def _get(self, path: str, watch: WatchCallback | None) -> tuple[bytes, Stat]:
        return await self._run(lambda sid: self.server.get(sid, self._abs(path), watch))

    async def _set(self, path: str, value: bytes, version: int) -> Stat:
        return await self._run(lambda sid: self.server.set(self._abs(path), value, version))

    async def _delete(self, path: str, version: int) -> None:
        await self._run(lambda sid: self.server.delete(self._abs(path), version))

    async def _exists(self, path: str, watch: WatchCallback | None) -> Stat | None:
        return await self._run(lambda sid: self.server.exists(sid, self._abs(path), watch))

    async def _children(self, path: str, watch: WatchCallback | None) -> list[str]:
        return await self._run(lambda sid: self.server.children(sid, self._abs(path), watch))

    async def _multi(self, ops: list[Op]) -> list[OpResult]:
        absolute = [dataclasses.replace(op, path=self._abs(op.path)) for op in ops]
        results = await self._run(lambda sid: self.server.multi(sid, absolute))
        return [self._rel(r) if isinstance(r, str) else r for r in results]
