"""Which broker leads partition p of topic t: the one metadata cache of every client.

docs/protocol.md §9.4 (METADATA) and §12 (replication).  ``LeaderCache`` is
pure: it learns from METADATA answers and says where each partition of a
replicated topic lives.  A record from an older leader epoch never replaces a
newer one, so a broker with a stale view cannot send the client back to a
deposed leader.  Unreplicated (0.7) topics keep the 0.7 model, where a
partition is a ``(broker, partition)`` pair, and never enter this cache as
replicated.

It imports no I/O library, so blocking readers (the Spark source) use it as
they are; ``trikafka.client.leaders.LeaderDirectory`` keeps it fresh in Trio.
"""

from __future__ import annotations

from typing import Iterable

from trikafka.wire import NO_LEADER, ErrorCode, Metadata, PartitionMetadata

Address = tuple[str, int]


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
