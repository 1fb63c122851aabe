"""Records inside v2 batches (§16.6): our builder and decoder, kafka-python's as the independent oracle,
every codec."""

from __future__ import annotations

import time

import cramjam
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from trikafka.kafka.batch import HEADER_BYTES, LOG_OVERHEAD, encode_header, read_header, write_crc
from trikafka.kafka.compression import Compression, compress, decompress
from trikafka.kafka.errors import CorruptRecords
from trikafka.kafka.records import CREATE_TIME, LOG_APPEND_TIME, BatchBuilder, Record, build_batch, decode_batches
from trikafka.wire import compression as wire_compression

CODECS = list(Compression)

RECORDS = [
    Record(10, 1_700_000_000_000, None, b"first"),
    Record(11, 1_700_000_000_005, b"key", None, (("trace", b"abc"), ("empty", None), ("ключ", b""))),
    Record(12, 1_699_999_999_000, b"", b"v" * 1000),
]


def decode_all(data: bytes) -> list[Record]:
    return [record for _, records in decode_batches(data) for record in records]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip(codec):
    data = build_batch(RECORDS, base_offset=10, compression=codec)
    [(header, records)] = list(decode_batches(data))
    assert records == RECORDS
    assert (header.base_offset, header.record_count, header.last_offset_delta, header.compression) == (10, 3, 2, codec)
    assert (header.base_timestamp_ms, header.max_timestamp_ms) == (1_700_000_000_000, 1_700_000_000_005)
    assert (header.producer_id, header.leader_epoch, header.size) == (-1, -1, len(data))


def test_bare_values_get_the_next_offsets_and_one_time():
    data = build_batch([b"a", None, b"c"], base_offset=7, timestamp_ms=1234)
    assert decode_all(data) == [Record(7, 1234, None, b"a"), Record(8, 1234, None, None), Record(9, 1234, None, b"c")]


def test_bare_values_without_a_time_are_stamped_now_in_ms():
    before_ms = int(time.time() * 1000)
    [record] = decode_all(build_batch([b"a"]))
    assert before_ms <= record.timestamp_ms <= int(time.time() * 1000)


def test_log_append_time_gives_every_record_the_batch_time():
    data = build_batch(RECORDS, base_offset=10, timestamp_type=LOG_APPEND_TIME)
    [(header, records)] = list(decode_batches(data))
    assert header.log_append_time
    assert {r.timestamp_ms for r in records} == {header.max_timestamp_ms}


@pytest.mark.parametrize("timestamp_type", [CREATE_TIME, LOG_APPEND_TIME])
def test_the_timestamp_types_are_kafkas_codes(timestamp_type):
    # 0 CreateTime, 1 LogAppendTime, as Kafka's clients report them (and Spark's timestampType column)
    data = build_batch(RECORDS, base_offset=10, timestamp_type=timestamp_type)
    assert DefaultRecordBatch(data).timestamp_type == timestamp_type


def test_producer_fields():
    data = build_batch([b"a"], producer_id=9, producer_epoch=2, base_sequence=40, leader_epoch=3)
    [(header, _)] = list(decode_batches(data))
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.leader_epoch) == (9, 2, 40, 3)
    assert DefaultRecordBatch(data).producer_id == 9


def test_an_empty_batch_is_refused():
    with pytest.raises(ValueError):
        build_batch([])


def test_a_partial_trailing_batch_ends_the_walk():
    batches = [build_batch([b"x" * n], base_offset=n, compression=n % 5, timestamp_ms=1) for n in range(1, 4)]
    stream = b"".join(batches)
    ends = [sum(len(b) for b in batches[:i]) for i in range(4)]
    for cut in range(len(stream) + 1):
        whole = max(i for i, end in enumerate(ends) if end <= cut)
        assert [h.base_offset for h, _ in decode_batches(stream[:cut])] == [1, 2, 3][:whole], cut


def test_a_memoryview_of_a_bytearray_decodes():
    data = bytearray(build_batch(RECORDS, base_offset=10, compression=Compression.ZSTD))
    assert decode_all(memoryview(data)) == RECORDS


# kafka-python: its builder into our decoder, our builder into its reader


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_pythons_batches_decode(codec):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for record in RECORDS:
        builder.append(record.offset - 10, record.timestamp_ms, record.key, record.value, list(record.headers))
    data = bytes(builder.build())
    assert decode_all(data) == [r._replace(offset=r.offset - 10) for r in RECORDS]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec):
    data = build_batch(RECORDS, base_offset=10, compression=codec)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.compression_type == codec and batch.base_offset == 10
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
    assert got == RECORDS


def test_an_uncompressed_batch_is_kafka_pythons_byte_for_byte():
    # The records' wire form (§16.6) as another implementation writes it: a null key, value or
    # header value is the length -1, an empty one 0; the header fields and the CRC agree too.
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for record in RECORDS:
        builder.append(record.offset - 10, record.timestamp_ms, record.key, record.value, list(record.headers))
    ours = build_batch([r._replace(offset=r.offset - 10) for r in RECORDS], leader_epoch=0)
    assert ours == bytes(builder.build())


def rebuilt(data: bytes, region: bytes, compression: int) -> bytes:
    """``data``'s batch with ``region`` as its records bytes and ``compression`` in its attributes."""
    header = read_header(data)
    header = header._replace(batch_length=HEADER_BYTES - LOG_OVERHEAD + len(region),
                             attributes=(header.attributes & ~0x07) | compression)
    out = bytearray(encode_header(header)) + region
    write_crc(out, 0, len(out))
    return bytes(out)


def test_raw_snappy_without_the_xerial_framing_decodes():
    plain = build_batch(RECORDS, base_offset=10)
    raw = bytes(cramjam.snappy.compress_raw(plain[HEADER_BYTES:]))
    assert decode_all(rebuilt(plain, raw, Compression.SNAPPY)) == RECORDS


def test_snappy_is_written_with_the_xerial_framing_java_reads():
    data = build_batch(RECORDS, compression=Compression.SNAPPY)
    assert data[HEADER_BYTES:HEADER_BYTES + 8] == b"\x82SNAPPY\x00"


def test_lz4_blocks_are_independent():
    # FLG byte of the LZ4 frame: bit 5 is block independence, which Kafka's Java reader requires
    flg = compress(Compression.LZ4, b"x" * 200_000)[4]
    assert flg & 0x20


# what does not decode


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE], ids=lambda c: c.name)
def test_a_corrupt_compressed_region(codec):
    plain = build_batch(RECORDS)
    with pytest.raises(CorruptRecords):
        decode_all(rebuilt(plain, b"\x00\x01 not compressed at all " * 3, codec))


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE], ids=lambda c: c.name)
def test_decompression_stops_at_the_bound(codec, monkeypatch):
    data = build_batch([b"\x00" * 4_000_000], compression=codec)
    assert len(data) < 300_000
    assert decode_all(data)[0].value == b"\x00" * 4_000_000  # within the bound of every codec
    monkeypatch.setattr(wire_compression, "MAX_DECOMPRESSED_BYTES", 1_000_000)
    with pytest.raises(CorruptRecords, match="expands beyond"):
        decode_all(data)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD], ids=lambda c: c.name)
def test_output_far_beyond_the_first_guess_decompresses(codec):
    value = b"\x00" * 5_000_000  # compresses far more than the first output guess's ratio
    compressed = compress(codec, value)
    assert len(compressed) * 8 < len(value)
    assert bytes(decompress(codec, compressed)) == value


def test_unknown_compression():
    with pytest.raises(CorruptRecords):
        decompress(5, b"")
    with pytest.raises(ValueError):
        compress(6, b"")


def test_a_crc_mismatch():
    data = bytearray(build_batch(RECORDS, base_offset=10))
    data[-2] ^= 0xFF  # the last byte of the last value (the headers count follows it)
    with pytest.raises(CorruptRecords, match="CRC"):
        decode_all(bytes(data))
    [(_, records)] = list(decode_batches(bytes(data), check_crc=False))
    assert records[2].value[-1] == ord("v") ^ 0xFF


def test_another_magic():
    data = bytearray(build_batch(RECORDS))
    data[16] = 1
    with pytest.raises(CorruptRecords, match="magic 1"):
        decode_all(bytes(data))


@pytest.mark.parametrize("tamper", ["record_count", "record_length"])
def test_records_that_do_not_fit_their_batch(tamper):
    plain = build_batch([b"abc"], timestamp_ms=5)
    if tamper == "record_count":
        header = read_header(plain)._replace(record_count=2)
        data = bytearray(encode_header(header)) + plain[HEADER_BYTES:]
        write_crc(data, 0, len(data))
    else:
        data = bytearray(rebuilt(plain, bytes([0x7E]) + plain[HEADER_BYTES + 1:], 0))  # length 63: past the end
    with pytest.raises(CorruptRecords):
        decode_all(bytes(data))


def test_a_batch_builder_encodes_as_build_batch_does():
    values = [b"v" * i * 50 for i in range(8)] + [None, b"w" * 9000]  # the table's fast path and the general one
    records = [Record(i, 1_700_000_000_000 + i * 3 - (i == 5) * 100, b"k" * i if i % 2 else None, value,
                      (("trace", b"x"),) if i == 3 else ()) for i, value in enumerate(values)]
    builder = BatchBuilder()
    for record in records:
        assert builder.append(record.timestamp_ms, record.key, record.value, record.headers) == record.offset
    assert builder.count == 10
    data = builder.build(producer_id=3, producer_epoch=1, base_sequence=7)
    assert builder.size_bytes == len(build_batch(records))
    assert data == build_batch(records, producer_id=3, producer_epoch=1, base_sequence=7)
    assert [r.value for r in DefaultRecordBatch(data)] == [r.value for r in records]
    with pytest.raises(ValueError):
        BatchBuilder().build()
