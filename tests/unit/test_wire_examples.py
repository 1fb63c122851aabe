"""The worked hex examples of docs/protocol.md §15, byte for byte, in both directions."""

import gzip

import pytest

from trikafka.wire import (
    NEED_DATA,
    Codec,
    ErrorCode,
    FetchPart,
    FetchRequest,
    InvalidMessageError,
    MultiFetchRequest,
    OffsetsRequest,
    ProducePart,
    ProduceRequest,
    RequestReader,
    ResponseReader,
    build_message_set,
    chunks_to_bytes,
    decode_message,
    decode_multifetch_payload,
    decode_offsets_payload,
    encode_entry,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_request,
    iter_messages,
    parse_entries,
    validate_message_set,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace("\n", " "))


HELLO_M0 = h("00 00 00 0a  00  36 10 a6 86  68 65 6c 6c 6f")
HELLO_M1 = h("00 00 00 0b  01  00  36 10 a6 86  68 65 6c 6c 6f")


def parse_one_request(frame: bytes):
    reader = RequestReader()
    reader.receive_data(frame)
    event = reader.next_event()
    assert reader.next_event() is NEED_DATA
    return event


def parse_one_response(frame: bytes):
    reader = ResponseReader(max_response_bytes=1 << 20)
    reader.receive_data(frame)
    resp = reader.next_frame()
    assert reader.next_frame() is NEED_DATA
    return resp


def test_hello_magic0_entry():
    assert encode_entry(b"hello", magic=0) == HELLO_M0
    assert len(HELLO_M0) == 14
    msg = decode_message(HELLO_M0[4:])
    assert (msg.magic, msg.crc, msg.payload, msg.is_valid) == (0, 0x3610A686, b"hello", True)


def test_hello_magic1_entry():
    assert encode_entry(b"hello", magic=1) == HELLO_M1
    assert len(HELLO_M1) == 15
    msg = decode_message(HELLO_M1[4:])
    assert (msg.magic, msg.attributes, msg.codec, msg.crc, msg.payload) == (1, 0, 0, 0x3610A686, b"hello")


PRODUCE = h("00 00 00 1e  00 00  00 04 74 65 73 74  00 00 00 00  00 00 00 0e") + HELLO_M0


def test_produce_request():
    req = ProduceRequest(ProducePart("test", 0, HELLO_M0))
    assert encode_request(req) == PRODUCE
    assert parse_one_request(PRODUCE) == req


FETCH = h("00 00 00 18  00 01  00 04 74 65 73 74  00 00 00 00  00 00 00 00 00 00 00 00  00 10 00 00")


def test_fetch_request():
    req = FetchRequest(FetchPart("test", 0, 0, 1048576))
    assert encode_request(req) == FETCH
    assert parse_one_request(FETCH) == req


FETCH_RESPONSE = h("00 00 00 10  00 00") + HELLO_M0


def test_fetch_response_with_one_entry():
    chunks = encode_fetch_response(ErrorCode.NO_ERROR, HELLO_M0)
    assert chunks_to_bytes(chunks) == FETCH_RESPONSE
    resp = parse_one_response(FETCH_RESPONSE)
    assert resp.error_code == ErrorCode.NO_ERROR and resp.payload == HELLO_M0
    assert [m.payload for m in iter_messages(resp.payload)] == [b"hello"]


def test_fetch_responses_at_end_and_past_end():
    assert chunks_to_bytes(encode_fetch_response(ErrorCode.NO_ERROR, b"")) == h("00 00 00 02 00 00")
    assert chunks_to_bytes(encode_fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE, None)) == h("00 00 00 02 00 01")
    resp = parse_one_response(h("00 00 00 02 00 01"))
    assert resp.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and resp.payload == b""


def test_misaligned_fetch_bytes_misparse():
    # FETCH at 7 returns bytes 7-13: the client reads a nonsense length and stops or fails.
    tail = HELLO_M0[7:]
    assert tail == h("a6 86 68 65 6c 6c 6f")
    # "a6 86 68 65" read as N is negative: the client sees corruption, not a message.
    with pytest.raises(InvalidMessageError, match="negative entry length"):
        parse_entries(tail, base_offset=7)


OFFSETS = h("00 00 00 18  00 04  00 04 74 65 73 74  00 00 00 00  ff ff ff ff ff ff ff ff  00 00 00 01")
OFFSETS_RESPONSE = h("00 00 00 0e  00 00  00 00 00 01  00 00 00 00 00 00 00 0e")


def test_offsets_request_and_response():
    req = OffsetsRequest("test", 0, -1, 1)
    assert encode_request(req) == OFFSETS
    assert parse_one_request(OFFSETS) == req
    assert encode_offsets_response([14]) == OFFSETS_RESPONSE
    resp = parse_one_response(OFFSETS_RESPONSE)
    assert resp.error_code == ErrorCode.NO_ERROR
    assert decode_offsets_payload(resp.payload) == [14]
    assert decode_offsets_payload(parse_one_response(encode_offsets_response([14, 0])).payload) == [14, 0]


MULTIFETCH = h(
    "00 00 00 30  00 02  00 02"
    " 00 04 74 65 73 74  00 00 00 00  00 00 00 00 00 00 00 00  00 00 04 00"
    " 00 04 74 65 73 74  00 00 00 01  00 00 00 00 00 00 00 63  00 00 04 00"
)
MULTIFETCH_RESPONSE = h("00 00 00 1c  00 00  00 00 00 10  00 00") + HELLO_M0 + h("00 00 00 02  00 01")


def test_multifetch_request():
    req = MultiFetchRequest((FetchPart("test", 0, 0, 1024), FetchPart("test", 1, 99, 1024)))
    assert encode_request(req) == MULTIFETCH
    assert parse_one_request(MULTIFETCH) == req


def test_multifetch_response():
    chunks = encode_multifetch_response(
        [(ErrorCode.NO_ERROR, HELLO_M0), (ErrorCode.OFFSET_OUT_OF_RANGE, None)]
    )
    assert chunks_to_bytes(chunks) == MULTIFETCH_RESPONSE
    resp = parse_one_response(MULTIFETCH_RESPONSE)
    assert resp.error_code == ErrorCode.NO_ERROR
    assert decode_multifetch_payload(resp.payload) == [
        (ErrorCode.NO_ERROR, HELLO_M0),
        (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
    ]


def test_multifetch_with_no_parts():
    assert chunks_to_bytes(encode_multifetch_response([])) == h("00 00 00 02 00 00")
    assert parse_one_request(encode_request(MultiFetchRequest(()))) == MultiFetchRequest(())


INNER_AB = h("00 00 00 07 01 00 e8 b7 be 43 61   00 00 00 07 01 00 71 be ef f9 62")


def test_gzip_wrapper_inner_set_and_offsets():
    assert len(INNER_AB) == 22 and b"".join([encode_entry(b"a"), encode_entry(b"b")]) == INNER_AB
    wrapper = build_message_set([b"a", b"b"], codec=Codec.GZIP)
    msg = decode_message(wrapper[4:])
    assert (msg.magic, msg.attributes, msg.codec) == (1, 1, Codec.GZIP)
    compressed = msg.payload
    assert int.from_bytes(wrapper[:4], "big") == 6 + len(compressed)
    assert gzip.decompress(compressed) == INNER_AB
    assert validate_message_set(wrapper).message_count == 2
    o = 1000
    consumed = list(iter_messages(wrapper, base_offset=o))
    c = len(compressed)
    assert [(m.payload, m.offset, m.next_offset) for m in consumed] == [
        (b"a", o, o),
        (b"b", o, o + 10 + c),
    ]
