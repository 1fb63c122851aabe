"""Producer state of a Kafka-format log (docs/protocol.md §19.2, §19.3): the leader's checks as a
table, duplicates answered with their first offset and stored once, and the state derived again
from the log after a reopen and a truncation."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tests.helpers.kafka_batches import lead_verified, stored, v2_log
from trikafka.kafka.batch import TRANSACTIONAL, BatchError, next_sequence, read_header, validate_batches
from trikafka.kafka.markers import build_marker
from trikafka.kafka.records import build_batch
from trikafka.log import Log, OffsetAssignment
from trikafka.log.producer_state import ProducerStates

PID = 42


def idempotent(seq: int, count: int = 1, *, epoch: int = 0, pid: int = PID, attributes: int = 0,
               timestamp_ms: int = 1) -> bytearray:
    return bytearray(build_batch([f"{pid}-{epoch}-{seq + k}".encode() for k in range(count)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, timestamp_ms=timestamp_ms,
                                 control_attributes=attributes))


def lead(log: Log, data: bytearray):
    return log.append(data, assign=OffsetAssignment(1))


def kind_of(log: Log, data: bytearray) -> str:
    with pytest.raises(BatchError) as caught:
        lead(log, data)
    return caught.value.kind


def test_the_leaders_table():
    log, *_ = v2_log()
    assert lead(log, idempotent(0, 2)).logical_offset == 0  # a producer new to the log
    assert lead(log, idempotent(2, 3)).logical_offset == 2  # the next sequence
    before = stored(log)
    assert lead(log, idempotent(0, 2)).logical_offset == 0  # a duplicate: its first offset, nothing written
    assert lead(log, idempotent(2, 3)).logical_offset == 2
    assert stored(log) == before
    assert kind_of(log, idempotent(6)) == BatchError.OUT_OF_ORDER_SEQUENCE  # a gap
    assert kind_of(log, idempotent(1)) == BatchError.OUT_OF_ORDER_SEQUENCE  # overlaps, not a cached batch
    assert kind_of(log, idempotent(3, epoch=1)) == BatchError.OUT_OF_ORDER_SEQUENCE  # a new epoch at seq 3
    assert lead(log, idempotent(0, epoch=1)).logical_offset == 5  # a new epoch starts over at 0
    assert kind_of(log, idempotent(5, epoch=0)) == BatchError.INVALID_PRODUCER_EPOCH  # fenced
    assert kind_of(log, idempotent(0, epoch=-1)) == BatchError.INVALID
    assert kind_of(log, idempotent(-1, pid=8)) == BatchError.INVALID  # a producer id needs a sequence
    assert lead(log, idempotent(0, pid=7)).logical_offset == 6  # another producer has its own sequence
    assert lead(log, idempotent(9, epoch=2, pid=8)).logical_offset == 7  # new here: any epoch and sequence
    assert stored(log)[len(before):].count(b"42-0-") == 0 and log.kafka_offsets.next_offset == 8


def test_only_the_last_five_batches_are_remembered():
    # Five, as Kafka: a producer has at most five requests in flight (max.in.flight.requests.per.
    # connection), so a retry is of one of its last five batches and is answered as a duplicate.
    log, *_ = v2_log()
    for seq in range(6):
        lead(log, idempotent(seq))
    assert [b.first_seq for b in log.producers.entry(PID).batches] == [1, 2, 3, 4, 5]
    assert lead(log, idempotent(1)).logical_offset == 1  # the oldest still cached
    assert lead(log, idempotent(5)).logical_offset == 5
    assert kind_of(log, idempotent(0)) == BatchError.OUT_OF_ORDER_SEQUENCE  # too old to tell


def test_sequences_wrap_after_the_largest_int32():
    log, *_ = v2_log()
    top = 2**31 - 1
    lead(log, idempotent(top - 1, 2))
    assert (next_sequence(top - 1), next_sequence(top), next_sequence(top, 3)) == (top, 0, 2)
    assert next_sequence(2**30 - 1) == 2**30  # no wrap before the largest int32
    assert lead(log, idempotent(0)).logical_offset == 2


def test_a_request_with_duplicates_and_new_batches_appends_nothing():
    log, *_ = v2_log()
    lead(log, idempotent(0))
    before = stored(log)
    assert kind_of(log, idempotent(0) + idempotent(1)) == BatchError.OUT_OF_ORDER_SEQUENCE
    assert stored(log) == before
    assert lead(log, idempotent(1) + idempotent(2)).logical_offset == 1  # in order within one part


def test_a_retried_request_is_answered_with_its_first_batchs_offset():
    # A request of several batches retried whole (§19.3): every batch is a duplicate, nothing is
    # written, and the answer is the base offset of the first; a marker or a batch without a producer
    # is no duplicate, so beside one the part is out of order.
    log, *_ = v2_log()
    lead(log, idempotent(0, pid=7))
    request = idempotent(0, 2) + idempotent(2, 3)
    assert lead(log, request).logical_offset == 1
    before = stored(log)
    assert lead(log, request).logical_offset == 1
    assert stored(log) == before
    duplicate, fresh = idempotent(0, pid=7), idempotent(1, pid=7)
    assert log.producers.check(validate_batches(duplicate, max_batch_bytes=1 << 20)) == 0  # alone: a duplicate
    plain = bytearray(build_batch([b"x"], timestamp_ms=1))
    for part in (marker(True) + duplicate, marker(True) + duplicate + fresh, plain + duplicate,
                 plain + duplicate + fresh):
        with pytest.raises(BatchError) as caught:
            log.producers.check(validate_batches(part, max_batch_bytes=1 << 20, allow_markers=True))
        assert caught.value.kind == BatchError.OUT_OF_ORDER_SEQUENCE


def test_the_state_is_rebuilt_from_the_log_when_it_opens():
    log, manager, fs, clock = v2_log(segment_bytes=300)
    for seq in range(8):
        lead(log, idempotent(seq))
    assert len(log.segments.segments) > 1
    manager.close()
    reopened = Log.open(fs, log.dir_path, "t", 0, log.config, clock, True)
    assert lead(reopened, idempotent(7)).logical_offset == 7  # a retry after the restart: the duplicate
    assert lead(reopened, idempotent(8)).logical_offset == 8


def test_a_follower_keeps_the_state_it_copies_and_truncation_forgets_cut_batches():
    leader, *_ = v2_log()
    for seq in range(4):
        lead(leader, idempotent(seq))
    follower, *_ = v2_log()
    follower.append(stored(leader))
    assert lead(follower, idempotent(3)).logical_offset == 3  # the new leader catches the retry
    cut_at = follower.kafka_offsets.position_of(2)
    follower.truncate_to(cut_at)
    assert lead(follower, idempotent(2)).logical_offset == 2  # the cut batch is no duplicate now


def test_a_retry_of_the_last_batch_of_an_epoch_is_a_duplicate_after_the_next_epochs_batch_is_cut():
    # Sim seed 10 (kafka world): the producer's batch of epoch 0 was written, its next epoch's first
    # batch was written after it and cut by a leader change, and the retry of the epoch-0 batch came:
    # the state must be the one before the cut batch (epoch 0, its last five batches), not none.
    log, *_ = v2_log()
    for seq in range(3):
        lead(log, idempotent(seq))
    lead(log, idempotent(0, epoch=1))
    log.truncate_to(log.kafka_offsets.position_of(3))
    before = stored(log)
    assert lead(log, idempotent(2)).logical_offset == 2  # the duplicate, answered with its offset
    assert stored(log) == before
    assert kind_of(log, idempotent(4)) == BatchError.OUT_OF_ORDER_SEQUENCE


def test_a_cut_of_more_than_five_batches_of_a_producer_keeps_the_batches_before_it():
    # The segment's cache holds a producer's last five batches; a cut below all of them must find
    # the ones before it in the segment, so a retry of one of those is still the duplicate.
    log, *_ = v2_log()
    for seq in range(8):
        lead(log, idempotent(seq))
    log.truncate_to(log.kafka_offsets.position_of(2))
    assert [b.first_seq for b in log.producers.entry(PID).batches] == [0, 1]
    assert lead(log, idempotent(1)).logical_offset == 1
    assert kind_of(log, idempotent(3)) == BatchError.OUT_OF_ORDER_SEQUENCE
    assert lead(log, idempotent(2)).logical_offset == 2


def test_a_cut_reads_the_segment_again_only_where_the_cache_forgot_batches_and_in_the_tickets_run():
    # begin() is on the loop and reads nothing; run() (a worker thread) reads the headers up to the
    # cut; complete() installs their state.  A cut of batches whose producer forgot none reads nothing.
    log, *_ = v2_log()
    for seq in range(3):
        lead(log, idempotent(seq))
    lead(log, idempotent(0, pid=7))
    ticket = log.truncation.begin(log.kafka_offsets.position_of(3))
    assert not ticket.read_producers
    ticket.run()
    log.truncation.complete(ticket)
    assert log.producers.entry(7) is None
    lead(log, idempotent(0, epoch=1))  # at 3: the segment's cache drops PID's epoch-0 batches
    ticket = log.truncation.begin(log.kafka_offsets.position_of(3))
    assert ticket.read_producers and ticket.producers is None
    ticket.run()
    assert ticket.producers is not None
    log.truncation.complete(ticket)
    assert [(b.epoch, b.first_seq) for b in log.producers.entry(PID).batches] == [(0, 0), (0, 1), (0, 2)]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=30))
def test_a_fold_of_the_segments_is_the_state_the_appends_left(steps):
    log, *_ = v2_log(segment_bytes=250)
    next_seq = {pid: 0 for pid in range(4)}
    for pid, count in steps:
        lead(log, idempotent(next_seq[pid], count, pid=pid))
        next_seq[pid] += count
    folded = ProducerStates.fold(s.batches.producers for s in log.segments.segments)
    assert {p: (e.epoch, e.batches) for p, e in folded.entries.items()} == \
        {p: (e.epoch, e.batches) for p, e in log.producers.entries.items()}
    for pid, entry in log.producers.entries.items():
        assert entry.batches[-1].last_seq == next_seq[pid] - 1


def test_the_next_base_sequence_continues_the_producers_last_batch():
    # What the broker numbers its own batches of a producer with (TxnOffsetCommit, §19.5.4): 0 for a
    # producer new here, at another epoch, or whose sequence is no longer known; else the sequence
    # after its last batch's last one, wrapping after the largest int32.
    log, *_ = v2_log()
    assert log.producers.next_base_sequence(PID, 0) == 0
    lead(log, idempotent(0, 3))
    assert log.producers.next_base_sequence(PID, 0) == 3
    assert log.producers.next_base_sequence(PID, 1) == 0
    lead(log, idempotent(2**31 - 2, 2, pid=7))
    assert log.producers.next_base_sequence(7, 0) == 0
    lead(log, idempotent(0, pid=7))
    assert log.producers.next_base_sequence(7, 0) == 1
    lead_marker(log, marker(False, epoch=1))  # the coordinator's bump: the next epoch starts over
    assert log.producers.entry(PID).batches == [] and log.producers.next_base_sequence(PID, 1) == 0


def test_batches_without_a_producer_take_no_part():
    log, *_ = v2_log()
    plain = bytearray(build_batch([b"x"], timestamp_ms=1))
    lead(log, plain)
    lead(log, bytearray(build_batch([b"x"], timestamp_ms=1)))
    assert len(log.producers) == 0 and read_header(stored(log)).producer_id == -1


# -- transactions (§19.6) ---------------------------------------------------------------------------


def txn_batch(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, timestamp_ms: int = 1) -> bytearray:
    return idempotent(seq, count, epoch=epoch, pid=pid, attributes=TRANSACTIONAL, timestamp_ms=timestamp_ms)


def marker(commit: bool, *, pid: int = PID, epoch: int = 0, timestamp_ms: int = 1,
           coordinator_epoch: int = 3) -> bytearray:
    return bytearray(build_marker(pid, epoch, commit, coordinator_epoch=coordinator_epoch, timestamp_ms=timestamp_ms))


def lead_txn(log: Log, data: bytearray):
    return lead_verified(log, data)


def lead_marker(log: Log, data: bytearray):
    return log.append(data, assign=OffsetAssignment(1, markers=True))


def txn_view(log: Log) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    return dict(log.producers.open_transactions), [tuple(a) for a in log.producers.aborted]


def test_open_transactions_hold_the_lso_back_and_markers_close_them():
    log, *_ = v2_log()
    lead(log, idempotent(0, pid=99))  # offset 0: no transaction
    lead_txn(log, txn_batch(0, 2))  # 1-2: PID's transaction opens at 1
    lead_txn(log, txn_batch(0, pid=7))  # 3: producer 7's opens at 3
    lead_txn(log, txn_batch(2))  # 4: PID's goes on
    assert txn_view(log) == ({PID: 1, 7: 3}, [])
    assert log.producers.last_stable_offset(high_watermark=5) == 1
    assert lead_marker(log, marker(False)).logical_offset == 5  # PID aborts: 1..5
    assert txn_view(log) == ({7: 3}, [(PID, 1, 5)])
    assert log.producers.last_stable_offset(high_watermark=6) == 3
    lead_marker(log, marker(True, pid=7))  # 6: producer 7 commits
    assert txn_view(log) == ({}, [(PID, 1, 5)])
    assert log.producers.last_stable_offset(high_watermark=7) == 7
    assert log.producers.aborted_between(0, 1) == [] and log.producers.aborted_between(5, 9) != []
    assert log.producers.aborted_between(6, 9) == []
    lead_marker(log, marker(True))  # a retried marker with nothing open changes nothing
    assert txn_view(log) == ({}, [(PID, 1, 5)])


def test_a_marker_of_an_older_epoch_is_refused_and_a_newer_one_fences_the_sequence():
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0, epoch=2))
    assert kind_of_marker(log, marker(False, epoch=1)) == BatchError.INVALID_PRODUCER_EPOCH
    lead_marker(log, marker(False, epoch=3))  # the coordinator bumped the epoch to abort it
    assert log.producers.entry(PID).epoch == 3
    assert kind_of(log, idempotent(1, epoch=2)) == BatchError.INVALID_PRODUCER_EPOCH


def test_a_marker_of_an_older_coordinator_epoch_is_fenced():
    """§19.5.5: a deposed coordinator still retrying the markers of a transaction the new one already
    completed must not end the producer's next transaction (same producer epoch) early (kafka world
    seed 74: its stale COMMIT made the first record of a later aborted transaction committed)."""
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0, epoch=2))
    lead_marker(log, marker(True, epoch=2, coordinator_epoch=4))  # the new coordinator completes it
    lead_txn(log, txn_batch(1, epoch=2))  # the producer's next transaction opens
    assert kind_of_marker(log, marker(True, epoch=2, coordinator_epoch=3)) == BatchError.COORDINATOR_FENCED
    assert txn_view(log)[0] == {PID: 2}  # still open
    lead_marker(log, marker(False, epoch=2, coordinator_epoch=4))  # the same coordinator's decision ends it
    assert txn_view(log) == ({}, [(PID, 2, 3)])


def reopened(log: Log, manager, fs, clock) -> Log:
    manager.close()
    return Log.open(fs, log.dir_path, "t", 0, log.config, clock, True)


def test_a_reopened_log_fences_a_stale_marker_of_a_producer_it_holds_only_markers_of():
    # A partition of a transaction the producer wrote nothing to gets only its marker; the
    # marker's coordinator epoch is the partition's fence after a restart too (§19.5.5).
    log, manager, fs, clock = v2_log()
    lead_marker(log, marker(False, epoch=2, coordinator_epoch=4))
    log = reopened(log, manager, fs, clock)
    assert log.producers.entry(PID) is not None and log.producers.entry(PID).coordinator_epoch == 4
    assert kind_of_marker(log, marker(True, epoch=2, coordinator_epoch=3)) == BatchError.COORDINATOR_FENCED


def test_a_segment_of_only_markers_keeps_their_epochs_at_an_open():
    # The coordinator's abort bumped the epoch; its marker is alone in the last segment.  After a
    # restart the old epoch is fenced and an older coordinator's marker refused, as before it.
    log, manager, fs, clock = v2_log(segment_bytes=70)  # a batch a segment
    lead_txn(log, txn_batch(0, epoch=2))
    lead_marker(log, marker(False, epoch=3, coordinator_epoch=4))
    assert len(log.segments.segments) == 2 and log.segments.segments[-1].batches.producers.entries[PID].batches == []
    log = reopened(log, manager, fs, clock)
    assert (log.producers.entry(PID).epoch, log.producers.entry(PID).coordinator_epoch) == (3, 4)
    assert kind_of(log, idempotent(1, epoch=2)) == BatchError.INVALID_PRODUCER_EPOCH
    assert kind_of_marker(log, marker(False, epoch=3, coordinator_epoch=3)) == BatchError.COORDINATOR_FENCED


def test_a_truncation_keeps_the_epochs_of_the_markers_before_the_cut():
    log, *_ = v2_log()
    lead_marker(log, marker(False, epoch=2, coordinator_epoch=4))  # 0: PID's only batch
    lead_txn(log, txn_batch(0, epoch=2))  # 1
    lead_marker(log, marker(True, epoch=3, coordinator_epoch=5))  # 2: cut below
    log.truncate_to(log.kafka_offsets.position_of(1))
    assert (log.producers.entry(PID).epoch, log.producers.entry(PID).coordinator_epoch) == (2, 4)
    assert kind_of_marker(log, marker(True, epoch=2, coordinator_epoch=3)) == BatchError.COORDINATOR_FENCED


def _entries(states: ProducerStates) -> dict[int, tuple]:
    return {p: (e.epoch, e.batches, e.coordinator_epoch, e.last_timestamp_ms) for p, e in states.entries.items()}


# (producer, a marker?, the epoch's bump, the coordinator epoch's bump, timestamp)
_STEPS = st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 1), st.integers(0, 1),
                            st.integers(0, 100)), min_size=1, max_size=25)


def _lead_steps(log: Log, steps) -> None:
    """Idempotent batches and markers (as a coordinator writes them: epochs never go down)."""
    epochs, coordinator_epochs, next_seq = {}, {}, {}
    for pid, is_marker, bump, coordinator_bump, timestamp_ms in steps:
        if is_marker:
            epochs[pid] = epochs.get(pid, 0) + bump
            coordinator_epochs[pid] = coordinator_epochs.get(pid, 0) + coordinator_bump
            next_seq[pid] = next_seq.get(pid, 0) if not bump else 0
            lead_marker(log, marker(bool(bump), pid=pid, epoch=epochs[pid], timestamp_ms=timestamp_ms,
                                    coordinator_epoch=coordinator_epochs[pid]))
        else:
            lead(log, idempotent(next_seq.get(pid, 0), pid=pid, epoch=epochs.get(pid, 0), timestamp_ms=timestamp_ms))
            next_seq[pid] = next_seq.get(pid, 0) + 1


@given(_STEPS)
def test_a_fold_of_segments_with_markers_is_the_state_the_appends_left(steps):
    log, *_ = v2_log(segment_bytes=150)
    _lead_steps(log, steps)
    assert _entries(ProducerStates.fold(s.batches.producers for s in log.segments.segments)) == _entries(log.producers)


@given(_STEPS, st.integers(0, 25))
def test_a_truncation_keeps_the_coordinator_epochs_of_the_markers_before_the_cut(steps, cut):
    # Against a log that never held what the cut removed: the same producer state, batches, epochs
    # and coordinator epochs (§19.2), also where a marker's bump or a sixth batch had dropped a
    # producer's earlier batches from the segment's cache.
    log, *_ = v2_log(segment_bytes=150)
    _lead_steps(log, steps)
    cut = min(cut, len(steps))
    if cut < len(steps):
        log.truncate_to(log.kafka_offsets.position_of(cut))
    prefix, *_ = v2_log(segment_bytes=150)
    _lead_steps(prefix, steps[:cut])
    assert _entries(log.producers) == _entries(prefix.producers)


def kind_of_marker(log: Log, data: bytearray) -> str:
    with pytest.raises(BatchError) as caught:
        lead_marker(log, data)
    return caught.value.kind


def test_producers_may_send_neither_markers_nor_unverified_transactions():
    log, *_ = v2_log()
    assert kind_of(log, marker(True)) == BatchError.INVALID
    assert kind_of(log, txn_batch(0)) == BatchError.TRANSACTIONAL


def test_transactions_are_derived_again_at_open_on_a_follower_and_after_truncation():
    leader, manager, fs, clock = v2_log(segment_bytes=150)
    for seq in range(0, 6, 2):
        lead_txn(leader, txn_batch(seq, 2))
    lead_marker(leader, marker(False))
    lead_txn(leader, txn_batch(0, pid=7))
    lead_txn(leader, txn_batch(6, epoch=0))
    assert len(leader.segments.segments) > 2
    expected = txn_view(leader)
    assert expected == ({7: 7, PID: 8}, [(PID, 0, 6)])
    manager.close()
    assert txn_view(Log.open(fs, leader.dir_path, "t", 0, leader.config, clock, True)) == expected
    follower, *_ = v2_log(segment_bytes=150)
    follower.append(stored(Log.open(fs, leader.dir_path, "t", 0, leader.config, clock, True)))
    assert txn_view(follower) == expected
    follower.truncate_to(follower.kafka_offsets.position_of(6))  # the ABORT marker and what follows go
    assert txn_view(follower) == ({PID: 0}, [])


def test_a_transaction_opened_after_a_truncation_is_in_the_segments_fold():
    # The truncated segment knows which of its producers' transactions are still open: one that a
    # kept marker closed is not, so the producer's next transaction is recorded as it begins and a
    # fold of the segments (a reopen, a later truncation) finds it open.
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0))  # 0
    lead_marker(log, marker(True))  # 1
    lead(log, idempotent(0, pid=7))  # 2: cut below
    log.truncate_to(log.kafka_offsets.position_of(2))
    lead_txn(log, txn_batch(1))  # 2: PID's next transaction
    assert txn_view(log) == ({PID: 2}, [])
    assert ProducerStates.fold(s.batches.producers for s in log.segments.segments).open_transactions == {PID: 2}


def test_the_cleaner_keeps_markers_and_transactions_batches_and_lets_them_supersede_nothing():
    from trikafka.kafka.records import Record
    from trikafka.log.clean_scan import scan_batches
    from trikafka.log.throttle import Throttler

    log, *_ = v2_log()
    keyed = [Record(0, 1, b"k", b"v")]
    lead_txn(log, bytearray(build_batch(keyed, producer_id=PID, producer_epoch=0, base_sequence=0, timestamp_ms=1,
                                        control_attributes=TRANSACTIONAL)))
    lead_marker(log, marker(False))
    lead(log, bytearray(build_batch(keyed, timestamp_ms=1)))
    segment = log.segments.segments[-1]
    entries = list(scan_batches(segment.file, segment.size, Throttler(0)))
    assert [e.keys for e in entries][:2] == [None, None] and entries[2].keys


# -- expiration (§19.2.1) -----------------------------------------------------------------------------

DAY_MS = 86_400_000


def last_writes(log: Log) -> dict[int, int]:
    return {pid: entry.last_timestamp_ms for pid, entry in log.producers.entries.items()}


def test_a_producer_silent_for_the_expiration_leaves_the_state_and_others_stay():
    log, *_ = v2_log()
    lead(log, idempotent(0, timestamp_ms=1_000))
    lead(log, idempotent(1, timestamp_ms=3_000))  # its last write counts
    lead(log, idempotent(0, pid=7, timestamp_ms=5_000))
    assert last_writes(log) == {PID: 3_000, 7: 5_000}
    assert log.producers.remove_expired(now_ms=3_000 + DAY_MS - 1, expiration_ms=DAY_MS) == []
    assert log.producers.remove_expired(now_ms=3_000 + DAY_MS, expiration_ms=DAY_MS) == [PID]
    assert set(log.producers.entries) == {7}
    assert log.producers.remove_expired(now_ms=10**12, expiration_ms=DAY_MS) == [7]
    assert len(log.producers) == 0


def test_an_expired_producers_next_batch_starts_its_state_again_and_a_retry_is_no_duplicate():
    log, *_ = v2_log()
    lead(log, idempotent(0, 2))
    log.producers.remove_expired(now_ms=1 + DAY_MS, expiration_ms=DAY_MS)
    assert lead(log, idempotent(0, 2)).logical_offset == 2  # written again: nothing tells it is a retry
    log.producers.remove_expired(now_ms=1 + DAY_MS, expiration_ms=DAY_MS)
    assert lead(log, idempotent(5)).logical_offset == 4  # any sequence starts a producer new here (§19.3)
    assert kind_of(log, idempotent(7)) == BatchError.OUT_OF_ORDER_SEQUENCE  # and is checked from there on


def test_a_producer_with_an_open_transaction_is_kept_and_its_marker_is_its_last_write():
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0, timestamp_ms=10))
    assert log.producers.remove_expired(now_ms=10**12, expiration_ms=DAY_MS) == []
    lead_marker(log, marker(True, timestamp_ms=2_000))
    assert last_writes(log) == {PID: 2_000}
    assert log.producers.remove_expired(now_ms=2_000 + DAY_MS - 1, expiration_ms=DAY_MS) == []
    assert log.producers.remove_expired(now_ms=2_000 + DAY_MS, expiration_ms=DAY_MS) == [PID]


def test_an_aborted_transaction_outlives_its_producers_state():
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0, timestamp_ms=10))
    lead_marker(log, marker(False, timestamp_ms=20))
    log.producers.remove_expired(now_ms=20 + DAY_MS, expiration_ms=DAY_MS)
    assert len(log.producers) == 0 and txn_view(log) == ({}, [(PID, 0, 1)])


def test_the_log_expires_by_its_clock_and_config():
    log, _, _, clock = v2_log(producer_id_expiration_ms=500)
    lead(log, idempotent(0, timestamp_ms=clock()))
    lead(log, idempotent(0, pid=7, timestamp_ms=clock() + 100))
    clock.advance(499)
    assert log.expire_producers() == []
    clock.advance(1)
    assert log.expire_producers() == [PID] and set(log.producers.entries) == {7}


def test_a_reopened_log_keeps_only_the_producers_not_expired_at_open():
    log, manager, fs, clock = v2_log(segment_bytes=300, producer_id_expiration_ms=DAY_MS)
    for seq in range(8):
        lead(log, idempotent(seq, timestamp_ms=clock() - DAY_MS))  # expired already, still in state until a pass
    lead(log, idempotent(0, pid=7, timestamp_ms=clock()))
    assert len(log.segments.segments) > 1 and set(log.producers.entries) == {PID, 7}
    manager.close()
    reopened = Log.open(fs, log.dir_path, "t", 0, log.config, clock, True)
    assert last_writes(reopened) == {7: clock()}
    assert lead(reopened, idempotent(7)).logical_offset == 9  # no longer a duplicate


def test_a_truncation_folds_again_without_the_expired_producers():
    log, _, _, clock = v2_log(producer_id_expiration_ms=DAY_MS)
    lead(log, idempotent(0, timestamp_ms=clock() - DAY_MS))
    lead(log, idempotent(0, pid=7, timestamp_ms=clock()))
    lead(log, idempotent(1, pid=7, timestamp_ms=clock() + 1))
    log.truncate_to(log.kafka_offsets.position_of(2))
    assert last_writes(log) == {7: clock()}  # PID expired; 7's last write is its last batch kept


def test_a_truncated_segment_gives_the_last_write_it_keeps():
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0, timestamp_ms=10))  # 0
    lead_marker(log, marker(True, timestamp_ms=30))  # 1
    lead(log, idempotent(1, 3, timestamp_ms=40))  # 2..4: one batch of three records
    lead_marker(log, marker(True, pid=7, timestamp_ms=50))  # 5: another producer's
    # a batch's last offset is its base plus lastOffsetDelta: the marker at 1 is before it
    assert [(b.base_offset, b.last_offset) for b in log.producers.entry(PID).batches] == [(0, 0), (2, 4)]
    log.truncate_to(log.kafka_offsets.position_of(5))
    assert last_writes(log) == {PID: 40}
    log.truncate_to(log.kafka_offsets.position_of(2))
    assert last_writes(log) == {PID: 30}  # the marker after its last kept batch
    log.truncate_to(log.kafka_offsets.position_of(1))
    assert last_writes(log) == {PID: 10}


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6)), min_size=1, max_size=30))
def test_a_fold_finds_the_last_write_times_the_appends_left(steps):
    log, *_ = v2_log(segment_bytes=250)
    next_seq = {pid: 0 for pid in range(4)}
    last = {}
    for pid, timestamp_ms in steps:
        lead(log, idempotent(next_seq[pid], pid=pid, timestamp_ms=timestamp_ms))
        next_seq[pid] += 1
        last[pid] = timestamp_ms
    folded = ProducerStates.fold(s.batches.producers for s in log.segments.segments)
    assert {p: e.last_timestamp_ms for p, e in folded.entries.items()} == last_writes(log) == last

# -- KIP-890's verification guard (§19.5.7) ---------------------------------------------------------


def lead_with(log: Log, data: bytearray, guard):
    return log.append(data, assign=OffsetAssignment(1, transactional=True, guard=guard))


def refused_with(log: Log, data: bytearray, guard) -> str:
    end = log.end_offset
    with pytest.raises(BatchError) as caught:
        lead_with(log, data, guard)
    assert log.end_offset == end  # nothing appended
    return caught.value.kind


def test_a_verification_records_one_guard_per_producer_until_its_transaction_opens():
    log, *_ = v2_log()
    guard = log.producers.start_verification(PID, 0)
    assert guard is not None and log.producers.start_verification(PID, 0) is guard  # one in flight: the same
    other = log.producers.start_verification(7, 0)
    assert other is not guard
    lead_with(log, txn_batch(0, 2), guard)  # the first append after the verification is accepted
    assert txn_view(log) == ({PID: 0}, [])
    assert log.producers.start_verification(PID, 0) is None  # open here: no question, no guard
    assert log.producers.start_verification(PID, 1) is not None  # another epoch's transaction is not open


def test_later_batches_of_an_open_transaction_need_no_guard():
    log, *_ = v2_log()
    lead_txn(log, txn_batch(0))
    lead_with(log, txn_batch(1), None)
    assert txn_view(log) == ({PID: 0}, []) and log.end_offset > 0


def test_an_unverified_batch_cannot_open_a_transaction():
    log, *_ = v2_log()
    assert refused_with(log, txn_batch(0), None) == BatchError.TXN_STATE
    assert refused_with(log, txn_batch(0), log.producers.start_verification(7, 0)) == BatchError.TXN_STATE


def test_a_marker_between_the_verification_and_the_append_clears_the_guard():
    """The race KIP-890 closes: the transaction ends (its ABORT marker lands here) while the
    producer's batch waits for the coordinator's answer; the batch must not open a transaction."""
    log, *_ = v2_log()
    guard = log.producers.start_verification(PID, 0)
    lead_marker(log, marker(False))  # the abort reaches the partition first; nothing was open here
    assert refused_with(log, txn_batch(0), guard) == BatchError.TXN_STATE
    assert txn_view(log) == ({}, []) and log.producers.last_stable_offset(high_watermark=1) == 1


def test_a_guard_is_spent_by_its_append_and_a_retry_after_the_commit_is_refused():
    log, *_ = v2_log()
    guard = log.producers.start_verification(PID, 0)
    lead_with(log, txn_batch(0), guard)
    lead_marker(log, marker(True))
    assert refused_with(log, txn_batch(1), guard) == BatchError.TXN_STATE
    assert len(log.producers.guards) == 0


def test_the_batches_of_one_append_are_one_transaction_and_a_duplicate_stays_a_duplicate():
    log, *_ = v2_log()
    guard = log.producers.start_verification(PID, 0)
    lead_with(log, txn_batch(0) + txn_batch(1), guard)  # the first opens it for the second
    assert txn_view(log) == ({PID: 0}, [])
    lead_marker(log, marker(False))
    assert lead_with(log, txn_batch(1), None).logical_offset == 1  # a retry of an appended batch (§19.3)
