"""kazoo bridged into Trio without blocking the Trio loop or kazoo's threads.

How the two worlds meet (see the project's ZooKeeper notes for the measurements):

* Plain operations use kazoo's ``*_async`` methods, which only queue a request
  and poke a socketpair, so they are safe on the Trio thread.  Completion is
  delivered by ``AsyncResult.rawlink`` on kazoo's completion worker, which
  hands a wake-up to Trio through :class:`TrioBridge`.  No thread is pinned
  per call, so a long outage cannot exhaust Trio's thread limiter.
* Genuinely blocking kazoo calls (``start_async`` spawning threads, ``stop``,
  ``close``, the chroot bootstrap) run in ``trio.to_thread.run_sync`` with a
  *dedicated* CapacityLimiter, never Trio's process-wide default.
* Watch callbacks and state listeners arrive on three kinds of kazoo threads.
  They go through ``TrioToken.run_sync_soon``, which never blocks and keeps
  FIFO order; if the Trio run has ended the call is dropped and counted.
* The session id is captured on kazoo's thread at the CONNECTED transition, so
  a LOST that is followed ~50 ms later by CONNECTED still bumps
  ``session_generation`` even if a reader only looks at the current state.

kazoo logs under its own ``kazoo`` loggers; this module never configures handlers.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import trio
from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, ZnodeStat

from .connect import ConnectString, parse_connect_string
from .client import BaseZooKeeperClient
from .ops import (
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
    ZooKeeperClientClosedError,
    ZooKeeperClientError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)

log = logging.getLogger(__name__)

# Reconnect promptly after an outage: kazoo's default backoff grows to an hour,
# which made reconnects seconds late in the measurements.
DEFAULT_CONNECTION_RETRY: dict[str, Any] = dict(
    max_tries=-1, delay=0.05, backoff=1.5, max_delay=1.0, max_jitter=0.1
)
DEFAULT_MAX_THREADS = 4

_ERROR_MAP: dict[type, type[ZooKeeperClientError]] = {
    kazoo_errors.NoNodeError: NoNodeError,
    kazoo_errors.NodeExistsError: NodeExistsError,
    kazoo_errors.BadVersionError: BadVersionError,
    kazoo_errors.NotEmptyError: NotEmptyError,
    kazoo_errors.NoChildrenForEphemeralsError: NoChildrenForEphemeralsError,
    kazoo_errors.ConnectionClosedError: ZooKeeperClientClosedError,
    kazoo_errors.SessionExpiredError: SessionExpiredError,
    kazoo_errors.ConnectionLoss: ConnectionLossError,
    kazoo_errors.ConnectionDropped: ConnectionLossError,
    kazoo_errors.OperationTimeoutError: ConnectionLossError,
}
_ROLLBACK_ERRORS = (kazoo_errors.RolledBackError, kazoo_errors.RuntimeInconsistency)


def map_kazoo_error(exc: BaseException) -> ZooKeeperClientError:
    """The trikafka error for a kazoo exception (most specific class wins)."""
    for cls in type(exc).__mro__:
        mapped = _ERROR_MAP.get(cls)
        if mapped is not None:
            return mapped(str(exc) or type(exc).__name__)
    return ZooKeeperClientError(f"{type(exc).__name__}: {exc}")


def to_stat(stat: ZnodeStat) -> Stat:
    return Stat(
        czxid=stat.czxid, mzxid=stat.mzxid, pzxid=stat.pzxid, ctime_ms=stat.ctime,
        mtime_ms=stat.mtime, version=stat.version, cversion=stat.cversion,
        ephemeral_owner=stat.ephemeralOwner, data_length=stat.dataLength,
        num_children=stat.numChildren,
    )


class TrioBridge:
    """Run small callables on the Trio thread, from any thread, without blocking.

    ``call_soon`` never raises: after the Trio run has finished, calls are
    dropped and counted in ``dropped_calls``.  The delivered callable must not
    raise either (that would crash the run), so it is wrapped.
    """

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self.dropped_calls = 0

    def call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._token.run_sync_soon(self._guarded, fn, args)
        except trio.RunFinishedError:
            self.dropped_calls += 1

    @staticmethod
    def _guarded(fn: Callable[..., None], args: tuple) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("callback delivered from a kazoo thread failed")


class KazooZooKeeperClient(BaseZooKeeperClient):
    """The real coordinator: a kazoo client on ``connect_string``.

    Use as ``async with KazooZooKeeperClient("127.0.0.1:2181/kafka") as zk:``.
    ``session_timeout_s`` is a request; the server clamps it to its
    [min, max] session timeout.  With ``ensure_chroot`` the chroot of the
    connect string is created first if missing.

    Raises (from ``start``/``__aenter__``):
        ConnectionLossError: not connected within ``connect_timeout_s``.
    """

    def __init__(
        self,
        connect_string: str,
        *,
        session_timeout_s: float = 6.0,
        connect_timeout_s: float = 15.0,
        connection_retry: dict[str, Any] | None = None,
        ensure_chroot: bool = True,
        max_threads: int = DEFAULT_MAX_THREADS,
    ) -> None:
        super().__init__()
        self.connect: ConnectString = parse_connect_string(connect_string)
        self.session_timeout_s = session_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._connection_retry = dict(connection_retry or DEFAULT_CONNECTION_RETRY)
        self._ensure_chroot = ensure_chroot
        self._max_threads = max_threads
        self._client: KazooClient | None = None
        self._bridge: TrioBridge | None = None
        self._limiter: trio.CapacityLimiter | None = None
        self._session: int | None = None
        self._lost = False

    # -- properties ---------------------------------------------------------------

    @property
    def session_id(self) -> int | None:
        return self._session

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's ``(session id, password)`` while connected (fault injection uses it)."""
        return None if self._client is None else self._client.client_id

    @property
    def kazoo_client(self) -> KazooClient:
        """The underlying client, for tools and tests.  Call only its ``*_async``
        methods from the Trio thread."""
        if self._client is None:
            raise ZooKeeperClientClosedError("the ZooKeeper client is not started")
        return self._client

    @property
    def dropped_callbacks(self) -> int:
        return 0 if self._bridge is None else self._bridge.dropped_calls

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> "KazooZooKeeperClient":
        await self.start()
        return self

    async def start(self) -> None:
        """Connect (bootstrapping the chroot if asked) and wait for CONNECTED."""
        self._check_open()
        if self._client is not None:
            raise RuntimeError("KazooZooKeeperClient already started")
        self._bridge = TrioBridge(trio.lowlevel.current_trio_token())
        self._limiter = trio.CapacityLimiter(self._max_threads)
        try:
            with trio.fail_after(self.connect_timeout_s):
                if self.connect.chroot and self._ensure_chroot:
                    await self._in_thread(_ensure_chroot_blocking, self.connect, self.connect_timeout_s)
                client = KazooClient(
                    hosts=str(self.connect), timeout=self.session_timeout_s,
                    connection_retry=dict(self._connection_retry),
                )
                self._client = client
                client.add_listener(self._on_kazoo_state)
                await self._in_thread(client.start_async)
                await self.wait_connected()
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self.aclose()
            if isinstance(exc, trio.TooSlowError):
                raise ConnectionLossError(
                    f"no ZooKeeper session with {self.connect} within {self.connect_timeout_s} s") from exc
            raise

    async def aclose(self) -> None:
        """Close the session (the server deletes its ephemerals) and free kazoo's threads."""
        if self._closed:
            return
        self._mark_closed()
        client, self._client = self._client, None
        if client is None:
            return
        client.remove_listener(self._on_kazoo_state)
        with trio.CancelScope(shield=True):
            try:
                await self._in_thread(client.stop)
            except kazoo_errors.KazooException:
                log.warning("kazoo stop failed", exc_info=True)
            await self._in_thread(client.close)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # -- state --------------------------------------------------------------------

    def _on_kazoo_state(self, kazoo_state: str) -> None:
        """kazoo's state listener, on its ``zk_loop`` thread: must never block."""
        client = self._client
        client_id = client.client_id if (client is not None and kazoo_state == KazooState.CONNECTED) else None
        assert self._bridge is not None
        self._bridge.call_soon(self._apply_state, kazoo_state, client_id)

    def _apply_state(self, kazoo_state: str, client_id: tuple[int, bytes] | None) -> None:
        """On the Trio thread, in kazoo's order."""
        if self._closed:
            return
        if kazoo_state == KazooState.CONNECTED:
            session = client_id[0] if client_id else None
            new_session = self._lost or session != self._session
            self._session, self._lost = session, False
            self._set_state(SessionState.CONNECTED, new_session=new_session)
        elif kazoo_state == KazooState.LOST:
            self._session, self._lost = None, True
            self._set_state(SessionState.LOST)
        else:
            self._set_state(SessionState.SUSPENDED)

    # -- the thread-free call path -------------------------------------------------

    async def _await_result(self, result: Any) -> Any:
        """Wait for a kazoo IAsyncResult without a thread; map its exception."""
        assert self._bridge is not None
        done = trio.Event()
        bridge = self._bridge

        def on_ready(_result: Any) -> None:  # kazoo's completion thread
            bridge.call_soon(done.set)

        result.rawlink(on_ready)
        try:
            await done.wait()
        except BaseException:
            result.unlink(on_ready)  # abandon: the result is ignored
            raise
        try:
            return result.get_nowait()
        except kazoo_errors.KazooException as exc:
            raise map_kazoo_error(exc) from exc

    def _kazoo_watch(self, watch: WatchCallback | None) -> Callable[[Any], None] | None:
        if watch is None:
            return None
        bridge = self._bridge
        assert bridge is not None
        return lambda _event: bridge.call_soon(watch)

    def _live_client(self) -> KazooClient:
        self._check_open()
        assert self._client is not None
        return self._client

    # -- primitives ---------------------------------------------------------------

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool, makepath: bool) -> str:
        client = self._live_client()
        return await self._await_result(
            client.create_async(path, value, ephemeral=ephemeral, sequence=sequential, makepath=makepath))

    async def _get(self, path: str, watch: WatchCallback | None) -> tuple[bytes, Stat]:
        client = self._live_client()
        data, stat = await self._await_result(client.get_async(path, watch=self._kazoo_watch(watch)))
        return (data or b""), to_stat(stat)

    async def _set(self, path: str, value: bytes, version: int) -> Stat:
        client = self._live_client()
        return to_stat(await self._await_result(client.set_async(path, value, version)))

    async def _delete(self, path: str, version: int) -> None:
        client = self._live_client()
        await self._await_result(client.delete_async(path, version))

    async def _exists(self, path: str, watch: WatchCallback | None) -> Stat | None:
        client = self._live_client()
        stat = await self._await_result(client.exists_async(path, watch=self._kazoo_watch(watch)))
        return None if stat is None else to_stat(stat)

    async def _children(self, path: str, watch: WatchCallback | None) -> list[str]:
        client = self._live_client()
        return list(await self._await_result(client.get_children_async(path, watch=self._kazoo_watch(watch))))

    async def _multi(self, ops: list[Op]) -> list[OpResult]:
        transaction = self._live_client().transaction()
        for op in ops:
            _add_to_transaction(transaction, op)
        results = await self._await_result(transaction.commit_async())
        _raise_transaction_failure(results)
        return [_op_result(op, result) for op, result in zip(ops, results)]


def _add_to_transaction(transaction: Any, op: Op) -> None:
    if isinstance(op, CreateOp):
        transaction.create(op.path, bytes(op.value), ephemeral=op.ephemeral, sequence=op.sequential)
    elif isinstance(op, SetOp):
        transaction.set_data(op.path, bytes(op.value), op.version)
    elif isinstance(op, DeleteOp):
        transaction.delete(op.path, op.version)
    else:
        assert isinstance(op, CheckOp)
        transaction.check(op.path, op.version)


def _raise_transaction_failure(results: list) -> None:
    """A failed multi reports one error per op; the real one is not a rollback marker."""
    failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if not failures:
        return
    index, cause = next(((i, r) for i, r in failures if not isinstance(r, _ROLLBACK_ERRORS)), failures[0])
    error = map_kazoo_error(cause)
    error.op_index = index
    raise error from cause


def _op_result(op: Op, result: Any) -> OpResult:
    if isinstance(op, CreateOp):
        return result
    if isinstance(op, SetOp):
        return to_stat(result)
    return None


def _ensure_chroot_blocking(connect: ConnectString, timeout_s: float) -> None:
    """Create the chroot node with a short-lived chroot-less client (worker thread)."""
    client = KazooClient(hosts=connect.hosts_string, timeout=min(timeout_s, 10.0),
                         connection_retry=dict(DEFAULT_CONNECTION_RETRY))
    try:
        client.start(timeout=timeout_s)
        client.ensure_path(connect.chroot)
    except kazoo_errors.KazooException as exc:
        raise map_kazoo_error(exc) from exc
    except Exception as exc:  # kazoo's start timeout is not a KazooException
        raise ConnectionLossError(f"cannot create chroot {connect.chroot!r} on {connect.hosts_string}: {exc}") from exc
    finally:
        client.stop()
        client.close()
