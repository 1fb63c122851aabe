"""Group membership: the ephemeral ids node, session changes, takeovers of our own id."""

from __future__ import annotations

import logging
from typing import Callable

from trikafka.zk import kafka_groups, paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.ops import CreateOp, DeleteOp, Op, SessionState, SetOp, Stat
from trikafka.zk.errors import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from .errors import ConsumerIdTakenOver, KafkaGroupClash
from .registry import TopicCount

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer

# Attempts at taking over a node left by our own earlier session, per claim.
STALE_TAKEOVERS_MAX = 8


async def take_over_stale(zk: ZooKeeperClient, path: str, expected_value: bytes | None, value: bytes,
                          consumer_id: str) -> tuple[str, int | None]:
    """Replace ``path`` if another session with our consumer id left it.

    Returns ``("replaced", version)`` when it is now our node, ``("ours",
    version)`` when this session holds it already, ``("other", None)`` when
    its value is not ``expected_value`` (None: any value is ours), and
    ``("gone", None)`` when it vanished meanwhile (create it again).

    The replacement is one multi: delete the old node at the version read,
    create ours, and set it until its version is one more than the old
    one's.  A live predecessor (a zombie process with our id) checks its
    version in every fenced multi, so from here on all of them fail.
    """
    try:
        data, stat = await zk.get(path)
    except NoNodeError:
        return "gone", None
    if expected_value is not None and data != expected_value:
        return "other", None
    if stat.ephemeral_owner == zk.session_id:
        return "ours", stat.version
    log.info("consumer %s: replacing %s left by another session with our id", consumer_id, path)
    version = stat.version + 1
    ops: list[Op] = [DeleteOp(path, stat.version), CreateOp(path, value, ephemeral=True)]
    ops += [SetOp(path, value)] * version
    try:
        await zk.multi(ops)
    except (NoNodeError, BadVersionError, NodeExistsError):
        return "gone", None  # it changed meanwhile: look again
    return "replaced", version


class Membership:
    """This consumer's registration in the group and the session it belongs to.

    ``on_session_lost`` runs when a new session is noticed (our ephemerals
    died with the old one: drop the ownership, rebalance); ``on_taken_over``
    when another session holds our consumer id (drop the ownership; the
    caller then stops with ``ConsumerIdTakenOver``).
    """

    def __init__(self, zk: ZooKeeperClient, group: str, consumer_id: str, topic_count: TopicCount, *,
                 on_session_lost: Callable[[], None], on_taken_over: Callable[[], None]):
        self._zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self.ids_path = paths.consumer_id(group, consumer_id)
        self._topic_count = topic_count
        self._on_session_lost = on_session_lost
        self._on_taken_over = on_taken_over
        # The version of our ids node the fenced multis check: a successor that
        # takes over our consumer id replaces it with a strictly larger version.
        self.ids_version = -1
        self.session_seen = -1  # session_generation our registration belongs to
        self.registered = False
        # Connection drops seen, and how many of them a registration read has
        # followed since (delivery waits while they differ; see confirm_registration).
        self._disconnects = self._confirmed_disconnects = 0

    def confirmed(self) -> bool:
        """Whether every dropped connection was followed by a read showing our ids node is ours."""
        return self._disconnects == self._confirmed_disconnects

    def current(self) -> bool:
        """Registered in the live session, and confirmed since the last dropped connection."""
        return self._zk.session_generation.value == self.session_seen and self.confirmed()

    def check_session(self) -> None:
        """Notice a new session synchronously: our ephemerals died with the old one."""
        if self.session_seen >= 0 and self._zk.session_generation.value != self.session_seen:
            log.warning("consumer %s: ZooKeeper session lost; rejoining the group", self.consumer_id)
            self.session_seen = -1
            self.registered = False
            self._on_session_lost()

    def check_same_session(self, session_seen: int) -> None:
        """After an await inside a rebalance: abort it if the session changed meanwhile."""
        self.check_session()
        if self.session_seen != session_seen:
            raise SessionExpiredError("the ZooKeeper session changed during the rebalance")

    async def refuse_kafka_group(self) -> None:
        """Raise ``KafkaGroupClash`` when the group id is a live Kafka group's (docs/protocol.md §17.7)."""
        coordinator = await kafka_groups.coordinator_of_live_group(self._zk, self.group)
        if coordinator is not None:
            raise KafkaGroupClash(self.group, coordinator)

    async def register(self) -> None:
        """Create our ephemeral ids node, replacing one left by our own earlier session.

        Raises:
            KafkaGroupClash: the group id is a live Kafka group's (docs/protocol.md §17.7).
        """
        session = self._zk.session_generation.value
        await self.refuse_kafka_group()
        value = self._topic_count.encode()
        for _ in range(STALE_TAKEOVERS_MAX):
            try:
                await self._zk.create(self.ids_path, value, ephemeral=True)
                self.ids_version = 0
                break
            except NodeExistsError:
                verdict, version = await take_over_stale(self._zk, self.ids_path, None, value, self.consumer_id)
                if verdict == "gone":
                    continue
                assert version is not None
                if verdict == "ours":
                    data, stat = await self._zk.get(self.ids_path)
                    if data != value:
                        stat = await self._zk.set(self.ids_path, value, version=stat.version)
                    version = stat.version
                self.ids_version = version
                break
        else:
            raise NodeExistsError(f"{self.ids_path} keeps coming back")
        self.session_seen = session
        self.registered = True

    async def raise_if_taken_over(self) -> None:
        """After a fenced multi failed on our ids node: is another session holding our id?"""
        try:
            _data, stat = await self._zk.get(self.ids_path)
        except NoNodeError:
            return
        if stat.ephemeral_owner != self._zk.session_id:
            raise ConsumerIdTakenOver(
                f"{self.ids_path} now belongs to another ZooKeeper session (a newer process with "
                f"consumer id {self.consumer_id!r}); this consumer stops")

    async def watch_connection(self) -> None:
        """Count the connection's drops: after each, delivery waits for ``confirm_registration``."""
        while True:
            await self._zk.state.wait_value(lambda state: state is not SessionState.CONNECTED)
            self._disconnects += 1
            await self._zk.state.wait_value(SessionState.CONNECTED)

    async def confirm_registration(self) -> None:
        """Back from a dropped connection with the same session: is our id still ours?

        While the connection was down, a newer process with our consumer id may
        have taken over our ids node and then our partitions; the watch that
        says so can arrive after the reconnect.  So delivery waits for this
        read.  Raises ``ConsumerIdTakenOver`` (dropping ownership first); a
        ``ZooKeeperClientError`` leaves the gate closed for another try.
        """
        disconnects = self._disconnects
        try:
            _data, stat = await self._zk.get(self.ids_path)
        except NoNodeError:
            pass  # our session's node is gone: the session is lost, which check_session handles
        else:
            self._stop_if_taken_over(stat, " while our connection was down")
        self._confirmed_disconnects = disconnects

    async def watch_registration(self) -> None:
        """Stop promptly when a newer process takes over our consumer id."""
        async for current in self._zk.watch_data(self.ids_path):
            if current is None or not self.registered:
                continue
            _data, stat = current
            self._stop_if_taken_over(stat)

    def _stop_if_taken_over(self, stat: Stat, when: str = "") -> None:
        """Our ids node (``stat``) belongs to another session of our current one's
        era: drop everything and raise ``ConsumerIdTakenOver``."""
        if (stat.ephemeral_owner != self._zk.session_id
                and self._zk.session_generation.value == self.session_seen):
            self.registered = False
            self._on_taken_over()
            raise ConsumerIdTakenOver(
                f"{self.ids_path} was taken over by another ZooKeeper session with consumer "
                f"id {self.consumer_id!r}{when}; this consumer stops")

    async def watch_session(self) -> None:
        """Notice each new session as it comes (``check_session``)."""
        while True:
            current = self._zk.session_generation.value
            await self._zk.session_generation.wait_value(lambda g: g != current)
            self.check_session()
