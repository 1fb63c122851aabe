"""Which broker leads partition p of topic t: the one metadata cache of every client.

docs/protocol.md §9.4 (METADATA) and §12 (replication).  A replicated topic has
partitions ``0..N-1`` and, per partition, one leader per leader epoch; writes go
to the leader only, and the leader moves when a broker dies.  Unreplicated
(0.7) topics keep the 0.7 model, where a partition is a ``(broker, partition)``
pair, and never enter this cache as replicated.

``LeaderCache`` is pure: it learns from METADATA answers and says where each
partition of a replicated topic lives.  A record from an older leader epoch
never replaces a newer one, so a broker with a stale view cannot send the
client back to a deposed leader.

``LeaderDirectory`` adds the I/O: it asks any broker it knows for METADATA
(one short connection per refresh), one refresh at a time (callers that wait
meanwhile share its answer), and waits a doubling backoff before asking again
while some partition asked about has no leader, so a failover costs a few small
requests and never a busy loop.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

import trio

from trikafka.wire import NO_LEADER, ErrorCode, Metadata, PartitionMetadata

from .connection import Connection, connect
from .errors import BrokerConnectionError, BrokerError

log = logging.getLogger(__name__)

DEFAULT_REFRESH_BACKOFF_MIN_S = 0.05
DEFAULT_REFRESH_BACKOFF_MAX_S = 1.0

Address = tuple[str, int]


class LeaderNotAvailableError(BrokerError):
    """No leader of the partition became known within the time allowed."""

    def __init__(self, topic: str, partition: int, why: str = ""):
        super().__init__(ErrorCode.LEADER_NOT_AVAILABLE,
                         f"no leader of {topic}-{partition} is known" + (f" ({why})" if why else ""))
        self.topic, self.partition = topic, partition


def _looks_unreplicated(partitions: Iterable[PartitionMetadata], answered_by: int | None) -> bool:
    """A 0.7 topic's record: every partition led by the answering broker alone, at epoch 0 (§9.4)."""
    return all(p.error == ErrorCode.NO_ERROR and p.leader == answered_by and p.leader_epoch == 0
               and p.replicas == (answered_by,) for p in partitions)


class LeaderCache:
    """Leaders of replicated partitions and broker addresses, learnt from METADATA.

    ``version`` grows whenever a leader or an address changes, so a caller can
    tell that something moved since it last looked.
    """

    def __init__(self) -> None:
        self.brokers: dict[int, Address] = {}
        self._replicated: dict[str, dict[int, PartitionMetadata]] = {}
        self._plain: set[str] = set()
        self.version = 0

    # -- learning ------------------------------------------------------------------

    def learn(self, metadata: Metadata) -> None:
        """Take in a METADATA answer (its first broker is the one that answered, §9.4)."""
        for broker in metadata.brokers:
            if self.brokers.get(broker.broker_id) != (broker.host, broker.port):
                self.brokers[broker.broker_id] = (broker.host, broker.port)
                self.version += 1
        answered_by = metadata.brokers[0].broker_id if metadata.brokers else None
        for record in metadata.topics:
            if record.error != ErrorCode.NO_ERROR or not record.partitions:
                continue  # this broker does not know the topic: it says nothing about leaders
            if record.topic not in self._replicated and _looks_unreplicated(record.partitions, answered_by):
                self._plain.add(record.topic)
                continue
            self._learn_partitions(record.topic, record.partitions)

    def _learn_partitions(self, topic: str, partitions: Iterable[PartitionMetadata]) -> None:
        self._plain.discard(topic)
        known = self._replicated.setdefault(topic, {})
        for p in partitions:
            old = known.get(p.partition)
            if old is not None and p.leader_epoch < old.leader_epoch:
                continue  # a broker that has not seen the newer election yet
            if old != p:
                known[p.partition] = p
                self.version += 1

    def mark_replicated(self, topic: str, partition_count: int | None = None) -> None:
        """Record that ``topic`` is replicated (ZooKeeper says so, or a broker answered
        NOT_LEADER_FOR_PARTITION, which only replicated partitions do); leaders come later."""
        self._plain.discard(topic)
        known = self._replicated.setdefault(topic, {})
        for p in range(partition_count or 0):
            if p not in known:
                known[p] = PartitionMetadata(p, NO_LEADER, -1)
                self.version += 1

    def invalidate(self, topic: str, partition: int) -> None:
        """The cached leader refused the partition: forget it until the next METADATA says more."""
        if partition < 0:  # "any partition" (0.7's -1) was refused: only the topic is learnt
            self.mark_replicated(topic)
            return
        known = self._replicated.get(topic)
        if known is None:
            self.mark_replicated(topic)
            known = self._replicated[topic]
        old = known.get(partition)
        if old is None or old.leader != NO_LEADER:
            epoch = old.leader_epoch if old is not None else -1
            known[partition] = PartitionMetadata(partition, NO_LEADER, epoch, old.replicas if old else (),
                                                 old.isr if old else (), ErrorCode.LEADER_NOT_AVAILABLE)
            self.version += 1

    # -- asking --------------------------------------------------------------------

    def replicated(self, topic: str) -> bool | None:
        """True for a replicated topic, False for a 0.7 one, None when not known yet."""
        if topic in self._replicated:
            return True
        return False if topic in self._plain else None

    def partition_count(self, topic: str) -> int | None:
        """How many partitions a replicated topic has (None: not known as replicated)."""
        known = self._replicated.get(topic)
        return None if known is None else (max(known) + 1 if known else 0)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        """The last record of a replicated partition (leader, epoch, replicas, ISR)."""
        return self._replicated.get(topic, {}).get(partition)

    def leader(self, topic: str, partition: int) -> int | None:
        """The id of the partition's leader, or None if none is known."""
        record = self.partition(topic, partition)
        if record is None or record.leader == NO_LEADER or record.error != ErrorCode.NO_ERROR:
            return None
        return record.leader

    def leader_address(self, topic: str, partition: int) -> Address | None:
        """Where the partition's leader listens, or None if it (or its address) is unknown."""
        leader = self.leader(topic, partition)
        return None if leader is None else self.brokers.get(leader)

    def leaders(self, topic: str) -> list[tuple[int, int]]:
        """``(leader id or NO_LEADER, partition)`` for partitions ``0..N-1`` of a replicated topic."""
        count = self.partition_count(topic) or 0
        out = []
        for p in range(count):
            leader = self.leader(topic, p)
            out.append((NO_LEADER if leader is None or leader not in self.brokers else leader, p))
        return out

    def missing_leaders(self, topics: Iterable[str]) -> bool:
        """Whether some partition of the replicated ``topics`` has no known leader (or count)."""
        for topic in topics:
            if self.replicated(topic) is False:
                continue
            pairs = self.leaders(topic)
            if not pairs or any(leader == NO_LEADER for leader, _ in pairs):
                return True
        return False


Connector = Callable[..., Awaitable[Connection]]


class LeaderDirectory:
    """A ``LeaderCache`` kept fresh by METADATA requests to any known broker.

    ``bootstrap()`` gives addresses to ask when the cache knows no broker yet
    (or none of those answer): a static broker list, the ZooKeeper registry.
    ``connector`` opens connections (default ``trikafka.client.connect``).
    """

    def __init__(
        self,
        bootstrap: Callable[[], Iterable[Address]] | Iterable[Address] = (),
        *,
        cache: LeaderCache | None = None,
        connector: Connector = connect,
        connect_kwargs: dict | None = None,
        backoff_min_s: float = DEFAULT_REFRESH_BACKOFF_MIN_S,
        backoff_max_s: float = DEFAULT_REFRESH_BACKOFF_MAX_S,
    ) -> None:
        self.cache = cache if cache is not None else LeaderCache()
        self._bootstrap = bootstrap if callable(bootstrap) else (lambda fixed=tuple(bootstrap): fixed)
        self._connector = connector
        self._connect_kwargs = dict(connect_kwargs or {})
        self._backoff_min_s, self._backoff_max_s = backoff_min_s, backoff_max_s
        self._backoff_s = 0.0
        self._next_at = float("-inf")
        self._lock = trio.Lock()
        self._rounds = 0
        self._start = 0  # rotates the broker asked first
        self.refreshes = 0  # METADATA answers taken in (stats and tests)

    def _candidates(self, also_ask: Iterable[Address] = ()) -> list[Address]:
        known = [self.cache.brokers[b] for b in sorted(self.cache.brokers)]
        if known:
            self._start = (self._start + 1) % len(known)
            known = known[self._start:] + known[:self._start]
        out: list[Address] = []
        for address in [*known, *self._bootstrap(), *also_ask]:
            address = (address[0], int(address[1]))
            if address not in out:
                out.append(address)
        return out

    async def refresh(self, topics: Iterable[str], *, also_ask: Iterable[Address] = ()) -> bool:
        """Ask one broker for METADATA of ``topics``; True if some broker answered.

        ``also_ask``: addresses to try after the known brokers and the bootstrap.
        A caller that waited for another caller's refresh shares its answer.
        Between rounds that left a partition without leader (or found no
        broker) it waits a backoff doubling from ``backoff_min_s`` to
        ``backoff_max_s``; a round that finds every leader resets it.
        """
        topics = list(dict.fromkeys(topics))
        seen = self._rounds
        async with self._lock:
            if self._rounds != seen and not self.cache.missing_leaders(topics):
                return True  # refreshed while we waited, and it answered what we need
            await trio.sleep_until(self._next_at)
            answered = await self._ask_any(topics, list(also_ask))
            self._rounds += 1
            if answered and not self.cache.missing_leaders(topics):
                self._backoff_s = 0.0
                self._next_at = float("-inf")
            else:
                self._backoff_s = min(self._backoff_max_s, max(self._backoff_min_s, self._backoff_s * 2))
                self._next_at = trio.current_time() + self._backoff_s
            return answered

    async def _ask_any(self, topics: list[str], also_ask: list[Address]) -> bool:
        for host, port in self._candidates(also_ask):
            try:
                conn = await self._connector(host, port, **self._connect_kwargs)
            except BrokerConnectionError as exc:
                log.debug("metadata from %s:%d: %s", host, port, exc)
                continue
            try:
                async with conn:
                    metadata = await conn.metadata(topics)
            except (BrokerConnectionError, BrokerError) as exc:
                # A plain 0.7 broker closes on METADATA (ExtensionNotSupported): it
                # knows no replicated topic, so ask the next one.
                log.debug("metadata from %s:%d: %s", host, port, exc)
                continue
            self.cache.learn(metadata)
            self.refreshes += 1
            return True
        return False

    async def leader_address(self, topic: str, partition: int, *, timeout_s: float | None = None) -> Address:
        """Where the leader of ``topic``-``partition`` listens, refreshing until one is known.

        Raises ``LeaderNotAvailableError`` after ``timeout_s`` (None: wait as long as it takes).
        """
        with trio.move_on_after(float("inf") if timeout_s is None else timeout_s):
            while True:
                address = self.cache.leader_address(topic, partition)
                if address is not None:
                    return address
                await self.refresh([topic])
        raise LeaderNotAvailableError(topic, partition, f"for {timeout_s} s")

    def leader_moved(self, topic: str, partition: int) -> None:
        """A broker refused ``topic``-``partition`` (NOT_LEADER, no leader, lost connection)."""
        self.cache.invalidate(topic, partition)


__all__ = ["LeaderCache", "LeaderDirectory", "LeaderNotAvailableError",
           "DEFAULT_REFRESH_BACKOFF_MIN_S", "DEFAULT_REFRESH_BACKOFF_MAX_S"]
