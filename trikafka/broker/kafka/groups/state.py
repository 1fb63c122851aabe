"""The groups of one ``__consumer_offsets`` partition (docs/protocol.md §17.3, §17.5), sans I/O.

``OffsetsPartition`` is what a partition's records say: for each key its
last record wins and a tombstone removes it.  Loading applies every record in
log order; the coordinator applies its own records once they are committed,
with their log offsets, so a record applied twice or out of order never
overwrites a later one.
"""

from __future__ import annotations

from trikafka.kafka.group_records import GroupKey, GroupValue, OffsetKey, OffsetValue, RecordKey, RecordValue

from .group import Group, GroupSettings


class OffsetsPartition:
    """The groups whose records live in one partition of ``__consumer_offsets``."""

    def __init__(self, index: int, settings: GroupSettings | None = None):
        self.index = index
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}

    def group(self, group_id: str) -> Group | None:
        """The group, None when the partition holds nothing of it."""
        return self.groups.get(group_id)

    def group_or_new(self, group_id: str) -> Group:
        """The group, an Empty one (kept) when the partition holds nothing of it."""
        found = self.groups.get(group_id)
        if found is None:
            found = self.groups[group_id] = Group(group_id, self.settings)
        return found

    def apply(self, key: RecordKey, value: RecordValue | None, log_offset: int) -> None:
        """One record of the partition, at ``log_offset``: the last record of a key wins."""
        group = self.group_or_new(key.group)
        if isinstance(key, OffsetKey):
            assert value is None or isinstance(value, OffsetValue)
            group.offsets.apply(key.topic, key.partition, value, log_offset)
        else:
            assert isinstance(key, GroupKey) and (value is None or isinstance(value, GroupValue))
            group.apply_metadata(value, log_offset)
        self.forget_if_empty(key.group)

    def activate(self, now_ms: int) -> None:
        """After a load: every group's membership from its metadata, sessions from ``now_ms`` (§17.3)."""
        for group in self.groups.values():
            group.activate(now_ms)

    def forget_if_empty(self, group_id: str) -> None:
        """Drop the group when nothing of it remains (a tombstone removed its last key)."""
        group = self.groups.get(group_id)
        if group is not None and group.forgettable:
            del self.groups[group_id]
