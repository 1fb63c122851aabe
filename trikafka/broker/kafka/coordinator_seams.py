"""What the group and transaction coordinators need of the broker besides their internal topic
(``internal_topic.InternalTopic``), as ``typing.Protocol``s (docs/architecture.md).

The composition root (``service.KafkaService``) passes each coordinator its internal topic, the
broker's settings and clock, and these; a coordinator reaches nothing else of the broker.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from kio.schema.errors import ErrorCode


class TransactionMarkers(Protocol):
    """How a transaction's decision reaches its partitions (§19.5, §19.6; ``markers.MarkerWriter``)."""

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """Append a COMMIT or ABORT marker to each partition with acks -1; each partition's error."""


class ZooKeeperGroups(Protocol):
    """The 0.7 consumer groups registered in ZooKeeper, which a Kafka group may not share (§17.7)."""

    async def has_07_consumers(self, group_id: str) -> bool:
        """Whether ``group_id`` has 0.7 consumers registered (False without ZooKeeper)."""
