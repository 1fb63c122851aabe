"""The ZooKeeper-balanced group consumer (docs/protocol.md §8.3), with 0.7's races fixed.

Usage::

    async with KazooZooKeeperClient("127.0.0.1:2181") as zk:
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
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Awaitable, Callable

import trio

from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError

from .batches import GroupBatch
from .commits import FencedCommits
from .config import GroupConfig
from .delivery import GroupDelivery, GroupMessage
from .errors import ConsumerIdTakenOver, ConsumerTimeout
from .fetch_control import Fetchers
from .fetcher import PartitionKey
from .membership import Membership
from .ownership import Ownership
from .rebalance import Rebalancer
from .registry import StaticTopicCount, TopicCount, TopicFilter, WildcardTopicCount, new_consumer_id
from .watches import RebalanceTriggers

__all__ = ["GroupConsumer", "GroupMessage", "Subscription", "topic_count_for"]

log = logging.getLogger(__name__)

Subscription = Mapping[str, int] | TopicFilter | TopicCount


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
    ``open_stream(host, port)`` (tests) opens the connections to brokers instead
    of ``trio.open_tcp_stream``, e.g. ``trikafka.testing``'s in-memory network.

    The work is done by collaborators it owns: ``Membership`` (the ids node and
    the session), ``FencedCommits``, ``Rebalancer`` (with ``RebalanceTriggers``,
    the watches), ``Fetchers`` and ``GroupDelivery``, sharing one ``Ownership``.
    """

    def __init__(
        self,
        coordinator: ZooKeeperClient,
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
        self.group = paths.validate_component(group, "group")
        self.topic_count = topic_count_for(topics, num_streams or self.config.num_streams)
        self.consumer_id = new_consumer_id(group, consumer_id=consumer_id, clock_ms=clock_ms)
        self._zk = coordinator
        # Registrations, commits and rebalances take turns under this lock.
        self._lock = trio.Lock()
        self._ownership = Ownership()
        self._fetchers = Fetchers(coordinator, self.config, open_stream)
        self._membership = Membership(coordinator, self.group, self.consumer_id, self.topic_count,
                                      on_session_lost=self._session_lost, on_taken_over=self._drop_ownership)
        self._commits = FencedCommits(coordinator, self.group, self.config, lock=self._lock,
                                      membership=self._membership, ownership=self._ownership)
        self._rebalancer = Rebalancer(coordinator, self.group, self.config, lock=self._lock,
                                      membership=self._membership, ownership=self._ownership,
                                      commits=self._commits, fetchers=self._fetchers,
                                      leaders=self._fetchers.leaders)
        self._triggers = RebalanceTriggers(coordinator, self.group, self.topic_count, self._rebalancer.request)
        self._delivery = GroupDelivery(coordinator, self.config, membership=self._membership,
                                       ownership=self._ownership, fetchers=self._fetchers,
                                       rebalancing=self._rebalancer.rebalancing)
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None

    @property
    def owned(self) -> frozenset[PartitionKey]:
        """The partitions this consumer owns, as ``(topic, "<broker>-<partition>")``."""
        return self._ownership.owned

    @property
    def generation(self) -> int:
        """Counts the ownership changes; fetched data of an earlier generation is never delivered."""
        return self._ownership.generation

    @property
    def rebalances(self) -> int:
        """How many rebalances changed this consumer's ownership."""
        return self._rebalancer.rebalances

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> "GroupConsumer":
        await self._zk.wait_connected()
        await self._membership.refuse_kafka_group()  # raised here, not inside the nursery's group
        self._nursery_manager = trio.open_nursery()
        self._nursery = nursery = await self._nursery_manager.__aenter__()
        try:
            await self._zk.wait_connected()
            await self._zk.ensure_path(paths.consumer_ids(self.group))
            async with self._lock:
                await self._membership.register()
            self._fetchers.attach(nursery)
            membership = self._membership
            for task in (membership.watch_session, membership.watch_connection, membership.watch_registration):
                nursery.start_soon(task)
            self._triggers.start(nursery)
            nursery.start_soon(self._rebalancer.run)
            nursery.start_soon(self._commits.autocommit_loop)
        except BaseException as exc:
            nursery.cancel_scope.cancel()
            if not await self._nursery_manager.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> bool | None:
        assert self._nursery is not None and self._nursery_manager is not None
        self._nursery.cancel_scope.cancel()
        try:
            return await self._nursery_manager.__aexit__(exc_type, exc, traceback)
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
                self._membership.check_session()
                if self._membership.registered:
                    await self._commits.commit_and_release(self._ownership.owned,
                                                           release=self._ownership.unrecorded, deregister=True)
            except (ZooKeeperClientError, ConsumerIdTakenOver) as exc:
                log.warning("consumer %s left without a clean release: %s", self.consumer_id, exc)
            finally:
                self._drop_ownership()
        if scope.cancelled_caught:
            log.warning("consumer %s: the final commit timed out", self.consumer_id)

    def _drop_ownership(self) -> None:
        """Own nothing (the session or our consumer id is lost): stop fetching, unsettle."""
        self._ownership.drop()
        self._fetchers.stop()
        self._rebalancer.unsettle()

    def _session_lost(self) -> None:
        """Our ephemerals died with the old session: drop everything, rejoin."""
        self._drop_ownership()
        self._rebalancer.request()

    # -- the application's side ------------------------------------------------------

    async def commit(self) -> bool:
        """Write the position of every owned partition to its offsets node.

        Fenced: nothing is written unless this consumer's session still holds
        its registration and the partitions.  Returns False when something
        could not be written (a lost session or partition; the new owner then
        starts from the previous commit, so messages may come again).  Raises
        ``ConsumerIdTakenOver`` when a newer process registered our id.
        """
        return await self._commits.commit()

    async def wait_settled(self, timeout_s: float | None = None) -> bool:
        """Wait until no rebalance is pending or running; False on timeout."""
        return await self._rebalancer.wait_settled(timeout_s)

    def __aiter__(self) -> "GroupConsumer":
        return self

    async def __anext__(self) -> GroupMessage:
        if self.config.consumer_timeout_s is None:
            return await self._delivery.next_message()
        with trio.move_on_after(self.config.consumer_timeout_s):
            return await self._delivery.next_message()
        raise ConsumerTimeout(f"no message within {self.config.consumer_timeout_s} s")

    async def next_batch(self) -> GroupBatch:
        """The next whole fetched message set, undecoded (for a mirror).

        Its messages count as delivered, but commits keep writing the batch's
        start until ``acknowledge(batch)``: what was handed out and not
        acknowledged comes again after a crash or a hand-over (at least once).
        Do not mix with message iteration.
        """
        return await self._delivery.next_batch()

    def acknowledge(self, batch: GroupBatch) -> None:
        """``batch`` is safely handled: the next commit may write past it."""
        self._ownership.acknowledge((batch.topic, batch.partition), batch.offset)
