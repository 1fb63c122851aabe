"""Properties of Kafka's varints and of v2 batches (§16.6): our writer against kio's reader and
kafka-python's encoder, and batches of any records in any codec read back as they were built."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import encode_varint

from trikafka.kafka.compression import Compression
from trikafka.kafka.errors import CorruptRecords
from trikafka.kafka.records import LOG_APPEND_TIME, Record, build_batch, decode_batches, read_batches
from trikafka.kafka.varint import (INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, UINT32_MAX, read_uvarint, read_varint,
                                   read_varlong, write_uvarint, write_varint, write_varlong)

int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)


# The ranges' ends are written out here, not taken from varint's constants: they are Kafka's
# (int32 and int64 zigzag, uint32 for unsigned lengths), and a test reading the module's own
# bounds would move with them.
@given(int32s, st.binary(max_size=3))
@example(2**31 - 1, b"")
@example(-2**31, b"")
def test_varint_round_trip(value, before):
    out = bytearray(before)
    write_varint(out, value)
    assert read_varint(bytes(out), len(before)) == (value, len(out))
    assert len(out) - len(before) <= 5


@given(int64s)
@example(2**63 - 1)
@example(-2**63)
@example(-64)  # zigzag 127: the largest value of one byte
@example(64)  # zigzag 128: the smallest of two
def test_varlong_round_trip_and_kafka_pythons_bytes(value):
    out = bytearray()
    write_varlong(out, value)
    theirs = bytearray()
    encode_varint(value, theirs.append)
    assert out == theirs and len(out) <= 10
    assert read_varlong(bytes(out), 0) == (value, len(out))


@given(st.integers(0, UINT32_MAX))
@example(2**32 - 1)
@example(127)
@example(128)
def test_uvarint_round_trip(value):
    out = bytearray()
    write_uvarint(out, value)
    assert read_uvarint(bytes(out), 0) == (value, len(out))
    assert all(b & 0x80 for b in out[:-1]) and not out[-1] & 0x80
    assert len(out) == max(1, -(-value.bit_length() // 7))  # the shortest form: 7 bits a byte


@pytest.mark.parametrize("write, low, high", [(write_varint, -2**31, 2**31 - 1), (write_varlong, -2**63, 2**63 - 1),
                                               (write_uvarint, 0, 2**32 - 1)], ids=["varint", "varlong", "uvarint"])
@given(st.data())
def test_a_value_out_of_its_range_is_refused(write, low, high, data):
    drawn = data.draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))
    for value in (low - 1, high + 1, drawn):
        with pytest.raises(ValueError):
            write(bytearray(), value)


@given(int32s, st.data())
def test_a_cut_varint_does_not_decode(value, data):
    out = bytearray()
    write_varint(out, value)
    cut = data.draw(st.integers(0, len(out) - 1))
    with pytest.raises(CorruptRecords):
        read_varint(bytes(out[:cut]), 0)


optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3).map(tuple)


@st.composite
def batches(draw):
    base_offset = draw(st.integers(0, 1 << 40))
    base_time = draw(st.integers(0, 1 << 42))
    count = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    offsets = [base_offset + sum(gaps[:i + 1]) - gaps[0] for i in range(count)]
    records = [Record(offset, base_time + draw(st.integers(-10_000, 10_000)), draw(optional_bytes),
                      draw(optional_bytes), draw(headers)) for offset in offsets]
    return base_offset, records


@given(batches(), st.sampled_from(list(Compression)), st.booleans())
def test_a_batch_reads_back_as_built(batch, codec, log_append_time):
    base_offset, records = batch
    if codec == Compression.NONE:
        records = [r._replace(offset=base_offset + i) for i, r in enumerate(records)]  # no gaps uncompressed
    data = build_batch(records, base_offset=base_offset, compression=codec,
                       timestamp_type=LOG_APPEND_TIME if log_append_time else 0)
    [(header, decoded)] = list(decode_batches(data))
    if log_append_time:
        records = [r._replace(timestamp_ms=header.max_timestamp_ms) for r in records]
    assert decoded == records
    assert header.next_offset == records[-1].offset + 1
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value, tuple(r.headers)) for r in theirs] == [
        (r.offset, r.key, r.value, r.headers) for r in records]


@given(batches(), st.data())
def test_a_cut_stream_yields_its_whole_batches(batch, data):
    base_offset, records = batch
    records = [r._replace(offset=base_offset + i) for i, r in enumerate(records)]
    one = build_batch(records, base_offset=base_offset)
    stream = one + one
    cut = data.draw(st.integers(0, len(stream)))
    assert len(list(decode_batches(stream[:cut]))) == cut // len(one)


# Field sizes on each side of a varint's width (one byte up to 63, two up to 8191, three beyond; zigzag), so
# that every inline reading of a one- or two-byte varint and kio's of longer ones is taken.
WIDTH_EDGES = (0, 1, 63, 64, 65, 127, 128, 8191, 8192, 8193)
edge_bytes = st.one_of(st.none(), st.binary(max_size=70), st.sampled_from(WIDTH_EDGES).map(lambda n: b"k" * n))
edge_deltas = st.one_of(st.integers(-70, 70), st.sampled_from(WIDTH_EDGES).flatmap(
    lambda n: st.sampled_from([n, -n, n + 1, -n - 1])), st.integers(-(1 << 40), 1 << 40))

# A batch's columns can be read first in any order; each order takes another path through the lazy reading.
READ_ORDERS = (("values", "offsets"), ("keys", "timestamps_ms"), ("offsets", "values"), ("records",),
               ("timestamps_ms", "keys"), ("headers", "offsets"))


@st.composite
def wide_batches(draw):
    """A batch whose records' fields cross every varint width: keys, values, time deltas, offset gaps."""
    base_offset = draw(st.integers(0, 1 << 40))
    base_time = draw(st.integers(0, 1 << 42))
    count = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.sampled_from((1, 1, 2, 63, 64, 8191, 8192)), min_size=count - 1, max_size=count - 1))
    offsets = [base_offset + sum(gaps[:i]) for i in range(count)]
    records = [Record(offset, base_time + draw(edge_deltas), draw(edge_bytes), draw(edge_bytes), draw(headers))
               for offset in offsets]
    return base_offset, records


def columns_of(records):
    return {"offsets": [r.offset for r in records], "timestamps_ms": [r.timestamp_ms for r in records],
            "keys": [r.key for r in records], "values": [r.value for r in records],
            "headers": [r.headers for r in records], "records": list(records)}


@given(wide_batches(), st.sampled_from([Compression.NONE, Compression.GZIP]), st.booleans(),
       st.sampled_from(READ_ORDERS))
def test_a_batchs_columns_read_in_any_order_are_its_records(batch, codec, log_append_time, order):
    base_offset, records = batch
    if codec == Compression.NONE:
        records = [r._replace(offset=base_offset + i) for i, r in enumerate(records)]  # no gaps uncompressed
    data = build_batch(records, base_offset=base_offset, compression=codec,
                       timestamp_type=LOG_APPEND_TIME if log_append_time else 0)
    [read] = list(read_batches(data))
    if log_append_time:
        records = [r._replace(timestamp_ms=read.header.max_timestamp_ms) for r in records]
    expected = columns_of(records)
    assert len(read) == len(records)
    for name in order:
        assert getattr(read, name) == expected[name], name
    for name, column in expected.items():
        assert getattr(read, name) == column, name
    assert list(read) == records and read[-1] == records[-1]


@given(wide_batches(), st.data(), st.booleans())
def test_since_drops_the_records_below_an_offset(batch, data, values_first):
    base_offset, records = batch
    [read] = list(read_batches(build_batch(records, base_offset=base_offset, compression=Compression.GZIP)))
    if values_first:
        assert read.values == [r.value for r in records]
    offset = data.draw(st.integers(base_offset - 1, records[-1].offset + 1))
    kept = [r for r in records if r.offset >= offset]
    rest = read.since(offset)
    assert list(rest) == kept and rest.values == [r.value for r in kept] and len(rest) == len(kept)
    assert rest.headers == [r.headers for r in kept]


@given(wide_batches(), st.data())
def test_a_damaged_batch_reads_the_same_whichever_column_comes_first(batch, data):
    base_offset, records = batch
    records = [r._replace(offset=base_offset + i) for i, r in enumerate(records)]
    built = bytearray(build_batch(records, base_offset=base_offset))
    at = data.draw(st.integers(61, len(built) - 1))  # a byte of the records, not of the batch header
    built[at] = data.draw(st.integers(0, 255))

    def read(first):
        [one] = list(read_batches(bytes(built), check_crc=False))
        try:
            getattr(one, first)
        except CorruptRecords:
            return "corrupt"
        return columns_of(one.records)

    assert read("values") == read("records") == read("offsets")


# Every field at one, two and three bytes of varint (gzip: offsets may have gaps).
EDGE_RECORDS = [Record(1000, 5_000, None, b"v"), Record(1064, 5_064, b"k" * 64, b"v" * 64, (("h", b"x"),)),
                Record(1065, 5_000 - 65, b"", None), Record(9300, 5_000 + 8192, b"k" * 8192, b"v" * 8192),
                Record(9301, 5_000 - 8193, None, b"")]


@pytest.mark.parametrize("order", READ_ORDERS, ids="-".join)
def test_a_batch_with_fields_of_every_varint_width_reads_back_in_any_order(order):
    [read] = list(read_batches(build_batch(EDGE_RECORDS, base_offset=1000, compression=Compression.GZIP)))
    expected = columns_of(EDGE_RECORDS)
    for name in (*order, *expected):
        assert getattr(read, name) == expected[name], name
