"""Transactional offsets in ``__consumer_offsets`` (§19.5.4): pending per (group, producer id) until
the producer's marker, committed by COMMIT with the log order kept, dropped by ABORT."""

from __future__ import annotations

from trikafka.broker.kafka.groups.state import OffsetsPartition
from trikafka.kafka.group_records import GroupKey, GroupValue, OffsetKey, OffsetValue

A, B = 100, 200  # producer ids


def offset(partitions: OffsetsPartition, group: str, topic: str = "in", index: int = 0) -> int | None:
    found = partitions.group(group)
    committed = None if found is None else found.offsets.get((topic, index))
    return None if committed is None else committed.value.offset


def test_pending_offsets_are_not_committed_until_the_commit_marker():
    part = OffsetsPartition(0)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(10), 5)
    assert offset(part, "g") is None
    assert part.txn_offsets.unstable("g", ("in", 0)) and not part.txn_offsets.unstable("g", ("in", 1))
    ended = part.on_marker(A, commit=True)
    assert [p.value for p in ended] == [OffsetValue(10)]
    assert offset(part, "g") == 10
    assert not part.txn_offsets.unstable("g", ("in", 0))


def test_an_abort_marker_drops_them_and_keeps_the_committed_offset():
    part = OffsetsPartition(0)
    part.apply(OffsetKey("g", "in", 0), OffsetValue(3), 1)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(10), 5)
    part.on_marker(A, commit=False)
    assert offset(part, "g") == 3
    assert part.txn_offsets.producers() == []


def test_markers_end_only_their_producers_offsets():
    part = OffsetsPartition(0)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(10), 5)
    part.apply_transactional(B, OffsetKey("h", "in", 0), OffsetValue(20), 6)
    part.on_marker(B, commit=True)
    assert offset(part, "g") is None and offset(part, "h") == 20
    assert part.txn_offsets.unstable("g", ("in", 0))
    part.on_marker(A, commit=True)
    assert offset(part, "g") == 10


def test_a_plain_commit_written_after_the_transactional_record_wins():
    part = OffsetsPartition(0)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(10), 5)
    part.apply(OffsetKey("g", "in", 0), OffsetValue(12), 7)
    part.on_marker(A, commit=True)
    assert offset(part, "g") == 12


def test_the_last_transactional_record_of_a_key_wins():
    part = OffsetsPartition(0)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(10), 5)
    part.apply_transactional(A, OffsetKey("g", "in", 0), OffsetValue(11), 6)
    part.on_marker(A, commit=True)
    assert offset(part, "g") == 11


def test_a_marker_of_a_producer_with_nothing_pending_changes_nothing():
    part = OffsetsPartition(0)
    part.apply(OffsetKey("g", "in", 0), OffsetValue(3), 1)
    assert part.on_marker(A, commit=True) == []
    assert offset(part, "g") == 3


def test_group_metadata_in_a_transactional_batch_applies_as_read():
    part = OffsetsPartition(0)
    part.apply_transactional(A, GroupKey("g"), GroupValue("consumer", 1, "range", None), 4)
    group = part.group("g")
    assert group is not None and group.metadata is not None
