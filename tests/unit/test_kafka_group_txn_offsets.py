"""Transactional offsets in ``__consumer_offsets`` (§19.5.4): pending per (group, producer id) until
the producer's marker, committed by COMMIT with the log order kept, dropped by ABORT."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.kafka_batches import lead_verified, v2_log
from trikafka.broker.config import BrokerConfig
from trikafka.broker.kafka.groups.coordinator import GroupCoordinator
from trikafka.broker.kafka.groups.state import OffsetsPartition
from trikafka.broker.kafka.internal_topic import read_records, transaction_standing
from trikafka.broker.engine.partition import ReadView
from trikafka.kafka.batch import TRANSACTIONAL
from trikafka.kafka.group_records import (OFFSETS_TOPIC, GroupKey, GroupValue, OffsetKey, OffsetValue, decode_record,
                                          encode_key, encode_value)
from trikafka.kafka.markers import build_marker
from trikafka.kafka.records import Record, build_batch
from trikafka.log import OffsetAssignment

A, B, C = 100, 200, 300  # producer ids


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


# ------------------------------------------------------------------ loading (§17.3, §19.5.4)

async def _worker_thread(fn, *args):
    """The one thing ``read_records`` needs of its broker: a way to run the read off the loop."""
    return await trio.to_thread.run_sync(fn, *args)


def _txn_offsets(pid: int, value: int, *, group: str = "g", partition: int = 0) -> bytearray:
    record = Record(0, 1, encode_key(OffsetKey(group, "in", partition)), encode_value(OffsetValue(value)))
    return bytearray(build_batch([record], producer_id=pid, producer_epoch=0, base_sequence=0,
                                 control_attributes=TRANSACTIONAL))


async def test_a_load_keeps_an_open_transactions_offsets_pending_until_its_marker():
    log, *_ = v2_log()
    plain = Record(0, 1, encode_key(OffsetKey("g", "in", 3)), encode_value(OffsetValue(1)))
    log.append(bytearray(build_batch([plain])), assign=OffsetAssignment(1))
    for pid, value, partition in ((A, 10, 0), (B, 20, 1), (C, 30, 2)):
        lead_verified(log, _txn_offsets(pid, value, partition=partition))
    for pid, commit in ((A, True), (B, False)):  # C's transaction stays open
        log.append(bytearray(build_marker(pid, 0, commit, coordinator_epoch=0, timestamp_ms=1)),
                   assign=OffsetAssignment(1, markers=True))

    part = OffsetsPartition(0)
    for key, value, log_offset, open_producer in await read_records(
            _worker_thread, ReadView(log, log.end_offset, 0), decode_record):
        part.apply_read(key, value, log_offset, open_producer)

    assert [offset(part, "g", index=i) for i in range(4)] == [10, None, None, 1]  # A committed, B aborted
    assert part.txn_offsets.producers() == [C] and part.txn_offsets.unstable("g", ("in", 2))
    part.on_marker(C, commit=True)
    assert offset(part, "g", index=2) == 30


# ------------------------------------------------------------------ a write and a marker acknowledged together

class _AcknowledgedLater:
    """``__consumer_offsets`` partition 0 as the group coordinator reaches it (``InternalTopic``'s
    ``read_view``, ``read``, ``transaction_standing`` and ``write``), led here: a write is appended to
    ``log`` at once and acknowledged only once ``acknowledge`` is set, as a leader waits for its ISR."""

    name = OFFSETS_TOPIC

    def __init__(self, log):
        self.log = log
        self.appended = trio.Event()
        self.acknowledge = trio.Event()

    def read_view(self, index):
        return ReadView(self.log, self.log.end_offset, 0)

    async def read(self, view, decode):
        return await read_records(_worker_thread, view, decode)

    def transaction_standing(self, index, producer_id, offset):
        return transaction_standing(self.log.producers, producer_id, offset)

    async def write(self, index, records, producer=None, guard=None):
        producer_id, epoch = producer
        batch = build_batch([Record(i, 1, key, value) for i, (key, value) in enumerate(records)],
                            producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                            control_attributes=TRANSACTIONAL)
        first = lead_verified(self.log, bytearray(batch)).logical_offset
        self.appended.set()
        await self.acknowledge.wait()
        return first


@pytest.mark.parametrize("commit", [False, True])
async def test_a_marker_acknowledged_before_its_txn_offset_commit_write_leaves_nothing_pending(commit):
    # The producer's TxnOffsetCommit is appended, then waits for its acknowledgement (a follower in the
    # ISR is dead); the producer dies, its restart fences it, and the coordinator's ABORT marker lands
    # after it; one high watermark move acknowledges both, and the marker's listener runs first.
    log, *_ = v2_log()
    topic = _AcknowledgedLater(log)
    coordinator = GroupCoordinator(topic, BrokerConfig(), lambda: 1, zookeeper_groups=None)
    groups = await coordinator.loads.serve(0)
    assert isinstance(groups, OffsetsPartition)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coordinator.write_transactional, groups, A, 0,
                           [(OffsetKey("g", "in", 0), OffsetValue(10))], None)
        await topic.appended.wait()
        marker = log.append(bytearray(build_marker(A, 0, commit, coordinator_epoch=0, timestamp_ms=1)),
                            assign=OffsetAssignment(1, markers=True))
        coordinator.on_marker(OFFSETS_TOPIC, 0, A, commit, marker.logical_offset)
        topic.acknowledge.set()
    assert groups.txn_offsets.producers() == []  # was [A]: pending with no marker to come, for ever
    assert not groups.txn_offsets.unstable("g", ("in", 0))
    assert offset(groups, "g") == (10 if commit else None)


async def test_a_txn_offset_commit_acknowledged_before_its_marker_stays_pending_until_it():
    log, *_ = v2_log()
    topic = _AcknowledgedLater(log)
    topic.acknowledge.set()
    coordinator = GroupCoordinator(topic, BrokerConfig(), lambda: 1, zookeeper_groups=None)
    groups = await coordinator.loads.serve(0)
    assert isinstance(groups, OffsetsPartition)
    await coordinator.write_transactional(groups, A, 0, [(OffsetKey("g", "in", 0), OffsetValue(10))], None)
    assert groups.txn_offsets.unstable("g", ("in", 0)) and offset(groups, "g") is None
    marker = log.append(bytearray(build_marker(A, 0, True, coordinator_epoch=0, timestamp_ms=1)),
                        assign=OffsetAssignment(1, markers=True))
    coordinator.on_marker(OFFSETS_TOPIC, 0, A, True, marker.logical_offset)
    assert groups.txn_offsets.producers() == [] and offset(groups, "g") == 10


# ------------------------------------------------------------------ a marker appended while a load reads

class _LogWithMarkerMidRead:
    """The log a load reads (``ReadView.log``) whose producer state, when the worker thread asks
    whether a batch's transaction was aborted, has ``append_marker`` run right after that answer:
    the event loop appending the marker between the thread's two looks at the live state."""

    def __init__(self, log, append_marker):
        self._log = log
        self._append_marker = append_marker

    def __getattr__(self, name):
        return getattr(self._log, name)

    @property
    def producers(self):
        return _ProducersWithMarkerMidRead(self._log.producers, self._append_marker)


class _ProducersWithMarkerMidRead:
    def __init__(self, producers, append_marker):
        self._producers = producers
        self._append_marker = append_marker

    def __getattr__(self, name):
        return getattr(self._producers, name)

    def aborted_between(self, start_offset, end_offset):
        found = self._producers.aborted_between(start_offset, end_offset)
        self._append_marker()
        return found


@pytest.mark.parametrize("commit", [False, True])
async def test_a_marker_appended_while_a_load_reads_counts_as_the_log_says(commit):
    # The load's worker thread reads the producer's batch while the loop appends its marker; the
    # listener hears of the marker while the partition still loads.
    log, *_ = v2_log()
    lead_verified(log, _txn_offsets(A, 10))
    marker_offsets: list[int] = []

    def append_marker():
        if not marker_offsets:
            appended = log.append(bytearray(build_marker(A, 0, commit, coordinator_epoch=0, timestamp_ms=1)),
                                  assign=OffsetAssignment(1, markers=True))
            marker_offsets.append(appended.logical_offset)

    class Topic(_AcknowledgedLater):
        def read_view(self, index):
            return ReadView(_LogWithMarkerMidRead(self.log, append_marker), self.log.end_offset, 0)

        async def read(self, view, decode):
            async def run_blocking(fn, *args):
                loaded = fn(*args)  # the worker thread's read, run here so the interleaving is the test's
                append_marker()  # the marker lands during the load whatever the read looked at
                coordinator.on_marker(OFFSETS_TOPIC, 0, A, commit, marker_offsets[0])
                return loaded

            return await read_records(run_blocking, view, decode)

    coordinator = GroupCoordinator(Topic(log), BrokerConfig(), lambda: 1, zookeeper_groups=None)
    groups = await coordinator.loads.serve(0)
    assert isinstance(groups, OffsetsPartition)
    assert groups.txn_offsets.producers() == []
    assert offset(groups, "g") == (10 if commit else None)  # aborted: was 10, read as committed
