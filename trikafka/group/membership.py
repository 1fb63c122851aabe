"""Group membership: the ephemeral ids node, session changes, takeovers of our own id, the watches."""

from __future__ import annotations

import logging

import trio

from trikafka.zk import paths
from trikafka.zk.ops import CreateOp, DeleteOp, Op, SessionState, SetOp
from trikafka.zk.errors import (
    BadVersionError,
    CoordinatorError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from .errors import ConsumerIdTakenOver
from .registry import StaticTopicCount

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer

# Attempts at taking over a node left by our own earlier session, per claim.
STALE_TAKEOVERS_MAX = 8


class Membership:
    """Registration in the group and the watches that request rebalances.

    Part of ``GroupConsumer``: the state it uses is set up in ``GroupConsumer.__init__``.
    """

    async def _leave(self) -> None:
        """Commit, release and deregister in one fenced multi (best effort, bounded)."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self.config.close_timeout_s
            try:
                self._check_session()
                if self._registered:
                    await self._commit_and_release(self.owned, release=self._unrecorded, deregister=True)
            except (CoordinatorError, ConsumerIdTakenOver) as exc:
                log.warning("consumer %s left without a clean release: %s", self.consumer_id, exc)
            finally:
                self._drop_ownership()
        if scope.cancelled_caught:
            log.warning("consumer %s: the final commit timed out", self.consumer_id)

    def _check_session(self) -> None:
        """Notice a new session synchronously: our ephemerals died with the old one."""
        if self._session_seen >= 0 and self._zk.session_generation.value != self._session_seen:
            log.warning("consumer %s: ZooKeeper session lost; rejoining the group", self.consumer_id)
            self._session_seen = -1
            self._registered = False
            self._drop_ownership()
            self._rebalance_needed.value = True

    def _check_same_session(self, session_seen: int) -> None:
        """After an await inside a rebalance: abort it if the session changed meanwhile."""
        self._check_session()
        if self._session_seen != session_seen:
            raise SessionExpiredError("the ZooKeeper session changed during the rebalance")

    def _drop_ownership(self) -> None:
        self.generation += 1
        self._stop_fetchers()
        self.owned = frozenset()
        self._threads.clear()
        self._positions.clear()
        self._committed.clear()
        self._unacked.clear()
        self._offset_nodes.clear()
        self._unrecorded.clear()
        self._owner_versions.clear()
        self._current = None
        self._settled.value = False

    async def _register(self) -> None:
        """Create our ephemeral ids node, replacing one left by our own earlier session."""
        session = self._zk.session_generation.value
        value = self.topic_count.encode()
        for _ in range(STALE_TAKEOVERS_MAX):
            try:
                await self._zk.create(self._ids_path, value, ephemeral=True)
                self._ids_version = 0
                break
            except NodeExistsError:
                verdict, version = await self._take_over_stale(self._ids_path, None, value)
                if verdict == "gone":
                    continue
                assert version is not None
                if verdict == "ours":
                    data, stat = await self._zk.get(self._ids_path)
                    if data != value:
                        stat = await self._zk.set(self._ids_path, value, version=stat.version)
                    version = stat.version
                self._ids_version = version
                break
        else:
            raise NodeExistsError(f"{self._ids_path} keeps coming back")
        self._session_seen = session
        self._registered = True
        self._rebalance_needed.value = True

    async def _take_over_stale(self, path: str, expected_value: bytes | None,
                               value: bytes) -> tuple[str, int | None]:
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
            data, stat = await self._zk.get(path)
        except NoNodeError:
            return "gone", None
        if expected_value is not None and data != expected_value:
            return "other", None
        if stat.ephemeral_owner == self._zk.session_id:
            return "ours", stat.version
        log.info("consumer %s: replacing %s left by another session with our id", self.consumer_id, path)
        version = stat.version + 1
        ops: list[Op] = [DeleteOp(path, stat.version), CreateOp(path, value, ephemeral=True)]
        ops += [SetOp(path, value)] * version
        try:
            await self._zk.multi(ops)
        except (NoNodeError, BadVersionError, NodeExistsError):
            return "gone", None  # it changed meanwhile: look again
        return "replaced", version

    async def _raise_if_taken_over(self) -> None:
        """After a fenced multi failed on our ids node: is another session holding our id?"""
        try:
            _data, stat = await self._zk.get(self._ids_path)
        except NoNodeError:
            return
        if stat.ephemeral_owner != self._zk.session_id:
            raise ConsumerIdTakenOver(
                f"{self._ids_path} now belongs to another ZooKeeper session (a newer process with "
                f"consumer id {self.consumer_id!r}); this consumer stops")

    async def _watch_connection(self) -> None:
        """Count the connection's drops: after each, delivery waits for ``_confirm_registration``."""
        while True:
            await self._zk.state.wait_value(lambda state: state is not SessionState.CONNECTED)
            self._disconnects += 1
            await self._zk.state.wait_value(SessionState.CONNECTED)

    async def _confirm_registration(self) -> None:
        """Back from a dropped connection with the same session: is our id still ours?

        While the connection was down, a newer process with our consumer id may
        have taken over our ids node and then our partitions; the watch that
        says so can arrive after the reconnect.  So delivery waits for this
        read.  Raises ``ConsumerIdTakenOver`` (dropping ownership first); a
        ``CoordinatorError`` leaves the gate closed for another try.
        """
        disconnects = self._disconnects
        try:
            _data, stat = await self._zk.get(self._ids_path)
        except NoNodeError:
            pass  # our session's node is gone: the session is lost, which _check_session handles
        else:
            self._stop_if_taken_over(stat, " while our connection was down")
        self._confirmed_disconnects = disconnects

    async def _watch_registration(self) -> None:
        """Stop promptly when a newer process takes over our consumer id."""
        async for current in self._zk.watch_data(self._ids_path):
            if current is None or not self._registered:
                continue
            _data, stat = current
            self._stop_if_taken_over(stat)

    def _stop_if_taken_over(self, stat, when: str = "") -> None:
        """Our ids node (``stat``) belongs to another session of our current one's
        era: drop everything and raise ``ConsumerIdTakenOver``."""
        if (stat.ephemeral_owner != self._zk.session_id
                and self._zk.session_generation.value == self._session_seen):
            self._registered = False
            self._drop_ownership()
            raise ConsumerIdTakenOver(
                f"{self._ids_path} was taken over by another ZooKeeper session with consumer "
                f"id {self.consumer_id!r}{when}; this consumer stops")

    async def _watch_session(self) -> None:
        while True:
            current = self._zk.session_generation.value
            await self._zk.session_generation.wait_value(lambda g: g != current)
            self._check_session()

    def _request_rebalance(self) -> None:
        self._rebalance_needed.value = True
        self._settled.value = False

    async def _watch_members(self) -> None:
        async for _members in self._zk.watch_children(paths.consumer_ids(self.group)):
            self._request_rebalance()

    async def _watch_topics(self) -> None:
        assert self._nursery is not None
        if isinstance(self.topic_count, StaticTopicCount):
            for topic in self.topic_count.counts:
                self._start_topic_watch(topic)
            return
        self._nursery.start_soon(self._watch_replicated_topic_list)
        async for topics in self._zk.watch_children(paths.broker_topics()):
            wanted = set(self.topic_count.streams_per_topic(topics or []))
            for topic in wanted - set(self._topic_watch_scopes):
                self._start_topic_watch(topic)
            for topic in set(self._topic_watch_scopes) - wanted:
                self._topic_watch_scopes.pop(topic).cancel()
            self._request_rebalance()

    async def _watch_replicated_topic_list(self) -> None:
        first = True
        async for _topics in self._zk.watch_children(paths.REPLICATED_TOPICS):
            if not first:
                self._request_rebalance()  # a wildcard may match the new replicated topic
            first = False

    def _start_topic_watch(self, topic: str) -> None:
        scope = trio.CancelScope()
        self._topic_watch_scopes[topic] = scope
        assert self._nursery is not None
        self._nursery.start_soon(self._watch_topic, topic, scope)

    async def _watch_topic(self, topic: str, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                # A replicated topic appears (or changes) under /trikafka/topics (§12.9).
                nursery.start_soon(self._watch_replicated_topic, topic)
                async for _brokers in self._zk.watch_children(paths.broker_topic(topic)):
                    self._request_rebalance()

    async def _watch_replicated_topic(self, topic: str) -> None:
        first = True
        async for _value in self._zk.watch_data(paths.replicated_topic(topic)):
            if not first:
                self._request_rebalance()
            first = False
