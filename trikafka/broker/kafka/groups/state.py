"""The groups of one ``__consumer_offsets`` partition (docs/protocol.md §17.3, §17.5), sans I/O.

``OffsetsPartition`` is what a partition's records say: for each key its
last record wins and a tombstone removes it.  Loading applies every record in
log order; the coordinator applies its own records once they are committed,
with their log offsets, so a record applied twice or out of order never
overwrites a later one.
"""

from __future__ import annotations

from trikafka.kafka.group_records import (ConsumerKey, GroupKey, GroupValue, OffsetKey, OffsetValue, RecordKey,
                                          RecordValue)

from .group import Group, GroupSettings
from .txn_offsets import PendingOffset, PendingTxnOffsets


class OffsetsPartition:
    """The groups whose records live in one partition of ``__consumer_offsets``."""

    def __init__(self, index: int, settings: GroupSettings | None = None):
        self.index = index
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}
        self.txn_offsets = PendingTxnOffsets()  # offsets of open transactions (§19.5.4)
        self.live = False  # activated: records now come from the groups' own state (§17.9)

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
        if isinstance(key, ConsumerKey):
            # A live consumer group's records are its state's own; only a load reads them (§17.9).
            assert value is None or not isinstance(value, (OffsetValue, GroupValue))
            group.consumer_or_new(loading=not self.live).load_record(key, value)
        elif isinstance(key, OffsetKey):
            assert value is None or isinstance(value, OffsetValue)
            group.offsets.apply(key.topic, key.partition, value, log_offset)
        else:
            assert isinstance(key, GroupKey) and (value is None or isinstance(value, GroupValue))
            group.apply_metadata(value, log_offset)
        self.forget_if_empty(key.group)

    def apply_transactional(self, producer_id: int, key: RecordKey, value: RecordValue | None,
                            log_offset: int) -> None:
        """A record of a transactional batch of ``producer_id`` (TxnOffsetCommit, §19.5.4): pending
        until that producer's marker; only offset commits are written transactionally."""
        if not isinstance(key, OffsetKey):
            self.apply(key, value, log_offset)
            return
        assert value is None or isinstance(value, OffsetValue)
        self.txn_offsets.add(producer_id, PendingOffset(key.group, key.topic, key.partition, value, log_offset))

    def apply_read(self, key: RecordKey, value: RecordValue | None, log_offset: int,
                   open_producer: int | None) -> None:
        """A record as the log holds it, read at a load (§17.3) or a TxnOffsetCommit's once committed
        (§19.5.4): it counts, or (``open_producer``) it is pending in that producer's still-open
        transaction until its marker."""
        if open_producer is None:
            self.apply(key, value, log_offset)
        else:
            self.apply_transactional(open_producer, key, value, log_offset)

    def on_marker(self, producer_id: int, commit: bool) -> list[PendingOffset]:
        """``producer_id``'s COMMIT (``commit``) or ABORT marker reached this partition: its pending
        offsets become the groups' committed ones, or are dropped; the offsets it ended."""
        ended = self.txn_offsets.end(producer_id)
        if commit:
            for pending in ended:
                self.group_or_new(pending.group_id).offsets.apply(pending.topic, pending.partition, pending.value,
                                                                   pending.log_offset)
                self.forget_if_empty(pending.group_id)
        return ended

    def activate(self, now_ms: int) -> None:
        """After a load: every group's membership from its metadata, sessions from ``now_ms`` (§17.3)."""
        for group in self.groups.values():
            group.activate(now_ms)
        self.live = True

    def forget_if_empty(self, group_id: str) -> None:
        """Drop the group when nothing of it remains (a tombstone removed its last key)."""
        group = self.groups.get(group_id)
        if group is not None and group.forgettable:
            del self.groups[group_id]
