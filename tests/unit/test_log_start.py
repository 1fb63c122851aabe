"""A Kafka-format log's start offset as DeleteRecords moves it (docs/protocol.md §16.6): in memory,
stored across a reopen and a crash, and followed by retention."""

import random

from tests.helpers.kafka_batches import ROOT, batches, manager, v2_log
from trikafka.log import LogConfig, OffsetAssignment
from trikafka.log.log_start import LOG_START_FILE, LogStart


def lead(log, counts):
    for n in counts:
        log.append(bytearray(batches([n])), assign=OffsetAssignment(0))


def test_the_start_is_the_larger_of_the_first_batch_and_the_deleted_offset_never_past_the_end():
    log, _, _, _ = v2_log()
    lead(log, [3, 2])
    offsets = log.kafka_offsets
    assert offsets.start_offset == 0
    assert offsets.log_start.raise_to(4)
    assert offsets.start_offset == 4
    assert not offsets.log_start.raise_to(2)  # it never moves back
    assert offsets.start_offset == 4
    offsets.log_start.raise_to(9)  # a follower may learn its leader's start before the batches
    assert offsets.start_offset == offsets.next_offset == 5


def test_a_stored_start_survives_a_reopen_and_a_crash_and_an_unstored_one_does_not():
    log, m, fs, clock = v2_log()
    lead(log, [3, 2])
    log.flush()
    log.kafka_offsets.log_start.raise_to(4)
    log.kafka_offsets.log_start.store()
    assert fs.read_file(f"{ROOT}/t-0/{LOG_START_FILE}") == b"4\n"
    log.kafka_offsets.log_start.raise_to(5)  # in memory only
    fs.crash("prefix", random.Random(3))
    m2, _, _ = manager(fs, clock, config=LogConfig(record_format="v2"))
    assert m2.get("t", 0).kafka_offsets.start_offset == 4


def test_stores_write_the_largest_offset_and_skip_an_unchanged_one():
    log, _, fs, _ = v2_log()
    start = LogStart(fs, log.dir_path)
    start.store()
    assert not fs.exists(f"{log.dir_path}/{LOG_START_FILE}")  # 0 needs no file
    start.raise_to(7)
    start.store()
    assert LogStart.load(fs, log.dir_path).offset == 7


def test_retention_deletes_the_segments_wholly_below_the_start_and_keeps_the_newest_batch():
    log, _, _, _ = v2_log()
    for n in (2, 3, 4):
        lead(log, [n])
        log.roll()
    offsets = log.kafka_offsets
    offsets.log_start.raise_to(4)  # inside the second segment's batch [2, 5)
    assert log.apply_retention() == 1
    assert [s.batches.start_offset for s in log.segments.segments][:2] == [2, 5]
    assert offsets.start_offset == 4
    offsets.log_start.raise_to(9)  # every batch: the newest segment that holds one stays
    assert log.apply_retention() == 1
    assert offsets.start_offset == 9 == offsets.next_offset


def test_a_07_log_has_no_start_offset_to_delete_below():
    m, _, _ = manager(config=LogConfig())
    log = m.get_or_create("t", 0)
    assert log.record_format == "0.7"
    assert log.apply_retention() == 0


async def test_a_follower_stores_its_leaders_start_under_the_pass_lease_and_not_once_its_log_is_retired():
    # The store writes into the partition directory off the loop; the follower's task is cancelled,
    # not awaited, when its topic is deleted, so the deletion must wait for the lease (§16.4).
    from types import SimpleNamespace

    from trikafka.broker.replication.hosted import FollowerLog

    log, _, fs, _ = v2_log()
    lead(log, [3, 2])
    held_during_stores = []

    async def run_blocking(fn):
        held_during_stores.append(log.passes.held)
        return fn()

    follower_log = FollowerLog(SimpleNamespace(log=log, _run_blocking=run_blocking), None)
    await follower_log.follow_log_start(2)
    assert held_during_stores == [1] and log.passes.held == 0
    log.passes.retire()  # DeleteTopics
    await follower_log.follow_log_start(4)
    assert held_during_stores == [1] and LogStart.load(fs, log.dir_path).offset == 2
