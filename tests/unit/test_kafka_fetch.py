"""The hand-written Fetch response v4-v12 (§16.4), read back by kio's decoder and kafka-python's."""

from __future__ import annotations

import struct

import pytest

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.fetch import FetchPartition, encode_fetch_response
from trikafka.kafka.framing import decode_response
from trikafka.wire.responses import ChunkSequence, FileRegion

VERSIONS = range(KafkaApi.FETCH.min_version, KafkaApi.FETCH.max_version + 1)


class Pages:
    """A segment file's stand-in: ``pread`` only."""

    def __init__(self, data: bytes):
        self.data = data

    def pread(self, position: int, length: int) -> bytes:
        return self.data[position:position + length]


def read_chunks(chunks: list) -> bytes:
    return b"".join(chunk if isinstance(chunk, bytes) else chunk.read() for chunk in chunks)


PARTS = [
    FetchPartition("events", 0, 0, 1000, 1000, 5, b"batch-bytes-0"),
    FetchPartition("other", 3, 1, -1, -1, -1, None),
    FetchPartition("events", 2, 0, 7, 7, 0, b""),
    FetchPartition("ü-topic", 1, 0, 9, 9, 1, b"\x00" * 300),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_kio_decodes_every_version(version):
    data = read_chunks(encode_fetch_response(version, 17, 25, 0, 0, PARTS))
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    correlation_id, body = decode_response(1, version, data[4:])
    assert correlation_id == 17
    assert body.throttle_time.total_seconds() == 0.025
    topics = body.responses
    assert [t.topic for t in topics] == ["events", "other", "ü-topic"]
    got = [(t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.records)
           for t in topics for p in t.partitions]
    assert got == [(p.topic, p.partition, p.error_code, p.high_watermark, p.last_stable_offset, p.records)
                   for p in (PARTS[0], PARTS[2], PARTS[1], PARTS[3])]
    if version >= 5:
        assert [p.log_start_offset for t in topics for p in t.partitions] == [5, 0, -1, 1]
    if version >= 11:
        assert {p.preferred_read_replica for t in topics for p in t.partitions} == {-1}
    assert {p.aborted_transactions for t in topics for p in t.partitions} == {()}


@pytest.mark.parametrize("version", [7, 12])
def test_top_level_error_and_session(version):
    data = read_chunks(encode_fetch_response(version, 1, 0, 71, 12345, []))
    _, body = decode_response(1, version, data[4:])
    assert (body.error_code, body.session_id, body.responses) == (71, 12345, ())


@pytest.mark.parametrize("version", VERSIONS)
def test_records_objects_go_out_as_they_are(version):
    region = FileRegion(Pages(b"....segment bytes...."), 4, 13)
    sequence = ChunkSequence((b"pad", FileRegion(Pages(b"xyz"), 0, 3)))
    parts = [FetchPartition("t", 0, 0, 1, 1, 0, region), FetchPartition("t", 1, 0, 1, 1, 0, sequence)]
    chunks = encode_fetch_response(version, 3, 0, 0, 0, parts)
    assert [c for c in chunks if not isinstance(c, bytes)] == [region, sequence]
    assert any(c is region for c in chunks) and any(c is sequence for c in chunks)
    data = read_chunks(chunks)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    _, body = decode_response(1, version, data[4:])
    assert [p.records for p in body.responses[0].partitions] == [b"segment bytes", b"padxyz"]


def test_kafka_python_reads_it():
    from kafka.protocol.consumer import FetchResponse

    for version in (4, 11, 12):
        data = read_chunks(encode_fetch_response(version, 8, 0, 0, 0, PARTS))
        response = FetchResponse[version].decode(data, header=True, framed=True)
        parts = [p for t in response.responses for p in t.partitions]
        assert [p.high_watermark for p in parts] == [1000, 7, -1, 9]


def test_an_unserved_version_is_refused():
    with pytest.raises(ValueError):
        encode_fetch_response(3, 1, 0, 0, 0, [])
    with pytest.raises(ValueError):
        encode_fetch_response(13, 1, 0, 0, 0, [])
