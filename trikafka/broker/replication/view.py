"""What this broker knows of its replicated topics (docs/protocol.md §12), as the engine reads it.

``ReplicationView`` holds the replicated topics' assignments, the partition
states read from ZooKeeper, the replicas this broker hosts and the live
brokers.  ``Replication`` (``manager.py``) writes it; the engine's directory
and topic admin, and the listeners through them, read it.  It is Kafka's
split between the metadata cache and the replica manager: the composition
root builds the view first, so the partition directory is built whole with it,
and ``Replication`` is built later with the directory (whose local logs a
replica lives in) and the view it keeps up to date.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.metadata import BrokerAddress
from ...zk.replication_values import PartitionState, TopicAssignment
from ..engine.errors import EngineError
from ..engine.metadata import PartitionView, TopicView

if TYPE_CHECKING:
    from .hosted import HostedPartition

TopicPartition = tuple[str, int]


class ReplicationView:
    """The replicated topics, their partition states, the replicas hosted here, the live brokers."""

    __slots__ = ("topics", "states", "hosted", "brokers")

    def __init__(self) -> None:
        self.topics: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, PartitionState] = {}
        self.hosted: dict[TopicPartition, HostedPartition] = {}
        self.brokers: dict[int, BrokerAddress] = {}  # who listens where (/brokers/ids)

    def is_replicated(self, topic: str) -> bool:
        return topic in self.topics

    def partition_count(self, topic: str) -> int | None:
        assignment = self.topics.get(topic)
        return None if assignment is None else len(assignment.replicas)

    def topic_metadata(self, topic: str) -> TopicView | None:
        """METADATA's view of a replicated topic (None: not replicated)."""
        assignment = self.topics.get(topic)
        if assignment is None:
            return None
        parts = []
        for p, replicas in enumerate(assignment.replicas):
            state = self.states.get((topic, p))
            if state is None:
                parts.append(PartitionView(p, -1, -1, replicas, (), EngineError.LEADER_NOT_AVAILABLE))
                continue
            error = EngineError.NO_ERROR if state.leader >= 0 else EngineError.LEADER_NOT_AVAILABLE
            parts.append(PartitionView(p, state.leader, state.leader_epoch, replicas, state.isr, error))
        return TopicView(topic, tuple(parts))

    def peers(self) -> list[BrokerAddress]:
        return sorted(self.brokers.values())
