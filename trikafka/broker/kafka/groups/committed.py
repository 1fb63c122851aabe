"""A group's committed offsets (docs/protocol.md §17.5), sans I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from trikafka.kafka.group_records import NO_TIMESTAMP, OffsetValue

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Committed:
    """A committed offset and where its record is in the partition (a later record wins)."""

    value: OffsetValue
    log_offset: int


class CommittedOffsets:
    """One group's last committed offset per partition, and the commits still being written."""

    def __init__(self) -> None:
        self._by_partition: dict[TopicPartition, Committed] = {}
        self.pending = 0  # commits being written: the offsets are not stable meanwhile (require_stable)

    def get(self, key: TopicPartition) -> Committed | None:
        return self._by_partition.get(key)

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._by_partition)

    def __len__(self) -> int:
        return len(self._by_partition)

    def __bool__(self) -> bool:
        """Whether anything of the offsets remains: one committed, or one being written."""
        return bool(self._by_partition) or self.pending > 0

    def apply(self, topic: str, partition: int, value: OffsetValue | None, log_offset: int) -> None:
        """A record of ``__consumer_offsets`` at ``log_offset`` (None: a tombstone); a later one wins."""
        key = (topic, partition)
        current = self._by_partition.get(key)
        if current is not None and current.log_offset > log_offset:
            return
        if value is None:
            self._by_partition.pop(key, None)
        else:
            self._by_partition[key] = Committed(value, log_offset)

    def expired(self, cutoff_ms: int, emptied_ms: int = NO_TIMESTAMP) -> list[TopicPartition]:
        """The partitions whose offset expired by ``cutoff_ms`` (wall ms, §17.5): every one when the group
        became Empty at or before it (``emptied_ms``, known), else those committed at or before it."""
        if emptied_ms >= 0:
            return list(self._by_partition) if emptied_ms <= cutoff_ms else []
        return [key for key, committed in self._by_partition.items()
                if committed.value.commit_timestamp_ms <= cutoff_ms]
