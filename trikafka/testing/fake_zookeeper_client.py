"""The client side of the in-process, deterministic ZooKeeper for unit tests and simulations.

:class:`FakeZooKeeper` is the "ensemble": the znode tree, sessions, ephemerals
and one-shot server-side watches.  :class:`FakeZooKeeperClient` is a client with
kazoo's behaviour: requests made while SUSPENDED wait for the reconnect; a
disconnect fires and drops every watch of the client; a session that stays
disconnected for ``session_timeout_s`` of Trio time is expired by the server
(its ephemerals vanish at that moment, other clients' watches fire) and the
client only learns it on reconnect (LOST, then CONNECTED with a new session).

All timing is Trio time, so tests run under ``autojump_clock`` with no real sleeps.
Fault injection: :meth:`FakeZooKeeperClient.disconnect`, :meth:`~FakeZooKeeperClient.reconnect`,
:meth:`~FakeZooKeeperClient.sever`, :meth:`~FakeZooKeeperClient.expire`,
:meth:`~FakeZooKeeperClient.lose_next_response`, :meth:`~FakeZooKeeperClient.crash`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Awaitable, Callable

import trio

from trikafka.testing.fake_zookeeper import FakeZooKeeper
from trikafka.zk.client import BaseZooKeeperClient
from trikafka.zk.ops import Op, OpResult, SessionState, Stat, WatchCallback
from trikafka.zk.errors import ConnectionLossError, SessionExpiredError
from trikafka.zk.paths import validate_path

log = logging.getLogger(__name__)

DEFAULT_RECONNECT_DELAY_S = 0.05


class FakeZooKeeperClient(BaseZooKeeperClient):
    """A client of :class:`FakeZooKeeper` with kazoo's session behaviour.

    Use as ``async with FakeZooKeeperClient(server) as zk:``.  With no ``server`` a
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
            raise RuntimeError("FakeZooKeeperClient already started")
        self._started = True
        await trio.lowlevel.checkpoint()
        if self._chroot and self.server.exists(0, self._chroot, None) is None:
            self.server.create(0, self._chroot, b"", False, False, True)
        self._new_session()

    async def __aenter__(self) -> "FakeZooKeeperClient":
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

    def crash(self) -> None:
        """The client's process died: it sends nothing more and hears nothing more, and
        the server expires its session ``session_timeout_s`` later (its ephemerals stay
        until then, as a SIGKILLed broker's registration does)."""
        if self._closed:
            return
        self._closing = True
        session, server, timeout_s = self._session, self.server, self.session_timeout_s
        self._mark_closed()
        for scope in list(self._background_scopes):
            scope.cancel()
        if session is not None:
            async def expire_later() -> None:
                await trio.sleep(timeout_s)
                server.expire_session(session)

            trio.lowlevel.spawn_system_task(expire_later, name="FakeZooKeeperClient.crash.expire_later")

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
                                        name=f"FakeZooKeeperClient.{fn.__name__}")

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
            # Closing publishes LOST, so the state alone says when to go on (no task per request).
            await self.state.wait_value(lambda s: s is not SessionState.SUSPENDED)
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
