"""Broker registration in ZooKeeper (spec §8.2).

``/brokers/ids/<id>`` is an ephemeral holding ``<creatorId>:<host>:<port>``
with ``creatorId = <host>-<millis>``; ``/brokers/topics/<topic>/<id>`` is an
ephemeral holding the topic's partition count in decimal.

Ownership rules (the known 0.7/0.8 failures of the B5 fault catalog):

* A node holding exactly our value, owned by our current session, is ours: a
  create whose reply was lost to a connection drop (KAFKA-1387).
* A node owned by one of *our* previous sessions (or, for the id node, holding
  a value we wrote before) is a leftover: delete it (version-checked) and
  create it again.
* Anything else belongs to someone else: for the id node that is fatal
  (:class:`DuplicateBrokerIdError`); for a topic node it is logged and ignored.

After a session expiry (``session_generation`` advances) :meth:`BrokerRegistration.run`
re-registers the id and every topic, with a fresh creator id as 0.7 does.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

import trio
from trio_util import AsyncValue

from . import paths
from .client import ZooKeeperClient
from .registry_values import BrokerInfo, parse_broker_registration
from .errors import (
    BadVersionError,
    ConnectionLossError,
    ZooKeeperClientClosedError,
    ZooKeeperClientError,
    DuplicateBrokerIdError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

log = logging.getLogger(__name__)

CLAIM_ATTEMPTS = 20
DEREGISTER_TIMEOUT_S = 5.0


def wall_clock_ms() -> int:
    """Default clock for the creator id (injectable for tests)."""
    return time.time_ns() // 1_000_000


async def live_brokers(zk: ZooKeeperClient,
                       on_error: Callable[[str, Exception], None] = lambda name, exc: None) -> dict[int, BrokerInfo]:
    """Every broker registered under ``/brokers/ids``, by id; a child that vanishes or cannot be
    parsed is skipped (``on_error(name, exc)`` is told)."""
    try:
        names = await zk.children(paths.broker_ids())
    except NoNodeError:
        return {}
    brokers = {}
    for name in names:
        try:
            value, _stat = await zk.get(paths.broker_id(int(name)))
            brokers[int(name)] = parse_broker_registration(value)
        except (NoNodeError, ValueError) as exc:  # InvalidPathError is a ValueError too
            on_error(name, exc)
    return dict(sorted(brokers.items()))


def _validate_host_port(host: str, port: int) -> None:
    if not isinstance(host, str) or not host or any(c in host for c in ":/ \t\r\n"):
        raise ValueError(f"broker host must be a non-empty name or IPv4 address without ':' (§8.2): {host!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"broker port must be 1..65535, got {port!r}")


def _validate_partitions(topic: str, partitions: int) -> None:
    paths.validate_topic(topic)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partition count of {topic!r} must be an int >= 1, got {partitions!r}")


class BrokerRegistration:
    """Keeps one broker registered in ZooKeeper for its whole life.

    Typical use in the broker::

        registration = BrokerRegistration(zk, broker_id, host, port)
        await nursery.start(registration.run, topics_with_logs)   # §8.2: the id, then every topic
        ...
        await registration.register_topic("new-topic", 4)         # later topics
    """

    def __init__(
        self,
        coordinator: ZooKeeperClient,
        broker_id: int,
        host: str,
        port: int,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        paths.validate_broker_id(broker_id)
        _validate_host_port(host, port)
        self._zk = coordinator
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self._clock_ms = clock_ms
        self._topics: dict[str, int] = {}
        self._lock = trio.Lock()
        self._creator_id: str | None = None
        self._registered_generation = 0  # session generation of the last full registration
        self._own_sessions: set[int] = set()
        self._own_id_values: set[bytes] = set()
        # How many full (re-)registrations succeeded; awaitable, because another client can see the
        # last node of one before this client has the create's reply.
        self.registrations: AsyncValue[int] = AsyncValue(0)

    # -- read-only views ----------------------------------------------------------

    @property
    def creator_id(self) -> str | None:
        """``<host>-<millis>`` of the current registration (None before the first)."""
        return self._creator_id

    @property
    def value(self) -> bytes | None:
        """The bytes currently written at ``/brokers/ids/<id>``."""
        if self._creator_id is None:
            return None
        return BrokerInfo(self._creator_id, self.host, self.port).encode()

    @property
    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    # -- operations -----------------------------------------------------------------

    async def register(self, topics: Mapping[str, int] | None = None) -> None:
        """Register the broker id, then every known topic (§8.2).

        Raises:
            DuplicateBrokerIdError: the id node is held by someone else.
        """
        for topic, partitions in (topics or {}).items():
            _validate_partitions(topic, partitions)
        async with self._lock:
            self._topics.update(topics or {})
            await self._register_until_stable()

    async def register_topic(self, topic: str, partitions: int) -> bool:
        """Advertise a topic (§8.2: "registered when its first partition log is created").  Before
        :meth:`register` it is only remembered.  Returns False when another
        session holds the node (logged and ignored, as in 0.7)."""
        _validate_partitions(topic, partitions)
        async with self._lock:
            self._topics[topic] = partitions
            if self._creator_id is None:
                return True
            try:
                return await self._claim_topic(topic, partitions)
            except SessionExpiredError:
                # Everything is gone: run() re-registers all topics, this one included.
                return True

    async def deregister(self) -> None:
        """Graceful shutdown: delete our topic nodes, then our id node (only
        nodes owned by the current session; errors are logged, not raised)."""
        async with self._lock:
            if self._creator_id is None:
                return
            targets = [paths.broker_topic_id(t, self.broker_id) for t in sorted(self._topics)]
            for path in [*targets, paths.broker_id(self.broker_id)]:
                try:
                    await self._release(path)
                except ZooKeeperClientError as exc:  # the session's end removes them anyway
                    log.info("could not deregister %s: %s", path, exc)
            self._creator_id = None

    async def run(
        self,
        topics: Mapping[str, int] | None = None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register, report started, then re-register after every new session
        until cancelled; deregisters on the way out (bounded by a deadline)."""
        try:
            await self.register(topics)
            task_status.started()
            while True:
                await self._zk.session_generation.wait_value(lambda g: g > self._registered_generation)
                log.warning("ZooKeeper session renewed: re-registering broker %d", self.broker_id)
                async with self._lock:
                    await self._register_until_stable()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(DEREGISTER_TIMEOUT_S):
                await self.deregister()

    # -- internals ------------------------------------------------------------------

    async def _register_until_stable(self) -> None:
        """Full registration in one session; retried if the session expires midway."""
        while True:
            await self._zk.wait_connected()
            generation = self._zk.session_generation.value
            try:
                await self._register_everything()
            except SessionExpiredError:
                await self._zk.wait_reconnected()
                continue
            self._registered_generation = generation
            self.registrations.value += 1
            return

    async def _register_everything(self) -> None:
        session = self._zk.session_id
        if session is not None:
            self._own_sessions.add(session)
        self._creator_id = f"{self.host}-{self._clock_ms()}"
        value = self.value
        assert value is not None
        self._own_id_values.add(value)
        id_path = paths.broker_id(self.broker_id)
        if not await self._claim(id_path, value, is_id_node=True):
            data, owner = await self._read_holder(id_path)
            raise DuplicateBrokerIdError(
                f"broker id {self.broker_id} is in use: {id_path} holds {data!r} "
                f"(session 0x{owner:x}); another broker has this id, or a previous "
                f"session of this broker has not expired yet")
        for topic, partitions in sorted(self._topics.items()):
            await self._claim_topic(topic, partitions)

    async def _claim_topic(self, topic: str, partitions: int) -> bool:
        path = paths.broker_topic_id(topic, self.broker_id)
        if await self._claim(path, str(partitions).encode("ascii"), is_id_node=False):
            return True
        log.warning("topic registration %s is held by another session; ignored (§8.2)", path)
        return False

    async def _claim(self, path: str, value: bytes, *, is_id_node: bool) -> bool:
        """Create our ephemeral at ``path``; True when it is ours, False when
        someone else holds it.  Retries across connection losses."""
        for _ in range(CLAIM_ATTEMPTS):
            try:
                outcome = await self._claim_once(path, value, is_id_node)
            except ConnectionLossError:
                await self._zk.wait_reconnected()
                continue
            if outcome is not None:
                return outcome
        raise ZooKeeperClientError(f"could not settle ownership of {path} after {CLAIM_ATTEMPTS} attempts")

    async def _claim_once(self, path: str, value: bytes, is_id_node: bool) -> bool | None:
        """One attempt: True/False as :meth:`_claim`, None to try again."""
        try:
            await self._zk.create(path, value, ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            pass
        try:
            data, stat = await self._zk.get(path)
        except NoNodeError:
            return None
        owner = stat.ephemeral_owner
        if owner == self._zk.session_id and data == value:
            return True  # our own create, whose reply was lost
        leftover = owner in self._own_sessions or (is_id_node and data in self._own_id_values)
        if not leftover:
            return False
        log.info("replacing %s left over from our session 0x%x", path, owner)
        try:
            await self._zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        return None

    async def _read_holder(self, path: str) -> tuple[bytes, int]:
        """(data, owner session) of a node, or (b"", 0) if it vanished."""
        try:
            data, stat = await self._zk.get(path)
        except NoNodeError:
            return b"", 0
        return data, stat.ephemeral_owner

    async def _release(self, path: str) -> None:
        try:
            _data, stat = await self._zk.get(path)
        except (NoNodeError, ZooKeeperClientClosedError):
            return
        if stat.ephemeral_owner != self._zk.session_id:
            return  # not ours (any more): leave it alone
        try:
            await self._zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass


__all__ = ["BrokerRegistration", "DuplicateBrokerIdError", "live_brokers"]
