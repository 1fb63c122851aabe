"""REPLICA_FETCH and EPOCH_END_OFFSET: exact bytes, round trips, malformed input."""

from __future__ import annotations

import pytest

from trikafka.wire.errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from trikafka.wire.framing import NEED_DATA, RequestReader
from trikafka.wire.replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, decode_epoch_end_offset_response, decode_replica_fetch_response,
    encode_epoch_end_offset_response, encode_replica_fetch_response,
)
from trikafka.wire.requests import RequestType, decode_request_body, encode_request
from trikafka.wire.responses import FileRegion

FETCH = ReplicaFetchRequest(replica_id=2, leader_epoch=7, max_wait_ms=500, topic="t", partition=3,
                            fetch_offset=1024, durable_offset=512, max_bytes=65536, log_start_offset=256)
EPOCH = EpochEndOffsetRequest(replica_id=2, leader_epoch=7, topic="t", partition=3, requested_epoch=5)


def test_replica_fetch_bytes():
    frame = encode_request(FETCH)
    assert frame == bytes.fromhex(
        "00000031" "006e"  # size, type 110
        "00000002" "00000007" "000001f4"  # replica 2, epoch 7, max wait 500 ms
        "0001" "74" "00000003"  # topic "t", partition 3
        "0000000000000400" "0000000000000200" "00010000"  # fetch 1024, durable 512, max 65536
        "0000000000000100"  # the follower's log start 256 (§12.4.1)
    )
    assert frame[:4] == (len(frame) - 4).to_bytes(4, "big")
    assert decode_request_body(frame[4:]) == FETCH


def test_epoch_end_offset_round_trip_and_type_ids():
    assert RequestType.REPLICA_FETCH == 110 and RequestType.EPOCH_END_OFFSET == 111
    frame = encode_request(EPOCH)
    assert frame[4:6] == b"\x00\x6f"
    assert decode_request_body(frame[4:]) == EPOCH


def test_the_request_reader_yields_them():
    reader = RequestReader()
    reader.receive_data(encode_request(FETCH) + encode_request(EPOCH))
    assert reader.next_event() == FETCH
    assert reader.next_event() == EPOCH
    assert reader.next_event() is NEED_DATA


@pytest.mark.parametrize("request_", [FETCH, EPOCH])
def test_a_truncated_body_is_the_peers_fault(request_):
    body = encode_request(request_)[4:]
    for cut in range(2, len(body)):
        with pytest.raises(RemoteProtocolError):
            decode_request_body(body[:cut])


def test_out_of_range_fields_are_refused_locally():
    with pytest.raises(LocalProtocolError):
        encode_request(ReplicaFetchRequest(2, 7, 0, "t", 0, 1 << 63, 0, 1))


class _Source:
    def __init__(self, data: bytes):
        self.data = data

    def pread(self, position: int, n: int) -> bytes:
        return self.data[position:position + n]


def test_replica_fetch_response_round_trip_with_a_file_region():
    chunks = encode_replica_fetch_response(ErrorCode.NO_ERROR, leader_epoch=7, chunk_epoch=6, high_watermark=100,
                                           log_end=140, isr=(1, 2), data=FileRegion(_Source(b"xxabcdef"), 2, 6),
                                           log_start_offset=12)
    wire = chunks[0] + chunks[1].read()
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4
    error = int.from_bytes(wire[4:6], "big", signed=True)
    result = decode_replica_fetch_response(error, wire[6:])
    assert (result.error, result.leader_epoch, result.chunk_epoch, result.high_watermark, result.log_end,
            result.log_start_offset, result.isr, result.data) == (ErrorCode.NO_ERROR, 7, 6, 100, 140, 12, (1, 2),
                                                                  b"abcdef")


def test_responses_refuse_malformed_payloads():
    with pytest.raises(RemoteProtocolError):
        decode_replica_fetch_response(0, b"\x00" * 10)
    bad_count = encode_replica_fetch_response(ErrorCode.NO_ERROR, leader_epoch=1, chunk_epoch=1, high_watermark=0,
                                              log_end=0, isr=(1,), data=None)[0][6:-4]
    with pytest.raises(RemoteProtocolError):
        decode_replica_fetch_response(0, bad_count)
    with pytest.raises(RemoteProtocolError):
        decode_epoch_end_offset_response(0, b"\x00" * 5)


def test_epoch_end_offset_response():
    frame = encode_epoch_end_offset_response(ErrorCode.FENCED_LEADER_EPOCH, 4, 4096)
    assert frame[:6] == b"\x00\x00\x00\x0e\x00\x15"
    assert decode_epoch_end_offset_response(21, frame[6:]) == (ErrorCode.FENCED_LEADER_EPOCH, 4, 4096)
