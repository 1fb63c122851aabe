"""Fuzzing the readers (after h11's fuzz/afl-server.py): arbitrary and mutated input,
whole and in random chunks; the only exception allowed out is RemoteProtocolError."""

from hypothesis import given
from hypothesis import strategies as st

from trikafka.wire import (
    NEED_DATA,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    RemoteProtocolError,
    RequestReader,
    ResponseReader,
    build_message_set,
    decode_multifetch_payload,
    decode_offsets_payload,
    decode_produce_acked_payload,
    encode_request,
)

MAX_REQUEST_BYTES = 4096

VALID_FRAMES = [
    encode_request(r)
    for r in [
        ProduceRequest(ProducePart("test", 0, build_message_set([b"hello", b""]))),
        FetchRequest(FetchPart("test", 0, 0, 1048576)),
        MultiFetchRequest((FetchPart("a", 0, 0, 10), FetchPart("b", 1, 99, 10))),
        MultiProduceRequest((ProducePart("a", 0, b"abc"), ProducePart("b", 1, b""))),
        OffsetsRequest("test", 0, -1, 1),
        ProduceAckedRequest(-1, 100, (ProducePart("a", 0, b"x"),)),
        FetchWaitRequest(100, 1, (FetchPart("a", 0, 0, 10),)),
    ]
]


def drain(reader: RequestReader, events: list) -> bool:
    """Pull events; True when the reader raised (and so is failed for good)."""
    try:
        while (event := reader.next_event()) is not NEED_DATA:
            events.append(event)
    except RemoteProtocolError:
        assert reader.failed and reader.buffered_bytes == 0
        return True
    return False


def feed(data: bytes, cuts: list[int]) -> tuple[list, bool]:
    reader = RequestReader(MAX_REQUEST_BYTES)
    events: list = []
    failed = False
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in zip(bounds, bounds[1:]):
        reader.receive_data(data[start:end])
        if drain(reader, events):
            failed = True
            break
    if not failed:
        # After draining, at most one incomplete, in-bound frame is held.
        assert reader.buffered_bytes < 4 + MAX_REQUEST_BYTES
    return events, failed


def check_consistent(data: bytes, cuts: list[int]) -> None:
    whole_events, whole_failed = feed(data, [])
    chunked_events, chunked_failed = feed(data, cuts)
    # However the bytes are split, the reader sees the same stream.
    assert chunked_events == whole_events
    assert chunked_failed == whole_failed
    for event in whole_events:
        # Every event re-encodes to a frame that parses back to itself.
        reader = RequestReader(1 << 20)
        reader.receive_data(encode_request(event))
        assert reader.next_event() == event


@given(st.binary(max_size=600), st.lists(st.integers(min_value=0, max_value=600), max_size=20))
def test_arbitrary_bytes(data, cuts):
    check_consistent(data, cuts)


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_after_a_plausible_header(body, cuts):
    # Random bodies behind a correct size prefix and a known type reach the decoders.
    for type_id in (0, 1, 2, 3, 4, 100, 101):
        data = (len(body) + 2).to_bytes(4, "big") + type_id.to_bytes(2, "big") + body
        check_consistent(data, cuts)


@st.composite
def mutated_stream(draw):
    frames = draw(st.lists(st.sampled_from(VALID_FRAMES), min_size=1, max_size=4))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "delete" and data:
            del data[pos]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "truncate":
            del data[pos:]
    return bytes(data)


@given(mutated_stream(), st.lists(st.integers(min_value=0), max_size=20))
def test_mutated_valid_frames(data, cuts):
    check_consistent(data, cuts)


@given(st.binary(max_size=400), st.lists(st.integers(min_value=0), max_size=10))
def test_response_reader_and_decoders_on_arbitrary_bytes(data, cuts):
    reader = ResponseReader(max_response_bytes=1024)
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    try:
        for start, end in zip(bounds, bounds[1:]):
            reader.receive_data(data[start:end])
            while (frame := reader.next_frame()) is not NEED_DATA:
                for decode in (decode_multifetch_payload, decode_offsets_payload, decode_produce_acked_payload):
                    try:
                        decode(frame.payload)
                    except RemoteProtocolError:
                        pass
    except RemoteProtocolError:
        assert reader.failed


def test_fuzz_helpers_really_detect_failure():
    # Guard against a vacuous fuzz: a known-bad stream is reported as failed.
    events, failed = feed(b"\x00\x00\x00\x00", [1, 2])
    assert (events, failed) == ([], True)
    events, failed = feed(VALID_FRAMES[1], [3])
    assert (events, failed) == ([FetchRequest(FetchPart("test", 0, 0, 1048576))], False)
