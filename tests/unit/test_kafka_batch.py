"""``kafka.batch`` (§16.6) on batches that ``kafka.records`` builds: what an append accepts, the
leader's rewrite of offsets, epoch and append time, and what crash recovery keeps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trikafka.kafka.batch import (CONTROL, HEADER_BYTES, PADDING, TRANSACTIONAL, BatchError, assign_offsets, batch_crc,
                                  check_follows, encode_header, is_padding, padding_batch_head, read_header,
                                  scan_valid_prefix, validate_batches, walk_headers, whole_batches_bytes, write_crc)
from trikafka.kafka.compression import Compression
from trikafka.kafka.markers import build_marker
from trikafka.kafka.records import Record, build_batch, decode_batches

LIMIT = 1 << 20


def three_batches() -> bytes:
    return b"".join(build_batch([b"a" * n, b"b"], timestamp_ms=100 + n, compression=n % 5) for n in (1, 2, 3))


def test_built_batches_validate():
    headers = validate_batches(three_batches(), max_batch_bytes=LIMIT)
    assert [h.record_count for h in headers] == [2, 2, 2]
    assert [h.position for h in headers] == [0, headers[0].end, headers[1].end]


@pytest.mark.parametrize("position", [16, 17, 21, 40, 61, 70])  # magic, crc, attributes, max timestamp, records
def test_a_corrupt_byte_is_corrupt(position):
    data = bytearray(build_batch([b"x" * 20], timestamp_ms=1))
    data[position] ^= 0x01
    with pytest.raises(BatchError) as caught:
        validate_batches(data, max_batch_bytes=LIMIT)
    assert caught.value.kind == BatchError.CORRUPT
    assert scan_valid_prefix(data) == 0


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_every_codec_is_accepted(codec):
    [header] = validate_batches(build_batch([b"x", b"y"], compression=codec, timestamp_ms=1), max_batch_bytes=LIMIT)
    assert header.compression == codec


def test_a_partial_batch_is_corrupt_on_append_and_cut_by_recovery():
    data = three_batches()
    whole = len(data) - 5
    with pytest.raises(BatchError) as caught:
        validate_batches(data[:whole], max_batch_bytes=LIMIT)
    assert caught.value.kind == BatchError.CORRUPT
    headers = list(walk_headers(data))
    assert scan_valid_prefix(data[:whole]) == headers[1].end
    assert scan_valid_prefix(data) == len(data)


def test_a_part_that_ends_inside_its_last_batch_keeps_only_the_whole_ones():
    # Every cut of the last batch, those shorter than its header included: an append refuses the
    # part as corrupt (never a struct error), recovery and the index walk keep the batches before it.
    data = three_batches()
    last = list(walk_headers(data))[-1]
    for cut in range(last.position + 1, len(data)):
        with pytest.raises(BatchError) as caught:
            validate_batches(data[:cut], max_batch_bytes=LIMIT)
        assert caught.value.kind == BatchError.CORRUPT, cut
        assert scan_valid_prefix(data[:cut]) == last.position, cut
        assert [h.end for h in walk_headers(data[:cut])][-1] == last.position, cut
        assert whole_batches_bytes(data[:cut]) == last.position, cut  # a follower's read: the cut tail
    assert whole_batches_bytes(data) == len(data)


@pytest.mark.parametrize("size", [HEADER_BYTES, HEADER_BYTES + 1, HEADER_BYTES + 7])
def test_a_batch_of_its_header_alone_or_a_few_bytes_more_is_whole(size):
    # The smallest batch is its 61-byte header (a cleaner's padding batch with no body, §16.6.1);
    # at the end of the bytes it is read as whole by the append, recovery and the index walk, and
    # its CRC covers every zero after the header.
    padding = padding_batch_head(6, 1, 0, size) + bytes(size - HEADER_BYTES)
    data = three_batches() + padding
    headers = validate_batches(data, max_batch_bytes=LIMIT, allow_padding=True)
    assert [h.end for h in headers][-2:] == [len(data) - size, len(data)]
    assert scan_valid_prefix(data) == len(data)
    assert [h.end for h in walk_headers(data)] == [h.end for h in headers]


def test_a_length_past_the_end_is_cut_even_with_a_matching_crc():
    # A torn write whose length field promises more bytes than the segment holds: recovery never
    # keeps bytes past the end of the data, whatever the CRC over the bytes there says, and an
    # append refuses such a part.
    whole = three_batches()
    torn = bytearray(build_batch([b"x" * 30], timestamp_ms=1))
    torn[8:12] = (len(torn) - 12 + 100).to_bytes(4, "big")  # batchLength: 100 bytes more than written
    write_crc(torn, 0, len(torn))
    assert scan_valid_prefix(whole + torn) == len(whole)
    assert [h.end for h in walk_headers(whole + torn)][-1] == len(whole)
    with pytest.raises(BatchError) as caught:
        validate_batches(whole + torn, max_batch_bytes=LIMIT)
    assert caught.value.kind == BatchError.CORRUPT


def test_too_large():
    data = build_batch([b"x" * 500], timestamp_ms=1)
    with pytest.raises(BatchError) as caught:
        validate_batches(data, max_batch_bytes=len(data) - 1)
    assert caught.value.kind == BatchError.TOO_LARGE
    assert validate_batches(data, max_batch_bytes=len(data))


def _with(**fields):
    plain = build_batch([b"x", b"y"], timestamp_ms=1)
    header = read_header(plain)._replace(**fields)
    data = bytearray(encode_header(header)) + plain[HEADER_BYTES:]
    write_crc(data, 0, len(data))
    return data


@pytest.mark.parametrize("field, value, kind", [
    ("record_count", 0, BatchError.INVALID), ("last_offset_delta", 5, BatchError.INVALID),
    ("attributes", 0x20, BatchError.INVALID), ("attributes", 0x10, BatchError.TRANSACTIONAL),
    *[("attributes", codec, BatchError.INVALID) for codec in (5, 6, 7)]])  # codecs past zstd (4)
def test_fields_that_break_a_rule_are_refused(field, value, kind):
    with pytest.raises(BatchError) as caught:
        validate_batches(_with(**{field: value}), max_batch_bytes=LIMIT)
    assert caught.value.kind == kind


def test_the_leaders_markers_pass_and_nothing_else_escapes_the_rules():
    # A marker is a control batch with records (§19.6), one record as a leader writes it: the
    # leader's own markers are let through; an empty control batch that is not the cleaner's
    # padding, and a data batch beside the markers, are still held to §16.6's rules.
    marker = build_marker(7, 0, True, coordinator_epoch=1, timestamp_ms=1)
    [header] = validate_batches(marker, max_batch_bytes=LIMIT, allow_markers=True)
    assert header.record_count == 1
    for data in (_with(attributes=CONTROL | TRANSACTIONAL, record_count=0), _with(last_offset_delta=5)):
        with pytest.raises(BatchError) as caught:
            validate_batches(marker + data, max_batch_bytes=LIMIT, allow_markers=True)
        assert caught.value.kind == BatchError.INVALID


def test_an_idempotent_batch_passes_the_codec_the_log_checks_its_sequence():
    [header] = validate_batches(_with(producer_id=7, producer_epoch=0, base_sequence=0), max_batch_bytes=LIMIT)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 0)


def test_a_compressed_batch_may_have_gaps_in_its_offset_deltas():
    data = build_batch([Record(0, 1, None, b"a"), Record(4, 1, None, b"b")], compression=Compression.GZIP)
    [header] = validate_batches(data, max_batch_bytes=LIMIT)
    assert (header.record_count, header.last_offset_delta, header.next_offset) == (2, 4, 5)
    with pytest.raises(BatchError) as caught:  # gaps, but never before the base offset
        validate_batches(_with(attributes=Compression.GZIP, last_offset_delta=-1), max_batch_bytes=LIMIT)
    assert caught.value.kind == BatchError.INVALID


@pytest.mark.parametrize("append_time_ms", [None, 9_999])
def test_assign_offsets_rewrites_what_the_leader_owns(append_time_ms):
    data = bytearray(three_batches())
    headers = validate_batches(data, max_batch_bytes=LIMIT)
    assert assign_offsets(data, headers, 40, 7, append_time_ms) == 46
    rewritten = validate_batches(data, max_batch_bytes=LIMIT)  # the CRC still matches
    assert [(h.base_offset, h.leader_epoch) for h in rewritten] == [(40, 7), (42, 7), (44, 7)]
    assert check_follows(rewritten, 40) == 46
    with pytest.raises(BatchError):
        check_follows(rewritten, 41)
    decoded = [(r.offset, r.timestamp_ms, r.value) for _, records in decode_batches(data) for r in records]
    times = [9_999] * 6 if append_time_ms else [101, 101, 102, 102, 103, 103]
    assert decoded == [(40 + i, t, v) for i, (t, v) in enumerate(zip(times, [b"a", b"b", b"aa", b"b", b"aaa", b"b"]))]


# -- the cleaner's padding batches (§16.6.1) -------------------------------------------------------


def test_only_a_padding_batch_escapes_the_rules_in_a_followers_part():
    # Padding is the control and padding bits on a batch of no records (§16.6.1); a follower's part
    # may hold it, but neither an empty data batch nor a batch with the padding bits and records.
    padding = padding_batch_head(0, 1, 0, HEADER_BYTES)
    for impostor in (_with(record_count=0), _with(attributes=CONTROL | PADDING)):
        assert not is_padding(read_header(impostor))
        with pytest.raises(BatchError) as caught:
            validate_batches(padding + impostor, max_batch_bytes=LIMIT, allow_padding=True)
        assert caught.value.kind == BatchError.INVALID


@given(base=st.integers(0, 1 << 40), covered=st.integers(1, 1000), epoch=st.integers(-1, 1 << 20),
       size=st.integers(HEADER_BYTES, 5000))
@settings(max_examples=60, deadline=None)
def test_a_padding_batch_is_a_valid_batch_covering_its_offsets(base, covered, epoch, size):
    data = padding_batch_head(base, covered, epoch, size) + bytes(size - HEADER_BYTES)
    header = read_header(data)
    assert header.size == size and header.base_offset == base and header.next_offset == base + covered
    assert header.leader_epoch == epoch and header.record_count == 0
    assert (header.base_timestamp_ms, header.max_timestamp_ms) == (-1, -1)  # no time, no producer
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.attributes == CONTROL | PADDING and is_padding(header)
    assert batch_crc(data, 0, size) == header.crc  # the CRC covers the zeros
    assert scan_valid_prefix(data) == size  # the recovery scan keeps it
    assert validate_batches(data, max_batch_bytes=size, allow_padding=True) == [header]
    with pytest.raises(BatchError):  # a producer may never send one
        validate_batches(data, max_batch_bytes=size)


def test_a_padding_batch_needs_its_header_and_one_offset():
    with pytest.raises(ValueError):
        padding_batch_head(0, 1, 0, HEADER_BYTES - 1)
    with pytest.raises(ValueError):
        padding_batch_head(0, 0, 0, 100)
