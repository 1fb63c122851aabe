"""Where messages can go: the broker and partition view, static or from ZooKeeper.

``ClusterView`` holds live brokers (``/brokers/ids``) and, per topic, each
broker's partition count (``/brokers/topics/<t>/<id>``).  Its partition list
for a topic is the 0.7 ZooKeeper producer's: every ``(broker, p)`` with ``p < count`` in
numeric order, restricted to live brokers (a registration left by a broker
that is gone cannot be reached) [T], or partition 0 of every live broker when
nobody registered the topic yet.

Replicated topics (docs/protocol.md §12) have no registrations under
``/brokers/topics``: their partitions are ``0..N-1`` and each is written at its
current leader, which ``view.leaders`` (the client's one ``LeaderCache``)
knows from METADATA.  Their partition list is ``(leader, p)`` for every ``p``
in order, with ``NO_LEADER`` for a partition whose leader is not known now.

Two sources fill it:

* ``StaticDiscovery``: a fixed broker list (``broker.list``).  With a known
  partition count per broker the list is as above; without one it is
  ``(broker, -1)`` per broker, and the broker picks the partition, as 0.7
  does with ``broker.list`` (docs/protocol.md §5.1 step 1); a key then only picks the broker.
* ``ZooKeeperDiscovery``: watches (re-armed by the coordinator) on
  ``/brokers/ids``, each broker's node, and ``/brokers/topics/<t>`` for every
  topic the producer has sent to, and on ``/trikafka/topics/<t>``, which
  says whether the topic is replicated and how many partitions it has.
"""

from __future__ import annotations

import logging
from typing import Mapping

import trio

from trikafka.client.leader_cache import LeaderCache
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import (
    ConnectionLossError,
    NoNodeError,
    SessionExpiredError,
)
from trikafka.zk.registry_values import parse_broker_registration, parse_partition_count
from trikafka.zk.replication_values import ReplicationValueError, TopicAssignment

from .config import BrokerSpec
from .partitioner import BrokerPartition, producer_partitions

log = logging.getLogger(__name__)

UNKNOWN_PARTITION = -1  # "broker, choose one" (docs/protocol.md §5.1 step 1)


class ClusterView:
    """The producer's current picture of the cluster; ``version`` bumps on every change."""

    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict[int, int]] = {}
        self.version = 0
        self._changed = trio.Event()
        self._partition_cache: dict[str, list[BrokerPartition]] = {}
        self.leaders = LeaderCache()

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where a broker listens: the registry, else what METADATA said."""
        address = self.brokers.get(broker_id)
        return address if address is not None else self.leaders.brokers.get(broker_id)

    def leaders_changed(self) -> None:
        """``leaders`` learnt or forgot something: partition lists may differ now."""
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._partition_cache.clear()
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self, since_version: int) -> None:
        """Return once ``version`` differs from ``since_version``."""
        while self.version == since_version:
            await self._changed.wait()

    def set_broker(self, broker_id: int, host: str, port: int) -> None:
        if self.brokers.get(broker_id) != (host, port):
            self.brokers[broker_id] = (host, port)
            self._bump()

    def remove_broker(self, broker_id: int) -> None:
        if self.brokers.pop(broker_id, None) is not None:
            self._bump()

    def set_topic(self, topic: str, counts: Mapping[int, int]) -> None:
        counts = dict(counts)
        if self.topics.get(topic) != counts:
            self.topics[topic] = counts
            self._bump()

    def partitions(self, topic: str) -> list[BrokerPartition]:
        """The 0.7 producer's list for ``topic`` (cached until the next change); leaders if replicated."""
        if self.leaders.replicated(topic):
            return [BrokerPartition(b, p) for b, p in self.leaders.leaders(topic)]
        cached = self._partition_cache.get(topic)
        if cached is None:
            registered = {b: n for b, n in self.topics.get(topic, {}).items() if b in self.brokers}
            cached = producer_partitions(registered, self.brokers)
            self._partition_cache[topic] = cached
        return cached


class StaticDiscovery:
    """A fixed broker list; ``partitions_for(topic)`` gives the partitions per broker or None."""

    def __init__(self, brokers: tuple[BrokerSpec, ...], partitions_for) -> None:
        self.view = ClusterView()
        self._partitions_for = partitions_for
        for broker_id, host, port in brokers:
            self.view.brokers[broker_id] = (host, port)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async def ensure_topic(self, topic: str) -> None:
        if topic not in self.view.topics:
            count = self._partitions_for(topic)
            self.view.set_topic(topic, {b: (count or 0) for b in self.view.brokers})
        await trio.lowlevel.checkpoint()

    def partitions(self, topic: str) -> list[BrokerPartition]:
        if not self.view.leaders.replicated(topic) and not any(self.view.topics.get(topic, {}).values()):
            return [BrokerPartition(b, UNKNOWN_PARTITION) for b in sorted(self.view.brokers)]
        return self.view.partitions(topic)


class ZooKeeperDiscovery:
    """Keeps a ``ClusterView`` in step with ZooKeeper through watches (docs/protocol.md §8.1-§8.2, §12.13).

    ``await nursery.start(discovery.run)`` returns once the live brokers are
    known; ``await discovery.ensure_topic(t)`` once ``t``'s registrations are.
    """

    def __init__(self, coordinator: ZooKeeperClient) -> None:
        self.view = ClusterView()
        self._zk = coordinator
        self._nursery: trio.Nursery | None = None
        self._broker_scopes: dict[int, trio.CancelScope] = {}
        self._broker_czxid: dict[int, int] = {}
        self._topic_ready: dict[str, trio.Event] = {}
        self._replicated_ready: dict[str, trio.Event] = {}

    def partitions(self, topic: str) -> list[BrokerPartition]:
        return self.view.partitions(topic)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._watch_broker_ids)
            task_status.started()
            await trio.sleep_forever()

    async def ensure_topic(self, topic: str) -> None:
        """Start watching ``topic`` (once) and wait for its first reading."""
        ready = self._topic_ready.get(topic)
        if ready is None:
            assert self._nursery is not None, "ZooKeeperDiscovery.run is not running"
            ready = self._topic_ready[topic] = trio.Event()
            replicated = self._replicated_ready[topic] = trio.Event()
            self._nursery.start_soon(self._watch_topic, topic, ready)
            self._nursery.start_soon(self._watch_replicated, topic, replicated)
        await ready.wait()
        await self._replicated_ready[topic].wait()

    # -- brokers -------------------------------------------------------------------

    async def _watch_broker_ids(self, *, task_status: trio.TaskStatus[None]) -> None:
        started = False
        async for children in self._zk.watch_children(paths.broker_ids()):
            live = {int(c) for c in children or () if c.isdigit()}
            for gone in set(self._broker_scopes) - live:
                self._broker_scopes.pop(gone).cancel()
                self._broker_czxid.pop(gone, None)
                self.view.remove_broker(gone)
            for new in sorted(live - set(self._broker_scopes)):
                assert self._nursery is not None
                self._broker_scopes[new] = await self._nursery.start(self._watch_broker, new)
            if not started:
                started = True
                task_status.started()

    async def _watch_broker(self, broker_id: int, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            started = False
            async for value in self._zk.watch_data(paths.broker_id(broker_id)):
                if value is None:
                    self.view.remove_broker(broker_id)
                else:
                    data, stat = value
                    try:
                        info = parse_broker_registration(data)
                    except (ValueError, UnicodeDecodeError):
                        log.warning("ignoring malformed registration of broker %d: %r", broker_id, data)
                        self.view.remove_broker(broker_id)
                    else:
                        self.view.set_broker(broker_id, info.host, info.port)
                    previous = self._broker_czxid.get(broker_id)
                    self._broker_czxid[broker_id] = stat.czxid
                    if previous is not None and previous != stat.czxid:
                        # Re-registered (a restart, a new session): its topic nodes were
                        # re-created too, maybe with other counts; a children watch alone
                        # could have seen the same list before and after.
                        for topic in list(self._topic_ready):
                            await self._refresh_topic(topic)
                if not started:
                    started = True
                    task_status.started(scope)
        if not started:
            task_status.started(scope)

    # -- topics --------------------------------------------------------------------

    async def _watch_topic(self, topic: str, ready: trio.Event) -> None:
        try:
            async for children in self._zk.watch_children(paths.broker_topic(topic)):
                self.view.set_topic(topic, await self._read_counts(topic, children or ()))
                ready.set()
        finally:
            ready.set()  # never leave ensure_topic waiting on a watch that ended

    async def _watch_replicated(self, topic: str, ready: trio.Event) -> None:
        try:
            async for value in self._zk.watch_data(paths.replicated_topic(topic)):
                if value is not None:
                    try:
                        assignment = TopicAssignment.decode(value[0])
                    except ReplicationValueError as exc:
                        log.warning("ignoring the malformed replicated topic %s: %s", topic, exc)
                    else:
                        self.view.leaders.mark_replicated(topic, len(assignment.replicas))
                        self.view.leaders_changed()
                ready.set()
        finally:
            ready.set()

    async def _refresh_topic(self, topic: str) -> None:
        try:
            children = await self._zk.children(paths.broker_topic(topic))
        except NoNodeError:
            children = []
        except (ConnectionLossError, SessionExpiredError):
            return  # the watches re-read after the reconnect
        self.view.set_topic(topic, await self._read_counts(topic, children))

    async def _read_counts(self, topic: str, children) -> dict[int, int]:
        counts: dict[int, int] = {}
        for child in children:
            if not child.isdigit():
                continue
            while True:
                try:
                    data, _stat = await self._zk.get(paths.broker_topic_id(topic, int(child)))
                except NoNodeError:
                    break
                except (ConnectionLossError, SessionExpiredError):
                    await self._zk.wait_reconnected()
                    continue
                try:
                    counts[int(child)] = parse_partition_count(data)
                except (ValueError, UnicodeDecodeError):
                    log.warning("ignoring malformed partition count %r of %s on broker %s", data, topic, child)
                break
        return counts


__all__ = ["ClusterView", "StaticDiscovery", "ZooKeeperDiscovery", "UNKNOWN_PARTITION"]
