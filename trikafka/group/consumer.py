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
  delivered until the session is known to be alive (or known to be lost).  And
  after the connection is back, nothing is delivered until a read of our ids
  node shows it is still ours: a newer process with our consumer id may have
  taken over meanwhile (see below), and its watch may arrive late.
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
from collections.abc import Mapping
from typing import Awaitable, Callable, NamedTuple

import trio
from trio_util import AsyncBool

from trikafka.client.leaders import LeaderDirectory
from trikafka.wire.keyed import split_key
from trikafka.zk import paths
from trikafka.zk.coordinator import Coordinator
from trikafka.zk.errors import CoordinatorError
from trikafka.zk.ops import SessionState

from .batches import BatchHandout
from .commits import FencedCommits
from .config import GroupConfig
from .errors import ConsumerTimeout
from .fetch_control import FetcherControl
from .fetcher import Chunk, PartitionKey
from .membership import Membership
from .rebalance import Rebalancing
from .registry import StaticTopicCount, TopicCount, TopicFilter, WildcardTopicCount, new_consumer_id

log = logging.getLogger(__name__)

# The iterator hands out up to this many messages of a fetched chunk between
# real checkpoints (it always checks for cancellation); other tasks run in between.
MESSAGES_PER_CHECKPOINT = 64

Subscription = Mapping[str, int] | TopicFilter | TopicCount


class GroupMessage(NamedTuple):
    """A message as the group consumer delivers it.

    ``partition`` is the registry name ``"<broker>-<partition>"``; ``offset`` is
    where its entry starts and ``next_offset`` what a commit after it stores
    (spec §5: inner messages of a compressed wrapper share the wrapper's start).
    """

    topic: str
    partition: str
    broker_id: int | None  # None: a replicated partition (read from its current leader)
    part: int
    offset: int
    next_offset: int
    payload: bytes
    attributes: int = 0  # the message's attributes byte: its KEYED and TOMBSTONE bits

    @property
    def key(self) -> bytes | None:
        """The key of a keyed message (compacted topics), None for a plain one."""
        return split_key(self.payload, self.attributes)[0]

    @property
    def value(self) -> bytes:
        """The payload without its key (empty for a tombstone); a plain message's whole payload."""
        return split_key(self.payload, self.attributes)[1]


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


class GroupConsumer(Membership, FencedCommits, Rebalancing, FetcherControl, BatchHandout):
    """A member of consumer group ``group`` (see the module docstring).

    ``topics`` is ``{topic: number of streams}`` or a whitelist/blacklist
    ``TopicFilter`` (``registry.whitelist("logs-.*")``), which follows topics as
    they appear.  ``consumer_id`` is 0.7's ``consumerid`` (the registered id is
    ``<group>_<consumer_id>``); by default one is generated from the host name,
    ``clock_ms`` and a UUID.  Use ``async with``; iterate with ``async for``.
    ``open_stream(host, port)`` (tests) opens the connections to brokers instead
    of ``trio.open_tcp_stream``, e.g. ``trikafka.testing``'s in-memory network.
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
        open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
    ):
        self.config = config or GroupConfig()
        self._open_stream = open_stream  # replaces trio.open_tcp_stream to brokers (trikafka.testing)
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
        self._unacked: dict[PartitionKey, list[int]] = {}  # see BatchHandout
        self._offset_nodes: set[PartitionKey] = set()  # offsets nodes known to exist
        self._unrecorded: set[PartitionKey] = set()  # owner nodes created, not yet in ``owned``
        # Versions of the nodes our fenced multis check: a successor that takes
        # over our consumer id replaces them with strictly larger versions.
        self._ids_version = -1
        self._owner_versions: dict[PartitionKey, int] = {}  # for owned and unrecorded keys
        self._session_seen = -1  # session_generation our registration belongs to
        self._registered = False
        # Connection drops seen, and how many of them a registration read has
        # followed since (delivery waits while they differ; Membership._confirm_registration).
        self._disconnects = self._confirmed_disconnects = 0
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
        # Leaders of replicated partitions (docs/protocol.md §12.9), asked of the live brokers.
        self._live_brokers: list[tuple[str, int]] = []
        connect_kwargs: dict = dict(connect_timeout_s=self.config.connect_timeout_s,
                                    request_timeout_s=self.config.socket_timeout_s)
        if open_stream is not None:
            connect_kwargs["open_stream"] = open_stream
        self._leaders = LeaderDirectory(lambda: self._live_brokers, connect_kwargs=connect_kwargs)

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> "GroupConsumer":
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        try:
            await self._zk.wait_connected()
            await self._zk.ensure_path(paths.consumer_ids(self.group))
            async with self._lock:
                await self._register()
            for task in (self._watch_session, self._watch_connection, self._watch_registration, self._watch_members,
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
                and self._zk.session_generation.value == self._session_seen
                and self._disconnects == self._confirmed_disconnects):
            message = chunk.messages[chunk.index]
            chunk.index += 1
            self._positions[chunk.key] = message.next_offset
            return GroupMessage(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, message.offset,
                                message.next_offset, bytes(message.payload), message.attributes)
        return await self._next_message_slow()

    async def _next_message_slow(self) -> GroupMessage:
        while True:
            chunk = await self._gated_chunk()
            if chunk.index < len(chunk.messages):
                message = chunk.messages[chunk.index]
                chunk.index += 1
                self._positions[chunk.key] = message.next_offset
                return GroupMessage(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, message.offset,
                                    message.next_offset, bytes(message.payload), message.attributes)
            self._current = None

    async def _gated_chunk(self) -> Chunk:
        """The chunk to deliver from, once the gate is open: a live, connected session
        whose registration is confirmed since its last dropped connection, no
        rebalance in progress, and a chunk of the current generation."""
        while True:
            await self._zk.state.wait_value(SessionState.CONNECTED)
            await self._rebalancing.wait_value(False)
            if self._zk.state.value is not SessionState.CONNECTED or self._rebalancing.value:
                continue
            self._check_session()
            if self._disconnects != self._confirmed_disconnects:
                try:
                    await self._confirm_registration()
                except CoordinatorError:
                    await trio.sleep(self.config.fetcher_backoff_s)
                continue
            chunk = self._current
            if chunk is not None and chunk.generation == self.generation:
                return chunk
            self._current = None
            chunk = await self._chunk_receive.receive()
            if self._accept(chunk):
                self._current = chunk
            # and check the gate again before delivering from it

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
