"""Responses: broker-side encoders (chunks, file regions), the client ResponseReader,
and the client-side payload decoders on good and malformed input."""

import struct

import pytest

from trikafka.wire import (
    FETCH_LOCAL_INLINE,
    NEED_DATA,
    ErrorCode,
    FileRegion,
    LocalProtocolError,
    ProduceAckedResult,
    RemoteProtocolError,
    ResponseFrame,
    ResponseReader,
    build_message_set,
    chunks_length,
    chunks_to_bytes,
    decode_fetch_local_tail,
    decode_multifetch_payload,
    decode_offsets_payload,
    decode_produce_acked_payload,
    encode_fetch_local_descriptor,
    encode_fetch_local_response,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_produce_acked_response,
)


class FakeSegment:
    """A ``source`` for FileRegion: pread over bytes, and a descriptor number."""

    def __init__(self, data: bytes):
        self.data = data
        self.preads: list[tuple[int, int]] = []

    def fileno(self) -> int:
        return 99

    def pread(self, position: int, n: int) -> bytes:
        self.preads.append((position, n))
        return self.data[position:position + n]


SET = build_message_set([b"x" * 10, b"y" * 20])


def read_response(frame: bytes) -> ResponseFrame:
    reader = ResponseReader(1 << 20)
    reader.receive_data(frame)
    resp = reader.next_frame()
    assert isinstance(resp, ResponseFrame)
    return resp


def test_fetch_response_keeps_file_region_as_its_own_chunk():
    seg = FakeSegment(b"\xee" * 7 + SET + b"\xee" * 5)
    region = FileRegion(seg, 7, len(SET))
    chunks = encode_fetch_response(ErrorCode.NO_ERROR, region)
    assert chunks == [struct.pack(">ih", 2 + len(SET), 0), region]
    assert seg.preads == []  # encoding never reads the file
    assert chunks_length(chunks) == 6 + len(SET)
    assert chunks_to_bytes(chunks) == struct.pack(">ih", 2 + len(SET), 0) + SET
    assert seg.preads == [(7, len(SET))]
    assert read_response(chunks_to_bytes(chunks)).payload == SET


def test_fetch_response_error_codes_and_empty_data():
    for code in ErrorCode:
        chunks = encode_fetch_response(code, None)
        assert chunks == [struct.pack(">ih", 2, code)]
        assert read_response(chunks[0]).error_code == code
    empty_region = FileRegion(FakeSegment(b""), 0, 0)
    assert encode_fetch_response(ErrorCode.NO_ERROR, empty_region) == [b"\x00\x00\x00\x02\x00\x00"]


def test_multifetch_response_mixing_regions_bytes_and_errors():
    seg = FakeSegment(SET * 2)
    region = FileRegion(seg, len(SET), len(SET))
    parts = [
        (ErrorCode.NO_ERROR, region),
        (ErrorCode.WRONG_PARTITION, None),
        (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
        (ErrorCode.NO_ERROR, SET),
        (ErrorCode.UNKNOWN, None),
    ]
    chunks = encode_multifetch_response(parts)
    # headers adjacent to each other are merged; data chunks stay separate
    assert [type(c).__name__ for c in chunks] == ["bytes", "FileRegion", "bytes", "bytes", "bytes"]
    assert chunks[1] is region and chunks[3] == SET
    wire = chunks_to_bytes(chunks)
    assert len(wire) == chunks_length(chunks)
    (size, code) = struct.unpack_from(">ih", wire)
    assert size == len(wire) - 4 and code == 0
    resp = read_response(wire)
    assert decode_multifetch_payload(resp.payload) == [
        (ErrorCode.NO_ERROR, SET),
        (ErrorCode.WRONG_PARTITION, b""),
        (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
        (ErrorCode.NO_ERROR, SET),
        (ErrorCode.UNKNOWN, b""),
    ]


def test_multifetch_response_starting_with_data_bytes():
    chunks = encode_multifetch_response([(ErrorCode.NO_ERROR, SET)])
    assert chunks_to_bytes(chunks) == struct.pack(">ihih", 8 + len(SET), 0, 2 + len(SET), 0) + SET


def test_offsets_response_shapes():
    assert encode_offsets_response([]) == struct.pack(">ihi", 6, 0, 0)
    wire = encode_offsets_response([1 << 40, 14, 0])
    assert struct.unpack_from(">ih", wire) == (2 + 4 + 24, 0)
    assert decode_offsets_payload(read_response(wire).payload) == [1 << 40, 14, 0]
    with pytest.raises(LocalProtocolError):
        encode_offsets_response([1 << 63])


def test_produce_acked_response_round_trip():
    results = [
        ProduceAckedResult("a", 0, ErrorCode.NO_ERROR, 0, 41),
        ProduceAckedResult("bad/topic", 3, ErrorCode.INVALID_TOPIC, -1, -1),
        ProduceAckedResult("caf\udcff", 1, ErrorCode.REQUEST_TIMED_OUT, 100, 200),
    ]
    wire = encode_produce_acked_response(results)
    resp = read_response(wire)
    assert resp.error_code == ErrorCode.NO_ERROR
    assert decode_produce_acked_payload(resp.payload) == results
    assert decode_produce_acked_payload(read_response(encode_produce_acked_response([])).payload) == []
    with pytest.raises(LocalProtocolError):
        encode_produce_acked_response([ProduceAckedResult("a", 1 << 31, ErrorCode.NO_ERROR, 0, 0)])


def test_unknown_error_codes_read_as_unknown():
    assert read_response(struct.pack(">ih", 2, 42)).error_code == ErrorCode.UNKNOWN
    payload = struct.pack(">ih", 2, 1234)
    assert decode_multifetch_payload(payload) == [(ErrorCode.UNKNOWN, b"")]


@pytest.mark.parametrize("payload, match", [
    (b"\x00\x00\x00", "too short for a part header"),
    (struct.pack(">ih", 1, 0), "below 2"),
    (struct.pack(">ih", 10, 0) + b"abc", "too short for a part's message set"),
    (struct.pack(">ih", 2, 0) + b"\x00", "too short for a part header"),
])
def test_multifetch_payload_malformed(payload, match):
    with pytest.raises(RemoteProtocolError, match=match):
        decode_multifetch_payload(payload)


@pytest.mark.parametrize("payload, match", [
    (b"\x00\x00", "offset count"),
    (struct.pack(">i", -1), "negative offset count"),
    (struct.pack(">iq", 2, 5), "2 offsets"),
])
def test_offsets_payload_malformed(payload, match):
    with pytest.raises(RemoteProtocolError, match=match):
        decode_offsets_payload(payload)


@pytest.mark.parametrize("payload, match", [
    (b"\x00", "part count"),
    (struct.pack(">h", -1), "negative part count"),
    (struct.pack(">h", 1), "topic length"),
    (struct.pack(">hh", 1, -3), "negative topic length"),
    (struct.pack(">hh", 1, 1) + b"a" + b"\x00" * 21, "part result"),
])
def test_produce_acked_payload_malformed(payload, match):
    with pytest.raises(RemoteProtocolError, match=match):
        decode_produce_acked_payload(payload)


def test_response_reader_pipelined_and_byte_at_a_time():
    frames = [encode_offsets_response([5]), chunks_to_bytes(encode_fetch_response(ErrorCode.NO_ERROR, SET))]
    stream = b"".join(frames)
    reader = ResponseReader(1 << 20)
    got = []
    for byte in stream:
        reader.receive_data(bytes([byte]))
        while (frame := reader.next_frame()) is not NEED_DATA:
            got.append(frame)
    assert got == [ResponseFrame(ErrorCode.NO_ERROR, struct.pack(">iq", 1, 5)), ResponseFrame(ErrorCode.NO_ERROR, SET)]


@pytest.mark.parametrize("size", [-1, 0, 1, 101])
def test_response_reader_bounds(size):
    reader = ResponseReader(max_response_bytes=100)
    reader.receive_data(struct.pack(">i", size))
    assert reader.failed and reader.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError, match="response size"):
        reader.next_frame()
    reader.receive_data(encode_offsets_response([]))
    with pytest.raises(RemoteProtocolError):
        reader.next_frame()


@pytest.mark.parametrize("size", [-1, 0, 1, 101])
def test_a_head_read_apart_is_checked_by_the_same_bounds(size):
    """``decode_head``: a caller receiving the payload into its own buffer gets the same checks."""
    reader = ResponseReader(max_response_bytes=100)
    with pytest.raises(RemoteProtocolError, match="response size"):
        reader.decode_head(struct.pack(">ih", size, 0))


def test_a_head_read_apart_gives_the_error_and_the_payload_size():
    reader = ResponseReader(max_response_bytes=100)
    assert reader.decode_head(struct.pack(">ih", 100, 1)) == (ErrorCode.OFFSET_OUT_OF_RANGE, 98)
    assert reader.decode_head(bytearray(struct.pack(">ih", 2, 0))) == (ErrorCode.NO_ERROR, 0)


def test_response_reader_accepts_exact_bound():
    reader = ResponseReader(max_response_bytes=2 + len(SET))
    reader.receive_data(chunks_to_bytes(encode_fetch_response(ErrorCode.NO_ERROR, SET)))
    assert reader.next_frame() == ResponseFrame(ErrorCode.NO_ERROR, SET)


def test_file_region_checks():
    with pytest.raises(LocalProtocolError):
        FileRegion(FakeSegment(b""), -1, 0)
    with pytest.raises(LocalProtocolError):
        FileRegion(FakeSegment(b""), 0, -1)
    with pytest.raises(OSError, match="short read"):
        FileRegion(FakeSegment(b"abc"), 1, 5).read()


# ---------------------------------------------------------------- FETCH_LOCAL (docs §9.8)


def test_fetch_local_inline_answer_is_a_fetch_answer_behind_position_and_length():
    region = FileRegion(FakeSegment(b"0123456789"), 2, 5)
    chunks = encode_fetch_local_response(ErrorCode.NO_ERROR, region)
    assert chunks[1] is region  # the bytes still go out with sendfile
    raw = chunks_to_bytes(chunks)
    size, code = struct.unpack_from(">ih", raw)
    assert (size, code, len(raw)) == (2 + 12 + 5, 0, 4 + size) and raw[18:] == b"23456"
    assert decode_fetch_local_tail(size - 2, raw[6:18]) == (FETCH_LOCAL_INLINE, 5)
    error = chunks_to_bytes(encode_fetch_local_response(ErrorCode.OFFSET_OUT_OF_RANGE, None))
    assert struct.unpack(">ihqi", error) == (14, 1, -1, 0)


def test_fetch_local_descriptor_answer_names_the_region():
    raw = encode_fetch_local_descriptor(FileRegion(None, 1 << 33, 4096))
    assert struct.unpack(">ihqi", raw) == (14, 0, 1 << 33, 4096)
    assert decode_fetch_local_tail(12, raw[6:]) == (1 << 33, 4096)


@pytest.mark.parametrize("payload_bytes, position, length", [
    (11, -1, 0),  # shorter than position and length
    (12 + 4, -1, 5),  # inline bytes fewer than the length
    (12 + 1, 0, 1),  # bytes after a descriptor answer
    (12, -1, -1),  # a negative length
    (12, -2, 0),  # a position below -1
])
def test_fetch_local_tails_that_disagree_are_refused(payload_bytes, position, length):
    with pytest.raises(RemoteProtocolError, match="FETCH_LOCAL"):
        decode_fetch_local_tail(payload_bytes, struct.pack(">qi", position, length))
