"""The ZooKeeper-balanced group consumer (spec §11.4-11.5), with 0.7's races fixed.

Usage::

    async with KazooCoordinator("127.0.0.1:2181") as zk:
        async with GroupConsumer(zk, "my-group", {"events": 1}) as consumer:
            async for message in consumer:
                handle(message.topic, message.partition, message.offset, message.payload)

Every message of the subscribed topics is delivered to one member of the
group; members share the partitions as ``assign()`` says, rebalancing when a
member or a broker comes or goes.  Delivery is at least once: after a crash the
next owner starts at the last committed offset.

What this consumer does differently from 0.7 (all by design, none visible in
the registry format):

* **Quiet while SUSPENDED.**  With the ZooKeeper connection lost, the session
  may be expiring and another member may be taking over; nothing is fetched or
  delivered until the session is known to be alive (or known to be lost).
* **Fenced writes.**  Every commit and release is one ``multi`` that also
  checks this consumer's own ``ids`` node (ephemeral: it exists only while the
  session that registered it lives) and the owner node of each partition
  committed.  A consumer that lost its session or a partition can never
  overwrite the new owner's offset.
* **Own stale ephemerals.**  A node left by an earlier session with our own
  consumer id (a restart faster than the session timeout) is replaced instead
  of blocking the rebalance until it expires.  The replacement carries a
  larger znode version than the old node, and the fenced multis check the
  version each member created, so if the earlier process is in fact alive (a
  long pause, a partition) none of its commits or releases go through; it
  notices through a watch on its ids node and stops with ``ConsumerIdTakenOver``.
  (Values and paths stay 0.7's; 0.7 members ignore versions.)
* **Coalesced, incremental rebalances.**  Watch events arriving together make
  one rebalance; a rebalance releases only the partitions this consumer loses
  (committing them first) and claims only the ones it gains, all or nothing.

Positions: ``position`` of a partition is the offset after the last message
handed to the application; commits write it.  Fetched but undelivered data is
dropped whenever the ownership changes (``generation`` counts those changes),
so within one generation a partition's messages come contiguously and in order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Callable, NamedTuple

import trio
from trio_util import AsyncBool

from trikafka.wire import ConsumedMessage
from trikafka.zk import paths
from trikafka.zk.coordinator import CheckOp, Coordinator, CreateOp, DeleteOp, Op, SessionState, SetOp
from trikafka.zk.errors import (
    BadVersionError,
    ConnectionLossError,
    CoordinatorClosedError,
    CoordinatorError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from trikafka.zk.registry import parse_broker_registration

from .assign import consumer_assignment
from .config import GroupConfig
from .fetcher import Chunk, FetchTarget, PartitionKey, run_fetcher
from .registry import (
    RegistryValueError,
    StaticTopicCount,
    TopicCount,
    TopicFilter,
    WildcardTopicCount,
    decode_offset,
    decode_owner,
    decode_topic_count,
    encode_offset,
    encode_owner,
    new_consumer_id,
    parse_partition_name,
)

log = logging.getLogger(__name__)

# Attempts at taking over a node left by our own earlier session, per claim.
STALE_TAKEOVERS_MAX = 8
# The iterator hands out up to this many messages of a fetched chunk between
# real checkpoints (it always checks for cancellation); other tasks run in between.
MESSAGES_PER_CHECKPOINT = 64
# Rounds of one commit multi (a partition lost or an offsets node flipping between rounds).
COMMIT_ATTEMPTS_MAX = 16

Subscription = Mapping[str, int] | TopicFilter | TopicCount


class RebalanceFailedError(Exception):
    """``rebalance_retries_max`` attempts in a row could not claim the assignment
    (0.7's ``ConsumerRebalanceFailedException``)."""


class ConsumerIdTakenOver(Exception):
    """Another live session registered this consumer id (a newer process with
    the same ``consumer_id``).  This consumer stops; its commits were fenced off."""


class ConsumerTimeout(Exception):
    """No message arrived within ``consumer_timeout_s`` (0.7's ``ConsumerTimeoutException``)."""


class GroupMessage(NamedTuple):
    """A message as the group consumer delivers it.

    ``partition`` is the registry name ``"<broker>-<partition>"``; ``offset`` is
    where its entry starts and ``next_offset`` what a commit after it stores
    (spec §5: inner messages of a compressed wrapper share the wrapper's start).
    """

    topic: str
    partition: str
    broker_id: int
    part: int
    offset: int
    next_offset: int
    payload: bytes


class GroupBatch(NamedTuple):
    """A whole fetched message set, as ``GroupConsumer.next_batch`` hands it out.

    ``message_set`` holds the entries from ``offset`` to ``next_offset``
    exactly as the broker stored them (compressed wrappers included);
    ``count`` is how many messages they hold once unwrapped.
    """

    topic: str
    partition: str
    broker_id: int
    part: int
    offset: int
    next_offset: int
    message_set: bytes
    count: int


class _Conflict(Exception):
    """A rebalance attempt could not claim a partition someone else holds."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path  # the owner node in the way, if one


class _Reregister(Exception):
    """Our ``ids`` node is gone though the session lives: register again."""


def topic_count_for(subscription: Subscription, num_streams: int = 1) -> TopicCount:
    """The registry value for a subscription: ``{topic: streams}``, a filter, or a TopicCount."""
    if isinstance(subscription, TopicCount):
        return subscription
    if isinstance(subscription, TopicFilter):
        return WildcardTopicCount(subscription, num_streams)
    counts = dict(subscription)
    for topic in counts:
        paths.validate_topic(topic)
    return StaticTopicCount(counts)


class GroupConsumer:
    """A member of consumer group ``group`` (see the module docstring).

    ``topics`` is ``{topic: number of streams}`` or a whitelist/blacklist
    ``TopicFilter`` (``registry.whitelist("logs-.*")``), which follows topics as
    they appear.  ``consumer_id`` is 0.7's ``consumerid`` (the registered id is
    ``<group>_<consumer_id>``); by default one is generated from the host name,
    ``clock_ms`` and a UUID.  Use ``async with``; iterate with ``async for``.
    """

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        topics: Subscription,
        *,
        consumer_id: str | None = None,
        config: GroupConfig | None = None,
        num_streams: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ):
        self.config = config or GroupConfig()
        self.group = paths.validate_component(group, "group")
        self.topic_count = topic_count_for(topics, num_streams or self.config.num_streams)
        self.consumer_id = new_consumer_id(group, consumer_id=consumer_id, clock_ms=clock_ms)
        self._zk = coordinator
        self._ids_path = paths.consumer_id(group, self.consumer_id)

        # Ownership and positions: touched only by the rebalancer (under the
        # lock) and, for positions, by the delivering iterator.
        self.owned: frozenset[PartitionKey] = frozenset()
        self.generation = 0
        self._threads: dict[PartitionKey, str] = {}
        self._positions: dict[PartitionKey, int | None] = {}
        self._committed: dict[PartitionKey, int | None] = {}
        # Starts of batches handed out by next_batch and not acknowledged yet:
        # a commit writes the first of them instead of the position.
        self._unacked: dict[PartitionKey, list[int]] = {}
        self._offset_nodes: set[PartitionKey] = set()  # offsets nodes known to exist
        self._unrecorded: set[PartitionKey] = set()  # owner nodes created, not yet in ``owned``
        # Versions of the nodes our fenced multis check: a successor that takes
        # over our consumer id replaces them with strictly larger versions.
        self._ids_version = -1
        self._owner_versions: dict[PartitionKey, int] = {}  # for owned and unrecorded keys
        self._session_seen = -1  # session_generation our registration belongs to
        self._registered = False
        self.rebalances = 0  # successful rebalances that changed ownership

        self._lock = trio.Lock()
        self._rebalance_needed = AsyncBool(True)
        self._rebalancing = AsyncBool(False)
        self._settled = AsyncBool(False)
        self._chunk_send, self._chunk_receive = trio.open_memory_channel(self.config.queued_chunks_max)
        self._current: Chunk | None = None
        self._since_checkpoint = 0
        self._fetch_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._nursery_manager = None
        self._topic_watch_scopes: dict[str, trio.CancelScope] = {}

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> "GroupConsumer":
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        try:
            await self._zk.wait_connected()
            await self._zk.ensure_path(paths.consumer_ids(self.group))
            async with self._lock:
                await self._register()
            for task in (self._watch_session, self._watch_registration, self._watch_members,
                         self._watch_topics, self._rebalance_loop, self._autocommit_loop):
                self._nursery.start_soon(task)
        except BaseException as exc:
            self._nursery.cancel_scope.cancel()
            if not await self._nursery_manager.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        return self

    async def __aexit__(self, *exc_info) -> bool | None:
        assert self._nursery is not None and self._nursery_manager is not None
        self._nursery.cancel_scope.cancel()
        try:
            return await self._nursery_manager.__aexit__(*exc_info)
        except BaseExceptionGroup as group:
            # One failure (the body's own exception, or a background task's
            # such as RebalanceFailedError) comes out as itself, not wrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            await self._leave()

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

    # -- iteration -------------------------------------------------------------------

    def __aiter__(self) -> "GroupConsumer":
        return self

    async def __anext__(self) -> GroupMessage:
        if self.config.consumer_timeout_s is None:
            return await self._next_message()
        with trio.move_on_after(self.config.consumer_timeout_s):
            return await self._next_message()
        raise ConsumerTimeout(f"no message within {self.config.consumer_timeout_s} s")

    async def _next_message(self) -> GroupMessage:
        # Fast path: the next message of the current chunk, when nothing changed.
        self._since_checkpoint += 1
        if self._since_checkpoint >= MESSAGES_PER_CHECKPOINT:
            self._since_checkpoint = 0
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        chunk = self._current
        if (chunk is not None and chunk.generation == self.generation and chunk.index < len(chunk.messages)
                and self._zk.state.value is SessionState.CONNECTED and not self._rebalancing.value
                and self._zk.session_generation.value == self._session_seen):
            message = chunk.messages[chunk.index]
            chunk.index += 1
            self._positions[chunk.key] = message.next_offset
            return GroupMessage(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, message.offset,
                                message.next_offset, bytes(message.payload))
        return await self._next_message_slow()

    async def _next_message_slow(self) -> GroupMessage:
        while True:
            # Gate: a live, connected session and no rebalance in progress.
            await self._zk.state.wait_value(SessionState.CONNECTED)
            await self._rebalancing.wait_value(False)
            if self._zk.state.value is not SessionState.CONNECTED or self._rebalancing.value:
                continue
            self._check_session()
            chunk = self._current
            if chunk is None or chunk.generation != self.generation:
                self._current = None
                chunk = await self._chunk_receive.receive()
                if self._accept(chunk):
                    self._current = chunk
                continue  # check the gate again before delivering
            if chunk.index < len(chunk.messages):
                message = chunk.messages[chunk.index]
                chunk.index += 1
                self._positions[chunk.key] = message.next_offset
                return GroupMessage(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, message.offset,
                                    message.next_offset, bytes(message.payload))
            self._current = None

    def _accept(self, chunk: Chunk) -> bool:
        """Whether ``chunk`` continues the current position; applies resets and errors."""
        if chunk.generation != self.generation or chunk.key not in self.owned:
            return False
        if self._positions.get(chunk.key) != chunk.expect:
            log.debug("consumer %s: dropped a chunk of %s/%s at %s (position %s)", self.consumer_id,
                      *chunk.key, chunk.expect, self._positions.get(chunk.key))
            return False
        if chunk.error is not None:
            raise chunk.error
        if chunk.new_position is not None:
            self._positions[chunk.key] = chunk.new_position
            return False
        return bool(chunk.messages)

    async def next_batch(self) -> GroupBatch:
        """The next whole fetched message set, undecoded (for a mirror).

        Its messages count as delivered, but commits keep writing the batch's
        start until ``acknowledge(batch)``: what was handed out and not
        acknowledged comes again after a crash or a hand-over (at least once).
        Do not mix with message iteration.
        """
        while True:
            await self._zk.state.wait_value(SessionState.CONNECTED)
            await self._rebalancing.wait_value(False)
            if self._zk.state.value is not SessionState.CONNECTED or self._rebalancing.value:
                continue
            self._check_session()
            chunk = self._current
            if chunk is None or chunk.generation != self.generation:
                self._current = None
                chunk = await self._chunk_receive.receive()
                if self._accept(chunk):
                    self._current = chunk
                continue  # check the gate again before handing it out
            if chunk.index:
                raise RuntimeError("next_batch after message iteration left a chunk half delivered")
            self._current = None
            chunk.index = len(chunk.messages)
            end = chunk.messages[-1].next_offset
            self._positions[chunk.key] = end
            start = chunk.expect
            assert start is not None  # an accepted chunk continues a known position
            self._unacked.setdefault(chunk.key, []).append(start)
            return GroupBatch(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, start, end, chunk.data,
                              len(chunk.messages))

    def acknowledge(self, batch: GroupBatch) -> None:
        """``batch`` is safely handled: the next commit may write past it."""
        pending = self._unacked.get((batch.topic, batch.partition))
        if pending is not None and batch.offset in pending:
            pending.remove(batch.offset)
            if not pending:
                del self._unacked[(batch.topic, batch.partition)]

    def _committable(self, key: PartitionKey) -> int | None:
        pending = self._unacked.get(key)
        return pending[0] if pending else self._positions.get(key)

    # -- commits ---------------------------------------------------------------------

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
                position = self._committable(key)
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

    # -- session, registration -------------------------------------------------------

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

    async def _watch_registration(self) -> None:
        """Stop promptly when a newer process takes over our consumer id."""
        async for current in self._zk.watch_data(self._ids_path):
            if current is None or not self._registered:
                continue
            _data, stat = current
            if (stat.ephemeral_owner != self._zk.session_id
                    and self._zk.session_generation.value == self._session_seen):
                self._registered = False
                self._drop_ownership()
                raise ConsumerIdTakenOver(
                    f"{self._ids_path} was taken over by another ZooKeeper session with consumer "
                    f"id {self.consumer_id!r}; this consumer stops")

    async def _watch_session(self) -> None:
        while True:
            current = self._zk.session_generation.value
            await self._zk.session_generation.wait_value(lambda g: g != current)
            self._check_session()

    # -- watches ----------------------------------------------------------------------

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
        async for topics in self._zk.watch_children(paths.broker_topics()):
            wanted = set(self.topic_count.streams_per_topic(topics or []))
            for topic in wanted - set(self._topic_watch_scopes):
                self._start_topic_watch(topic)
            for topic in set(self._topic_watch_scopes) - wanted:
                self._topic_watch_scopes.pop(topic).cancel()
            self._request_rebalance()

    def _start_topic_watch(self, topic: str) -> None:
        scope = trio.CancelScope()
        self._topic_watch_scopes[topic] = scope
        assert self._nursery is not None
        self._nursery.start_soon(self._watch_topic, topic, scope)

    async def _watch_topic(self, topic: str, scope: trio.CancelScope) -> None:
        with scope:
            async for _brokers in self._zk.watch_children(paths.broker_topic(topic)):
                self._request_rebalance()

    # -- rebalancing ------------------------------------------------------------------

    async def wait_settled(self, timeout_s: float | None = None) -> bool:
        """Wait until no rebalance is pending or running; False on timeout."""
        with trio.move_on_after(math.inf if timeout_s is None else timeout_s):
            while True:
                await self._settled.wait_value(True)
                if not self._rebalance_needed.value and not self._rebalancing.value:
                    return True
                await trio.sleep(0)
        return False

    async def _rebalance_loop(self) -> None:
        while True:
            await self._rebalance_needed.wait_value(True)
            if self.config.rebalance_coalesce_s:
                await trio.sleep(self.config.rebalance_coalesce_s)  # let a burst of events arrive
            self._rebalance_needed.value = False
            await self._rebalance_with_retries()
            if not self._rebalance_needed.value:
                self._settled.value = True

    async def _rebalance_with_retries(self) -> None:
        failures = 0
        while True:
            await self._zk.wait_connected()
            try:
                async with self._lock:
                    self._check_session()
                    if not self._registered:
                        await self._register()
                    self._rebalance_needed.value = False
                    await self._rebalance_once()
                return
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("consumer %s: rebalance interrupted (%s); retrying", self.consumer_id, exc)
                await self._zk.wait_reconnected()
                continue
            except _Reregister:
                self._registered = False
                continue
            except (_Conflict, NoNodeError, NodeExistsError, BadVersionError, RegistryValueError, KeyError) as exc:
                failures += 1
                if failures >= self.config.rebalance_retries_max:
                    raise RebalanceFailedError(
                        f"consumer {self.consumer_id} could not rebalance after {failures} attempts: {exc}"
                    ) from exc
                log.info("consumer %s: rebalance attempt %d failed: %s; retrying within %.2f s",
                         self.consumer_id, failures, exc, self.config.rebalance_backoff_s)
                if isinstance(exc, _Conflict) and exc.path is not None:
                    # The usual conflict: the previous owner has not released yet.  Retry
                    # as soon as it does (its release is a delete), within the back-off.
                    with trio.move_on_after(self.config.rebalance_backoff_s):
                        await self._wait_gone(exc.path)
                    continue
            await trio.sleep(self.config.rebalance_backoff_s)

    async def _wait_gone(self, path: str) -> None:
        watch = self._zk.watch_data(path)
        try:
            async for value in watch:
                if value is None:
                    return
        finally:
            watch.stop()

    async def _read_group(self) -> tuple[dict[str, TopicCount], dict[str, dict[int, int]]]:
        """Members' registry values and, for our topics, each broker's partition count."""
        ids_path = paths.consumer_ids(self.group)
        members: dict[str, TopicCount] = {}
        for member in await self._zk.children(ids_path):
            try:
                data, _stat = await self._zk.get(f"{ids_path}/{member}")
            except NoNodeError:
                continue  # left meanwhile; its own departure triggers another rebalance
            members[member] = decode_topic_count(data)
        if self.consumer_id not in members:
            raise _Reregister()
        try:
            all_topics = await self._zk.children(paths.broker_topics())
        except NoNodeError:
            all_topics = []
        mine = set(members[self.consumer_id].streams_per_topic(all_topics))
        broker_topics: dict[str, dict[int, int]] = {t: {} for t in all_topics}
        for topic in mine:
            try:
                brokers = await self._zk.children(paths.broker_topic(topic))
            except NoNodeError:
                continue
            for broker in brokers:
                try:
                    data, _stat = await self._zk.get(paths.broker_topic_id(topic, int(broker)))
                    broker_topics.setdefault(topic, {})[int(broker)] = int(data.decode("ascii"))
                except NoNodeError:
                    continue
                except ValueError as exc:
                    raise RegistryValueError(f"/brokers/topics/{topic}/{broker}: {exc}") from None
        return members, broker_topics

    async def _rebalance_once(self) -> None:
        """One attempt: release what we lose (committed first), claim what we gain."""
        session_seen = self._session_seen
        members, broker_topics = await self._read_group()
        self._check_same_session(session_seen)
        assignment = consumer_assignment(self.consumer_id, members, broker_topics)
        target = {(topic, part): thread for topic, per_thread in assignment.items()
                  for thread, parts in per_thread.items() for part in parts}
        # A partition kept under another thread id (the thread ranges shifted) is
        # released and claimed again, so its owner node names the right thread.
        lose = {key for key in self.owned if target.get(key) != self._threads.get(key)}
        gain = {key: thread for key, thread in target.items()
                if key not in self.owned or key in lose}
        orphans = self._unrecorded - gain.keys()
        if not lose and not gain and not orphans:
            return
        self._rebalancing.value = True
        try:
            self._stop_fetchers()
            self.generation += 1  # everything fetched so far is stale
            self._current = None
            if lose or orphans:
                # Owner nodes of an interrupted claim that we no longer want go too.
                await self._commit_and_release(lose, release=lose | orphans)
                self._check_same_session(session_seen)
                if not self._registered:
                    raise _Reregister()
                self._forget(lose)  # released, or already taken from us: either way not ours
                self._unrecorded -= orphans
                for key in orphans:
                    self._owner_versions.pop(key, None)
            if gain:
                await self._claim(gain, session_seen)
            self.rebalances += 1
            log.info("consumer %s owns %d partitions (generation %d)", self.consumer_id,
                     len(self.owned), self.generation)
        finally:
            self._start_fetchers()
            self._rebalancing.value = False

    def _forget(self, keys: Iterable[PartitionKey]) -> None:
        keys = set(keys)
        self.owned = self.owned - keys
        for key in keys:
            self._threads.pop(key, None)
            self._owner_versions.pop(key, None)
            self._positions.pop(key, None)
            self._committed.pop(key, None)
            self._unacked.pop(key, None)
            self._offset_nodes.discard(key)

    async def _claim(self, gain: Mapping[PartitionKey, str], session_seen: int) -> None:
        """Create every owner node of ``gain`` in one multi (or none), then read the offsets.

        Offsets are read only once the partitions are ours: the previous owner
        commits as it releases, so an earlier read could miss its last commit.
        A node this session already created in an interrupted attempt is
        adopted; one left by an earlier session of ours is replaced.
        """
        for topic in {key[0] for key in gain}:
            await self._zk.ensure_path(paths.consumer_owners(self.group, topic))
            await self._zk.ensure_path(paths.consumer_offsets(self.group, topic))
        adopted = set(self._unrecorded & gain.keys())
        for _ in range(STALE_TAKEOVERS_MAX + len(gain)):
            ops: list[Op] = [CheckOp(self._ids_path, self._ids_version)]
            created = [key for key in sorted(gain) if key not in adopted]
            ops += [CreateOp(self._owner_path(key), encode_owner(gain[key]), ephemeral=True) for key in created]
            try:
                await self._zk.multi(ops)
                self._owner_versions.update(dict.fromkeys(created, 0))
                break
            except (NoNodeError, BadVersionError) as exc:
                if exc.op_index in (0, None):
                    await self._raise_if_taken_over()
                    raise _Reregister() from None
                raise
            except NodeExistsError as exc:
                failed = ops[exc.op_index or 0]
                assert isinstance(failed, CreateOp)
                verdict, version = await self._inspect_owner_node(failed.path, failed.value)
                if verdict == "ours":
                    assert version is not None
                    key = self._key_of(failed.path)
                    adopted.add(key)
                    self._owner_versions[key] = version
                elif verdict != "gone":
                    holder = await self._holder(failed.path)
                    self._unrecorded |= adopted  # released by the next attempt unless wanted
                    raise _Conflict(f"{failed.path} is held by {holder}", failed.path) from None
        else:
            raise _Conflict("owner nodes keep coming back")
        self._check_same_session(session_seen)
        self._unrecorded |= gain.keys()  # until the offsets are read
        starts: dict[PartitionKey, int | None] = {}
        present: set[PartitionKey] = set()
        for key in gain:
            try:
                data, _stat = await self._zk.get(self._offset_path(key))
                present.add(key)
                starts[key] = decode_offset(data)
            except NoNodeError:
                starts[key] = None
        self._check_same_session(session_seen)
        self._unrecorded -= gain.keys()
        self.owned = self.owned | gain.keys()
        self._threads.update(gain)
        for key, start in starts.items():
            self._positions[key] = start
            self._committed[key] = start
            if key in present:
                self._offset_nodes.add(key)

    async def _inspect_owner_node(self, path: str, value: bytes) -> tuple[str, int | None]:
        """Who holds the owner node at ``path``: ``("ours", version)`` (this
        session, now or after replacing one left by another session with our
        thread id), ``("gone", None)`` (vanished: create it again) or
        ``("other", None)``."""
        verdict, version = await self._take_over_stale(path, value, value)
        return ("ours" if verdict == "replaced" else verdict), version

    async def _holder(self, path: str) -> str:
        try:
            data, _stat = await self._zk.get(path)
            return decode_owner(data)
        except (NoNodeError, RegistryValueError):
            return "nobody (released meanwhile)"

    # -- fetchers ---------------------------------------------------------------------

    def _stop_fetchers(self) -> None:
        if self._fetch_scope is not None:
            self._fetch_scope.cancel()
            self._fetch_scope = None

    def _start_fetchers(self) -> None:
        self._stop_fetchers()
        if not self.owned or self._nursery is None:
            return
        targets = []
        for key in sorted(self.owned):
            broker_id, part = parse_partition_name(key[1])
            targets.append(FetchTarget(self.generation, key, broker_id, part, self._positions.get(key)))
        scope = trio.CancelScope()
        self._fetch_scope = scope
        self._nursery.start_soon(self._run_fetchers, scope, targets)

    async def _run_fetchers(self, scope: trio.CancelScope, targets: list[FetchTarget]) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                for target in targets:
                    nursery.start_soon(run_fetcher, target, self.config, self._chunk_send,
                                       self._broker_address, self._wait_until_fetching_allowed)

    async def _wait_until_fetching_allowed(self) -> None:
        """Fetchers pause while the ZooKeeper session is SUSPENDED (0.7 race fix)."""
        await self._zk.state.wait_value(SessionState.CONNECTED)

    async def _broker_address(self, broker_id: int) -> tuple[str, int]:
        data, _stat = await self._zk.get(paths.broker_id(broker_id))
        info = parse_broker_registration(data)
        return info.host, info.port
