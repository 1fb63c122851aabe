"""The ZooKeeper client interface trikafka uses: async, Trio-native.

Two implementations share :class:`BaseZooKeeperClient`:

* :class:`~trikafka.zk.kazoo_bridge.KazooZooKeeperClient`, kazoo bridged into Trio;
* :class:`~trikafka.testing.FakeZooKeeperClient`, an in-process, deterministic model.

Session model (kazoo's, which mirrors ZooKeeper's):

* ``CONNECTED``: requests flow.  ``SUSPENDED``: the connection dropped; the
  session may still be alive, requests wait for the reconnect.  ``LOST``: the
  session expired; every ephemeral and watch of it is gone.  The client then
  reconnects by itself with a *new* session.
* ``LOST`` is followed by ``CONNECTED`` within milliseconds, so "current
  state" is a poor way to learn about expiry.  Owners of ephemerals watch
  ``session_generation`` (bumped once per new session) or subscribe to
  :meth:`BaseZooKeeperClient.state_changes`, which never coalesces.

Watches are surfaced as async iterators that re-arm ZooKeeper's one-shot
watches themselves and yield the *current* value whenever it changed: a
level-triggered view that survives disconnects and session expiry.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import weakref
from typing import Iterator, Protocol, Sequence

import trio
from trio_util import AsyncValue, wait_any

from .errors import BadVersionError, ZooKeeperClientClosedError, NodeExistsError, NoNodeError, NotEmptyError
from .ops import Op, OpResult, SessionState, Stat, WatchCallback, _check_bytes, _validate_op
from .paths import join, validate_path
from .watches import ChildrenWatch, DataWatch, _Watch

log = logging.getLogger(__name__)

# After a ConnectionLoss/SessionExpired the state callback may still be on its
# way; back off briefly before trusting "CONNECTED" again to avoid a hot loop.
RECONNECT_BACKOFF_S = 0.02
# "Create expecting conflict" re-reads a node that vanished under it at most this often.
EXPECT_CONFLICT_ATTEMPTS = 10
TREE_DELETE_ATTEMPTS = 10


class ZooKeeperClient(Protocol):
    """What trikafka needs from ZooKeeper.  All paths are absolute, chroot-relative."""

    state: AsyncValue[SessionState]
    session_generation: AsyncValue[int]

    @property
    def session_id(self) -> int | None: ...

    async def create(
        self, path: str, value: bytes = b"", *, ephemeral: bool = False,
        sequential: bool = False, makepath: bool = False,
    ) -> str: ...

    async def get(self, path: str) -> tuple[bytes, Stat]: ...

    async def set(self, path: str, value: bytes, version: int = -1) -> Stat: ...

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None: ...

    async def exists(self, path: str) -> Stat | None: ...

    async def children(self, path: str) -> list[str]: ...

    async def ensure_path(self, path: str) -> None: ...

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]: ...

    def watch_data(self, path: str) -> "DataWatch": ...

    def watch_children(self, path: str) -> "ChildrenWatch": ...

    async def create_ephemeral_expect_conflict(self, path: str, value: bytes) -> None: ...

    async def hold_ephemeral(self, path: str, value: bytes) -> None: ...

    def state_changes(self) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel]: ...

    async def wait_connected(self) -> None: ...

    async def wait_reconnected(self) -> None: ...

    async def aclose(self) -> None: ...


class BaseZooKeeperClient:
    """Shared behaviour: validation, session bookkeeping, watches, composite ops.

    Subclasses implement the ``_create/_get/_set/_delete/_exists/_children/_multi``
    primitives (already-validated arguments; ``watch`` is a zero-argument callable
    invoked once, *on the Trio thread*, when ZooKeeper's one-shot watch fires or
    the connection drops), and call :meth:`_set_state` from the Trio thread.
    """

    def __init__(self) -> None:
        self.state: AsyncValue[SessionState] = AsyncValue(SessionState.LOST)
        self.session_generation: AsyncValue[int] = AsyncValue(0)
        self._state_subscribers: set[trio.MemorySendChannel] = set()
        self._closed = False
        self._closed_event = trio.Event()
        self._watches: weakref.WeakSet[_Watch] = weakref.WeakSet()

    # -- session bookkeeping ----------------------------------------------------

    @property
    def session_id(self) -> int | None:
        """The current session id, or None while there is no live session."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._closed

    def _set_state(self, new_state: SessionState, *, new_session: bool = False) -> None:
        """Publish a state change (Trio thread only).  Never raises."""
        if new_session:
            self.session_generation.value = self.session_generation.value + 1
        if new_state is self.state.value:
            return
        self.state.value = new_state
        for send_channel in list(self._state_subscribers):
            try:
                send_channel.send_nowait(new_state)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._state_subscribers.discard(send_channel)

    @contextlib.contextmanager
    def state_changes(self) -> Iterator[trio.MemoryReceiveChannel]:
        """Subscribe to every state transition, in order, none coalesced.

        ``with coordinator.state_changes() as changes: async for state in changes: ...``
        """
        send_channel, receive_channel = trio.open_memory_channel(math.inf)
        self._state_subscribers.add(send_channel)
        try:
            yield receive_channel
        finally:
            self._state_subscribers.discard(send_channel)
            send_channel.close()
            receive_channel.close()

    async def wait_connected(self) -> None:
        """Return once the session is CONNECTED (raises if the coordinator closes)."""
        self._check_open()
        if self.state.value is not SessionState.CONNECTED:
            await wait_any(
                functools.partial(self.state.wait_value, SessionState.CONNECTED),
                self._closed_event.wait,
            )
        self._check_open()

    def _mark_closed(self) -> None:
        """Closing: wake every waiter, publish LOST, end every watch iterator."""
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        self._set_state(SessionState.LOST)
        for watch in list(self._watches):
            watch.stop()

    async def wait_reconnected(self) -> None:
        """After a ConnectionLossError/SessionExpiredError: back off briefly (the
        state change may still be in flight), then wait for CONNECTED."""
        await trio.sleep(RECONNECT_BACKOFF_S)
        await self.wait_connected()

    def _check_open(self) -> None:
        if self._closed:
            raise ZooKeeperClientClosedError("the ZooKeeper client is closed")

    # -- public operations --------------------------------------------------------

    async def create(
        self, path: str, value: bytes = b"", *, ephemeral: bool = False,
        sequential: bool = False, makepath: bool = False,
    ) -> str:
        """Create a znode; returns its path (with the sequence suffix if sequential).

        ``makepath`` creates missing parents as persistent, empty znodes (§8.1).

        Raises:
            NodeExistsError, NoNodeError (parent missing), NoChildrenForEphemeralsError,
            ConnectionLossError, SessionExpiredError.
        """
        validate_path(path, allow_trailing_slash=sequential)
        _check_bytes(value)
        self._check_open()
        return await self._create(path, bytes(value), ephemeral, sequential, makepath)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        """Data and Stat of a znode.  Raises NoNodeError."""
        validate_path(path)
        self._check_open()
        return await self._get(path, None)

    async def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        """Replace a znode's data.  Raises NoNodeError, BadVersionError."""
        validate_path(path)
        _check_bytes(value)
        self._check_open()
        return await self._set(path, bytes(value), version)

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        """Delete a znode (and with ``recursive`` its whole subtree).

        ``version`` applies to ``path`` itself.  Raises NoNodeError,
        BadVersionError, NotEmptyError (non-recursive only).
        """
        validate_path(path)
        self._check_open()
        if recursive:
            await self._delete_tree(path, version)
        else:
            await self._delete(path, version)

    async def exists(self, path: str) -> Stat | None:
        """The znode's Stat, or None when it does not exist."""
        validate_path(path)
        self._check_open()
        return await self._exists(path, None)

    async def children(self, path: str) -> list[str]:
        """Sorted child names of a znode.  Raises NoNodeError."""
        validate_path(path)
        self._check_open()
        return sorted(await self._children(path, None))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents (persistent, empty) unless present."""
        validate_path(path)
        self._check_open()
        if path == "/" or await self._exists(path, None) is not None:
            return
        try:
            await self._create(path, b"", False, False, True)
        except NodeExistsError:
            pass

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ``ops`` atomically: all of them or none.

        Returns one result per op (CreateOp: created path; SetOp: Stat; others:
        None).  On failure raises the error of the failing op (NoNodeError,
        NodeExistsError, BadVersionError, ...) with ``op_index`` set, and
        nothing was applied.
        """
        ops = list(ops)
        for op in ops:
            _validate_op(op)
        self._check_open()
        if not ops:
            return []
        return await self._multi(ops)

    async def hold_ephemeral(self, path: str, value: bytes) -> None:
        """Make ``path`` an ephemeral of this session holding ``value`` (parents made as needed).

        An ephemeral of this session (a create whose reply was lost) is written
        over; one of another session (this process's previous one, or another
        owner's) is replaced, since written over it would vanish when that
        session ends.
        """
        validate_path(path)
        value = bytes(value)
        while True:
            try:
                await self.create(path, value, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                _data, stat = await self.get(path)
                if stat.ephemeral_owner == self.session_id:
                    await self.set(path, value, version=stat.version)
                    return
                await self.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                continue

    async def create_ephemeral_expect_conflict(self, path: str, value: bytes) -> None:
        """§8.2 "create expecting conflict": create an ephemeral (parents made as
        needed); an existing node holding exactly ``value`` counts as success.

        Raises:
            NodeExistsError: the node exists with different data.
        """
        validate_path(path)
        _check_bytes(value)
        value = bytes(value)
        for _ in range(EXPECT_CONFLICT_ATTEMPTS):
            try:
                await self.create(path, value, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                try:
                    stored, _stat = await self.get(path)
                except NoNodeError:
                    continue  # its owner's session just ended: try again
                if stored == value:
                    return
                raise NodeExistsError(f"{path} already exists with different data") from None
        raise NodeExistsError(f"{path} keeps appearing and vanishing; giving up")

    def watch_data(self, path: str) -> "DataWatch":
        """Async iterator of ``(data, Stat)`` (or None while absent), re-armed
        after each change, disconnect and session expiry; first value = current."""
        validate_path(path)
        self._check_open()
        watch = DataWatch(self, path)
        self._watches.add(watch)
        return watch

    def watch_children(self, path: str) -> "ChildrenWatch":
        """Async iterator of the sorted child list (or None while ``path`` is
        absent), yielded whenever it changed; first value = current."""
        validate_path(path)
        self._check_open()
        watch = ChildrenWatch(self, path)
        self._watches.add(watch)
        return watch

    async def _delete_tree(self, path: str, version: int) -> None:
        for _ in range(TREE_DELETE_ATTEMPTS):
            for child in await self._children(path, None):
                try:
                    await self._delete_tree(join(path, child), -1)
                except NoNodeError:
                    pass  # deleted concurrently
            try:
                await self._delete(path, version)
                return
            except NotEmptyError:
                continue  # a child appeared meanwhile
        raise NotEmptyError(f"{path} keeps gaining children; recursive delete gave up")

    # -- primitives for subclasses ------------------------------------------------

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool, makepath: bool) -> str:
        raise NotImplementedError

    async def _get(self, path: str, watch: WatchCallback | None) -> tuple[bytes, Stat]:
        raise NotImplementedError

    async def _set(self, path: str, value: bytes, version: int) -> Stat:
        raise NotImplementedError

    async def _delete(self, path: str, version: int) -> None:
        raise NotImplementedError

    async def _exists(self, path: str, watch: WatchCallback | None) -> Stat | None:
        raise NotImplementedError

    async def _children(self, path: str, watch: WatchCallback | None) -> list[str]:
        raise NotImplementedError

    async def _multi(self, ops: list[Op]) -> list[OpResult]:
        raise NotImplementedError

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError
