"""Kafka-format logs (docs/protocol.md §16.6): the format file, appends, the batch indexes, recovery.

The 0.7 behaviour of the same operations is covered by ``test_log_log.py``
and the other ``test_log_*`` modules; here each operation is checked on a log
that stores v2 record batches with logical offsets.
"""

import random

import pytest

from tests.helpers.kafka_batches import DIR, ROOT, T0, V2, batches, make_batch, manager, stored, v2_log
from trikafka.kafka.batch import BatchError, BatchHeader, batch_crc, read_header, validate_batches, walk_headers
from trikafka.log import (
    FORMAT_FILE,
    Log,
    LogConfig,
    LogLoadError,
    ManualClock,
    OffsetAssignment,
    WrongFormatError,
)
from trikafka.log.batch_index import BatchIndex, build_batch_index
from trikafka.log.clean_format import CLEAN_FORMATS
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.testing import FakeFileSystem
from trikafka.wire.messageset import build_message_set



def lead(log, counts, epoch=3, append_time_ms=None):
    """Append ``counts`` as the leader would, one batch per count; the results."""
    return [log.append(bytearray(batches([n])), assign=OffsetAssignment(epoch, append_time_ms)) for n in counts]


def fresh_walk(log):
    """``(base offset, log byte position, running maximum of maxTimestamp in its segment)`` of every
    stored batch, read from the files: what the index must hold."""
    walked = []
    for s in log.segments.segments:
        running = None
        for h in walk_headers(s.file.pread(0, s.size)):
            running = h.max_timestamp_ms if running is None else max(running, h.max_timestamp_ms)
            walked.append((h.base_offset, s.start + h.position, running))
    return walked


def indexed(log):
    return [(o, s.start + p, t) for s in log.segments.segments
            for o, p, t in zip(s.batches.offsets, s.batches.positions, s.batches.max_timestamps_ms)]


# -- the format of a log ---------------------------------------------------------------------


def test_a_v2_topic_gets_the_format_file_durably_and_a_07_topic_none():
    m, fs, clock = manager(config=LogConfig(), topic_configs={"k": V2})
    kafka, old = m.get_or_create("k", 0), m.get_or_create("t", 0)
    assert (kafka.record_format, old.record_format) == ("v2", "0.7")
    assert fs.read_file(ROOT + "/k-0/" + FORMAT_FILE) == b"v2\n"
    assert not fs.exists(ROOT + "/t-0/" + FORMAT_FILE)
    fs.crash("prefix", random.Random(1))  # creation made it durable: a crash keeps the format
    m2, _, _ = manager(fs, clock, config=LogConfig())
    assert m2.get("k", 0).record_format == "v2" and m2.get("t", 0).record_format == "0.7"


def test_an_overridden_topic_config_sets_the_format_of_new_partitions_only():
    m, fs, _ = manager(config=LogConfig())
    m.get_or_create("t", 0)
    m.override_topic_config("t", V2)
    m.raise_partition_count("t", 2)
    assert m.get("t", 0).record_format == "0.7"  # an existing log keeps its directory's format
    assert m.get_or_create("t", 1).record_format == "v2"


def test_a_directory_without_the_file_loads_as_07_and_a_bad_file_is_refused():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    assert Log.open(fs, DIR, "t", 0, V2, clock, False).record_format == "0.7"  # the directory decides
    fs.write_file(DIR + "/" + FORMAT_FILE, b"v3\n")
    with pytest.raises(LogLoadError, match="not a record format"):
        Log.open(fs, DIR, "t", 0, V2, clock, False)


def test_log_config_refuses_an_unknown_record_format():
    with pytest.raises(ValueError, match="record_format"):
        LogConfig(record_format="v1")


def test_a_07_log_has_no_logical_offsets_and_refuses_an_assignment():
    m, _, _ = manager(config=LogConfig())
    log = m.get_or_create("t", 0)
    with pytest.raises(WrongFormatError):
        log.kafka_offsets
    with pytest.raises(WrongFormatError):
        log.append(bytearray(build_message_set([b"x"])), assign=OffsetAssignment(0))
    assert log.end_offset == 0
    assert log.append(build_message_set([b"x"])).logical_offset == -1


# -- appends ---------------------------------------------------------------------------------


def test_the_leader_numbers_batches_from_the_log_end_and_stamps_its_epoch():
    log, _, _, _ = v2_log()
    results = lead(log, [1, 3, 2], epoch=7)
    assert [r.logical_offset for r in results] == [0, 1, 4]
    assert [r.message_count for r in results] == [1, 3, 2]
    assert results[1].base_offset == results[0].next_offset  # byte offsets, as for 0.7
    headers = validate_batches(stored(log), max_batch_bytes=1 << 20)  # CRCs still match
    assert [(h.base_offset, h.leader_epoch) for h in headers] == [(0, 7), (1, 7), (4, 7)]
    assert log.kafka_offsets.next_offset == 6 and log.kafka_offsets.start_offset == 0


def test_log_append_time_sets_the_timestamp_type_and_max_timestamp_and_a_new_crc():
    log, _, _, _ = v2_log()
    lead(log, [2], append_time_ms=5_000)
    header = read_header(stored(log))
    assert header.log_append_time and header.max_timestamp_ms == 5_000
    assert batch_crc(stored(log), 0, header.size) == header.crc
    assert log.kafka_offsets.max_timestamp() == (1, 5_000)


@pytest.mark.parametrize("damage", ["crc", "magic", "cut", "producer_id", "too_large"])
def test_a_part_that_breaks_a_rule_appends_nothing(damage):
    log, _, _, _ = v2_log(max_message_size=200)
    lead(log, [1])
    good = bytearray(batches([1, 1]))
    if damage == "crc":
        good[-1] ^= 1
    elif damage == "magic":
        good[16] = 1
    elif damage == "cut":
        good = good[:-3]
    elif damage == "producer_id":
        good = bytearray(make_batch([b"v"], producer_id=9))
    else:
        good = bytearray(make_batch([b"v" * 300]))
    before = stored(log)
    with pytest.raises(BatchError):
        log.append(good, assign=OffsetAssignment(0))
    assert stored(log) == before and log.kafka_offsets.next_offset == 1


def test_a_v2_log_refuses_a_07_message_set():
    log, _, _, _ = v2_log()
    with pytest.raises(BatchError):
        log.append(bytearray(build_message_set([b"hello, 0.7"])), assign=OffsetAssignment(0))
    assert log.end_offset == 0


def test_the_leader_must_hand_a_bytearray():
    log, _, _, _ = v2_log()
    with pytest.raises(TypeError):
        log.append(batches([1]), assign=OffsetAssignment(0))


def test_a_follower_appends_the_leaders_bytes_unchanged_when_they_follow_on():
    leader, _, _, _ = v2_log()
    lead(leader, [2, 1, 4])
    follower, _, _, _ = v2_log()
    data = stored(leader)
    result = follower.append(data)
    assert result.logical_offset == 0 and stored(follower) == data
    assert indexed(follower) == indexed(leader)
    with pytest.raises(BatchError, match="the log is at 7"):
        follower.append(data)  # starts at 0 again
    assert stored(follower) == data


def test_a_followers_cut_trailing_batch_is_dropped_as_07_drops_a_cut_entry():
    leader, _, _, _ = v2_log()
    lead(leader, [2, 3])
    data = stored(leader)
    first = read_header(data).size
    follower, _, _, _ = v2_log()
    result = follower.append(data[:first + 20])
    assert (result.base_offset, result.next_offset, result.message_count) == (0, first, 2)
    assert follower.kafka_offsets.next_offset == 2
    nothing = follower.append(data[first:first + 11])  # not even a length prefix
    assert nothing.message_count == 0 and nothing.logical_offset == 2 and follower.end_offset == first
    follower.append(data[first:])
    assert stored(follower) == data


# -- the index ------------------------------------------------------------------------------


def test_lookups_by_offset_position_and_time():
    log, _, _, _ = v2_log()
    lead(log, [1, 3, 2])  # offsets 0 | 1 2 3 | 4 5; timestamps 1000 | 1000-1002 | 1000-1001
    k = log.kafka_offsets
    p0, p1, p2 = (p for _, p, _ in indexed(log))
    end = log.end_offset
    assert [k.position_of(o) for o in range(7)] == [p0, p1, p1, p1, p2, p2, None]
    assert [k.offset_at(p) for p in (0, 1, p1, p1 + 1, p2, end)] == [0, 1, 1, 4, 4, 6]
    assert k.offset_for_time(1000) == (0, 1000)
    assert k.offset_for_time(1002) == (1, 1002)
    assert k.offset_for_time(1003) is None
    assert k.batch_at_time(1002) == (1, 1002, p1, p2)  # what ListOffsets reads and scans (§16.4)
    assert k.batch_at_time(1001) == (1, 1002, p1, p2)  # batch 0's max 1000 is below it
    assert k.batch_at_time(1003) is None
    assert k.max_timestamp() == (3, 1002)


def span_end(k, start, max_bytes, limit):
    """Where the bytes a fetch sends from ``start`` end: one span, in a log without padding."""
    spans = k.retained_spans(start, max_bytes, limit)
    assert len(spans) <= 1 and all(a == start for a, _ in spans), spans
    return spans[0][1] if spans else start


def test_retained_spans_send_whole_batches_and_at_least_one():
    log, _, _, _ = v2_log()
    lead(log, [1, 3, 2])
    k = log.kafka_offsets
    p0, p1, p2 = (p for _, p, _ in indexed(log))
    end = log.end_offset
    assert span_end(k, p0, end, end) == end
    assert span_end(k, p0, p2 - p0 + 5, end) == p2  # the third batch does not fit
    assert span_end(k, p0, 1, end) == p1  # a batch larger than max_bytes still goes
    assert span_end(k, p1, 1 << 20, p2 + 3) == p2  # never past the limit
    assert span_end(k, p1, 1, p1 + 3) == p1  # not even the first batch ends by the limit
    assert span_end(k, end, 100, end) == end


def test_an_empty_log_answers_its_ends_and_no_times():
    log, _, _, _ = v2_log()
    k = log.kafka_offsets
    assert (k.start_offset, k.next_offset, k.position_of(0), k.offset_at(0)) == (0, 0, None, 0)
    assert k.offset_for_time(0) is None and k.max_timestamp() == (-1, -1)


def test_the_index_follows_rolls_and_the_lookups_cross_segments():
    log, _, _, _ = v2_log()
    lead(log, [2])
    log.roll()
    lead(log, [1, 1])
    log.roll()
    k = log.kafka_offsets
    assert len(log.segments.segments) == 3 and k.next_offset == 4
    assert indexed(log) == fresh_walk(log)
    assert k.position_of(2) == log.segments.segments[1].start
    assert k.position_of(4) is None
    assert k.offset_at(log.segments.segments[2].start) == 4
    end = log.segments.segments[1].end
    assert span_end(k, 0, 1 << 20, 1 << 20) == log.segments.segments[1].start  # one segment at a time
    assert span_end(k, log.segments.segments[1].start, 1 << 20, end) == end


def test_truncation_cuts_the_index_and_refuses_a_position_inside_a_batch():
    log, _, _, _ = v2_log()
    lead(log, [1, 2])
    log.roll()
    lead(log, [3, 1])
    walk = fresh_walk(log)
    with pytest.raises(ValueError, match="not a batch boundary"):
        log.truncate_to(walk[3][1] + 1)
    assert indexed(log) == walk  # refused at once: nothing changed
    log.truncate_to(walk[3][1])
    assert log.kafka_offsets.next_offset == 6 and indexed(log) == fresh_walk(log) == walk[:3]
    log.truncate_to(walk[2][1])  # the second segment's start: it is emptied
    assert log.kafka_offsets.next_offset == 3 and indexed(log) == walk[:2]
    assert log.kafka_offsets.max_timestamp() == (2, 1001)
    assert lead(log, [1])[0].logical_offset == 3


def test_retention_drops_segments_with_their_index_but_keeps_the_newest_batch():
    log, _, _, clock = v2_log(retention_ms=10_000)
    lead(log, [2])
    log.roll()
    lead(log, [3])
    log.roll()
    clock.now_ms = T0 + 10**9  # every segment is old, by its batches' timestamps and its file time
    assert log.apply_retention() == 1  # the newest segment with a batch stays
    k = log.kafka_offsets
    assert (k.start_offset, k.next_offset) == (2, 5)
    assert indexed(log) == fresh_walk(log)


def test_retention_judges_time_by_the_batches_timestamps():
    log, _, _, clock = v2_log(retention_ms=10_000)
    log.append(bytearray(make_batch([b"a"], base_timestamp_ms=T0 + 50_000)), assign=OffsetAssignment(0))
    log.roll()
    lead(log, [1])
    clock.now_ms = T0 + 20_000  # the file is 20 s old, its batch's timestamp lies ahead
    assert log.apply_retention() == 0
    clock.now_ms = T0 + 70_000
    assert log.apply_retention() == 1


def test_reopening_rebuilds_the_same_index_in_small_chunks():
    log, m, fs, _ = v2_log()
    lead(log, [5, 1, 200, 1])  # the 200-record batch is larger than the chunks below
    log.roll()
    lead(log, [2])
    before = indexed(log)
    m.close()
    for chunk_bytes in (64, 1000, 8 << 20):
        m2, _, _ = manager(fs, config=LogConfig(record_format="v2", recovery_chunk_bytes=chunk_bytes))
        assert indexed(m2.get("t", 0)) == before
        m2.close()


def test_recovery_of_a_v2_log_keeps_its_whole_valid_batches():
    log, m, fs, _ = v2_log()
    lead(log, [2, 2])
    log.flush()
    lead(log, [3])
    path = log.segments.segments[-1].path
    m.close(clean=False)
    fs.write_file(path, fs.read_file(path)[:-5] + b"garbage", durable=True)
    m2, _, _ = manager(fs)
    recovered = m2.get("t", 0)
    assert recovered.kafka_offsets.next_offset == 4 and indexed(recovered) == fresh_walk(recovered)
    assert lead(recovered, [1])[0].logical_offset == 4


def renumber(data: bytes, position: int, base_offset: int) -> bytes:
    """``data`` with the batch at ``position`` claiming ``base_offset`` (outside the CRC: still valid)."""
    return data[:position] + base_offset.to_bytes(8, "big") + data[position + 8:]


def test_recovery_cuts_an_unflushed_batch_whose_offset_does_not_follow_on():
    log, m, fs, _ = v2_log()
    lead(log, [2, 2])
    log.flush()
    lead(log, [3, 1])
    walk = fresh_walk(log)
    path = log.segments.segments[-1].path
    m.close(clean=False)
    fs.write_file(path, renumber(fs.read_file(path), walk[3][1], 99))  # as a flipped bit would
    m2, _, _ = manager(fs)
    recovered = m2.get("t", 0)
    assert fresh_walk(recovered) == indexed(recovered) == walk[:3]
    assert recovered.end_offset == walk[3][1] and fs.durable_size(path) == walk[3][1]


def test_a_flushed_batch_whose_offset_does_not_follow_on_is_refused_at_load():
    log, m, fs, _ = v2_log()
    lead(log, [2, 2])
    walk = fresh_walk(log)
    path = log.segments.segments[-1].path
    m.close()  # clean: nothing is recovered
    fs.write_file(path, renumber(fs.read_file(path), walk[1][1], 99))
    with pytest.raises(LogLoadError, match="offsets"):
        manager(fs)


def test_the_oldest_segment_starts_the_logs_offsets():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    fs.write_file(DIR + "/" + FORMAT_FILE, b"v2\n")
    fs.write_file(DIR + "/00000000000000000000.kafka", batches([2, 1], base_offset=40))
    log = Log.open(fs, DIR, "t", 0, V2, clock, False)
    assert (log.kafka_offsets.start_offset, log.kafka_offsets.next_offset) == (40, 43)


def test_build_batch_index_refuses_bytes_that_are_not_whole_batches():
    clock = ManualClock(T0)
    fs = FakeFileSystem(0, clock)
    fs.makedirs(DIR)
    file = fs.open_segment(DIR + "/x", create=True)
    file.append(batches([1, 1]) + b"\x00" * 30)
    with pytest.raises(LogLoadError, match="no whole v2 batch"):
        build_batch_index(file, file.size, 0)
    index = build_batch_index(file, file.size - 30, 0, chunk_bytes=7)
    assert (len(index), index.next_offset) == (2, 2)


def header(position, base_offset, records, max_timestamp_ms, size=100):
    return BatchHeader(position, base_offset, size - 12, -1, 2, 0, 0, records - 1, 0, max_timestamp_ms, -1, -1, -1,
                       records)


def test_a_batch_index_refuses_batches_that_do_not_follow_on():
    index = BatchIndex(5)
    with pytest.raises(ValueError, match="offsets"):
        index.add_headers([header(0, 4, 1, 0)], 0)  # below the next offset
    with pytest.raises(ValueError, match="offsets"):
        index.add_headers([header(0, 6, 1, 0)], 0)  # a gap: the log's offsets are dense
    with pytest.raises(ValueError, match="byte 100"):
        index.add_headers([header(0, 5, 1, 0), header(150, 6, 1, 0)], 0)  # a gap in the bytes
    assert (len(index), index.next_offset, index.size_bytes) == (1, 6, 100)


def test_a_batch_index_keeps_the_first_batch_with_the_largest_timestamp():
    index = BatchIndex(0)
    # (base offset, records, maxTimestamp) of four 100-byte batches
    index.add_headers([header(position, base, records, max_ts) for position, (base, records, max_ts)
                       in zip(range(0, 400, 100), [(0, 2, 50), (2, 3, 80), (5, 1, 80), (6, 1, 10)])], 0)
    assert (index.largest_timestamp_ms, index.largest_timestamp_offset) == (80, 4)
    assert index.batch_at_time(60) == 1 and index.batch_at_time(81) is None
    index.truncate(200)
    assert (index.largest_timestamp_ms, index.largest_timestamp_offset, index.next_offset) == (80, 4, 5)
    index.truncate(100)
    assert (index.largest_timestamp_ms, index.largest_timestamp_offset, index.next_offset) == (50, 1, 2)


def test_the_cleaner_never_removes_batches_without_keys_from_a_v2_log():
    log, _, fs, clock = v2_log()
    lead(log, [1])
    log.roll()
    lead(log, [1])
    log.roll()
    cleaner = LogCleaner(fs, clock)
    policy = CompactionPolicy(compact=True)
    before = stored(log)
    assert cleaner.dirty_ratio(log, policy) == 1.0
    assert cleaner.clean(log, policy).segments == []
    assert stored(log) == before


def test_a_swapped_segment_of_a_v2_log_gets_an_index_of_its_own_bytes():
    log, _, fs, clock = v2_log()
    lead(log, [2, 1])
    log.roll()
    lead(log, [1])
    before = indexed(log)
    old = log.segments.segments[0]
    cleaned = LogCleaner(fs, clock)._rewrite(log, CLEAN_FORMATS["v2"], old, [], clock())  # a swap that removes nothing
    assert cleaned.batches is not old.batches
    assert log.install_cleaned(cleaned)
    assert log.segments.segments[0] is cleaned and indexed(log) == before == fresh_walk(log)
