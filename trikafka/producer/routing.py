"""Routing: which broker and partition each message goes to, following leaders as they move.

Unreplicated topics use the discovery's partition list (0.7's).  A
message without a key goes to a random partition, preferring brokers not
backing off after a failure; a keyed message goes to ``partitioner(key, n)``.

Replicated topics (docs/protocol.md §12.13) are routed to each partition's
current leader (``view.leaders``).  A part refused because the leader moved
(NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, a fenced epoch) or whose
leader's connection broke forgets that leader (``leader_moved``,
``forget_leaders``); the next ``prepare`` asks METADATA again
(``client.LeaderDirectory``, with its own backoff), so the next round goes to
the new one.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from trikafka.client.connection import connect
from trikafka.client.errors import BrokerConnectionError, ClientError
from trikafka.client.leaders import Connector, LeaderDirectory, LeaderNotAvailableError
from trikafka.wire import NO_LEADER, is_retriable, needs_leader_refresh

from .config import ProducerConfig
from .discovery import ClusterView, StaticDiscovery, ZooKeeperDiscovery
from .errors import BrokerRejectedError, NoBrokersAvailableError, PartitionerError
from .partitioner import BrokerPartition, Key, PartitionFn
from .pool import BrokerPool
from .results import Delivery, SendResult

# A queued message: (topic, key, payload, delivery or None).
Message = tuple[str, Key, bytes, Delivery | None]
# One broker's share of a request: (topic, partition, indices of its messages).
Part = tuple[str, int, list[int]]
# Why a message still waits for another round, by message index.
RetryErrors = dict[int, ClientError]


class Router:
    """Chooses the target of each message and keeps replicated topics' leaders known.

    ``discovery`` gives the partition lists, ``pool`` says which brokers are
    backing off; ``rng`` picks partitions for messages without a key.
    """

    def __init__(self, config: ProducerConfig, discovery: StaticDiscovery | ZooKeeperDiscovery, pool: BrokerPool,
                 *, rng: random.Random, partitioner: PartitionFn, connector: Connector | None = None) -> None:
        self.discovery = discovery
        self._pool = pool
        self._rng = rng
        self._partitioner = partitioner
        self._directory = self._make_directory(config, discovery.view, connector)

    @staticmethod
    def _make_directory(config: ProducerConfig, view: ClusterView, connector: Connector | None) -> LeaderDirectory:
        return LeaderDirectory(
            lambda: [view.brokers[b] for b in sorted(view.brokers)], cache=view.leaders,
            connector=connect if connector is None else connector,
            connect_kwargs=dict(connect_timeout_s=config.connect_timeout_s,
                                request_timeout_s=config.request_timeout_s))

    def partitions(self, topic: str) -> list[BrokerPartition]:
        """``topic``'s partition list (``NO_LEADER`` where a replicated partition has no known leader)."""
        return self.discovery.partitions(topic)

    async def prepare(self, topics: Iterable[str]) -> None:
        """Make sure ``topics`` are known to the discovery and their leaders, if replicated, are known."""
        topics = list(topics)
        for topic in topics:
            await self.discovery.ensure_topic(topic)
        await self.refresh_leaders(topics)

    async def refresh_leaders(self, topics: Iterable[str]) -> None:
        """METADATA for the replicated ``topics`` with a partition whose leader is not known."""
        view = self.discovery.view
        leaders = view.leaders
        stale = [t for t in topics if leaders.replicated(t) and leaders.missing_leaders([t])]
        if stale:
            await self._directory.refresh(stale)
            view.leaders_changed()

    def leader_moved(self, topic: str, partition: int) -> None:
        """The broker refused ``topic``-``partition`` as its leader: look the leader up again."""
        view = self.discovery.view
        view.leaders.invalidate(topic, partition)
        view.leaders_changed()

    def forget_leaders(self, parts: Iterable[Part]) -> None:
        """The connection to a leader broke: look its replicated partitions up again."""
        leaders = self.discovery.view.leaders
        for topic, partition, _ in parts:
            if leaders.replicated(topic):
                self.leader_moved(topic, partition)

    def leader_trouble(self, topic: str, error: BaseException | None) -> bool:
        """Whether a message failed only because of a failover in progress: its leader moved
        or is not known, or (a replicated topic) its leader broke off or could not commit it
        yet because the ISR has not shrunk past a dead follower (23, 24, 6)."""
        if isinstance(error, LeaderNotAvailableError):
            return True
        if isinstance(error, BrokerRejectedError) and needs_leader_refresh(error.error_code):
            return True
        if not self.discovery.view.leaders.replicated(topic):
            return False
        if isinstance(error, BrokerRejectedError):
            return is_retriable(error.error_code)
        return isinstance(error, BrokerConnectionError)

    def _targets(self, topic: str) -> tuple[list[BrokerPartition], list[BrokerPartition]]:
        """(every partition, those with a known leader on brokers not backing off) of ``topic``."""
        every = self.discovery.partitions(topic)
        led = [bp for bp in every if bp.broker_id != NO_LEADER]
        available = [bp for bp in led if self._pool.available(bp.broker_id)]
        return every, (available or led or every)

    def route(self, messages: Sequence[Message], todo: list[int], results: list[SendResult | None],
              last_error: RetryErrors) -> dict[int, list[Part]]:
        """Group ``todo`` by broker, then by (topic, partition).

        A message that cannot be routed now gets its reason in ``last_error``
        (no broker known, no leader yet: a later round may route it); one that
        never can (its key fails the partitioner) gets its final result.
        """
        per_topic: dict[str, tuple[list[BrokerPartition], list[BrokerPartition],
                                   dict[BrokerPartition, list[int]]]] = {}
        rand = self._rng.random
        partitioner = self._partitioner
        for i in todo:
            topic, key = messages[i][0], messages[i][1]
            info = per_topic.get(topic)
            if info is None:
                every, available = self._targets(topic)
                info = per_topic[topic] = (every, available, {})
            every, available, routed = info
            if not every:
                last_error[i] = NoBrokersAvailableError(f"no live broker is known for {topic!r}")
                continue
            if key is None:
                n = len(available)
                target = available[int(rand() * n)] if n > 1 else available[0]
            else:
                try:
                    index = partitioner(key, len(every))
                    if type(index) is not int or not 0 <= index < len(every):
                        raise ValueError(f"partitioner returned {index!r} for {len(every)} partitions")
                except Exception as exc:
                    error = PartitionerError(f"cannot partition key {key!r}: {exc}")
                    error.__cause__ = exc
                    results[i] = SendResult(topic, None, None, error=error)
                    continue
                target = every[index]
            if target.broker_id == NO_LEADER:
                last_error[i] = LeaderNotAvailableError(topic, target.partition)
                continue
            bucket = routed.get(target)
            if bucket is None:
                routed[target] = [i]
            else:
                bucket.append(i)
        by_broker: dict[int, list[Part]] = {}
        for topic, (_every, _available, routed) in per_topic.items():
            for target, indices in routed.items():
                by_broker.setdefault(target.broker_id, []).append((topic, target.partition, indices))
        return by_broker


__all__ = ["Message", "Part", "RetryErrors", "Router"]
