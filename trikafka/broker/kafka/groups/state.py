"""The groups of one ``__consumer_offsets`` partition (docs/protocol.md §17.3, §17.5), sans I/O.

``OffsetsPartition`` is what a partition's records say: for each key its
last record wins and a tombstone removes it.  Loading applies every record in
log order; the coordinator applies its own records once they are committed,
with their log offsets, so a record applied twice or out of order never
overwrites a later one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import GroupKey, GroupValue, OffsetKey, OffsetValue, RecordKey, RecordValue

TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    """Kafka's group states (§17.4); the value is the name DescribeGroups and ListGroups answer."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Committed:
    """A committed offset and where its record is in the partition (a later record wins)."""

    value: OffsetValue
    log_offset: int


@dataclass(slots=True)
class Group:
    """One group: its committed offsets, and (once it has had members) its metadata record."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    offsets: dict[TopicPartition, Committed] = field(default_factory=dict)
    metadata: GroupValue | None = None
    metadata_log_offset: int = -1
    # Commits being written (require_stable, §17.5: the group's offsets are not stable meanwhile).
    pending_commits: int = 0

    @property
    def has_members(self) -> bool:
        return self.metadata is not None and bool(self.metadata.members)

    @property
    def generation(self) -> int:
        return 0 if self.metadata is None else self.metadata.generation

    def has_member(self, member_id: str) -> bool:
        return self.metadata is not None and any(m.member_id == member_id for m in self.metadata.members)

    def check_commit(self, member_id: str, generation: int, group_instance_id: str | None) -> ErrorCode:
        """Whether an OffsetCommit of this member and generation may write (§17.5)."""
        if generation < 0 and not member_id and not self.has_members:
            return ErrorCode.none  # a simple commit: allowed while the group has no members
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if not self.has_member(member_id):
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    @property
    def forgettable(self) -> bool:
        """Nothing of the group remains: no offset, no metadata, no commit being written."""
        return not self.offsets and self.metadata is None and not self.pending_commits

    def apply_offset(self, topic: str, partition: int, value: OffsetValue | None, log_offset: int) -> None:
        key = (topic, partition)
        current = self.offsets.get(key)
        if current is not None and current.log_offset > log_offset:
            return
        if value is None:
            self.offsets.pop(key, None)
        else:
            self.offsets[key] = Committed(value, log_offset)

    def apply_metadata(self, value: GroupValue | None, log_offset: int) -> None:
        if self.metadata_log_offset > log_offset:
            return
        self.metadata = value
        self.metadata_log_offset = log_offset


class OffsetsPartition:
    """The groups whose records live in one partition of ``__consumer_offsets``."""

    def __init__(self, index: int):
        self.index = index
        self.groups: dict[str, Group] = {}

    def group(self, group_id: str) -> Group | None:
        """The group, None when the partition holds nothing of it."""
        return self.groups.get(group_id)

    def group_or_new(self, group_id: str) -> Group:
        """The group, an Empty one (kept) when the partition holds nothing of it."""
        found = self.groups.get(group_id)
        if found is None:
            found = self.groups[group_id] = Group(group_id)
        return found

    def apply(self, key: RecordKey, value: RecordValue | None, log_offset: int) -> None:
        """One record of the partition, at ``log_offset``: the last record of a key wins."""
        group = self.group_or_new(key.group)
        if isinstance(key, OffsetKey):
            assert value is None or isinstance(value, OffsetValue)
            group.apply_offset(key.topic, key.partition, value, log_offset)
        else:
            assert isinstance(key, GroupKey) and (value is None or isinstance(value, GroupValue))
            group.apply_metadata(value, log_offset)
        self.forget_if_empty(key.group)

    def forget_if_empty(self, group_id: str) -> None:
        """Drop the group when nothing of it remains (a tombstone removed its last key)."""
        group = self.groups.get(group_id)
        if group is not None and group.forgettable:
            del self.groups[group_id]
