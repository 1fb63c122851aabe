"""Requests: encode/decode round trips, the reader fed three ways (h11's ``tr()``),
and every connection-closing condition of spec §2 the codec can see."""

import struct

import pytest

from trikafka.wire import (
    NEED_DATA,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    LocalProtocolError,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    CreateTopicRequest,
    FetchLocalRequest,
    MetadataRequest,
    RemoteProtocolError,
    RequestReader,
    RequestType,
    build_message_set,
    decode_request_body,
    encode_request,
)

SET = build_message_set([b"one", b"two", b""])
EVERY_REQUEST = [
    ProduceRequest(ProducePart("test", 0, SET)),
    ProduceRequest(ProducePart("empty", -1, b"")),
    FetchRequest(FetchPart("test", 3, 1 << 40, 1048576)),
    FetchRequest(FetchPart("t", 0, 0, -1)),
    FetchLocalRequest(FetchPart("test", 3, 1 << 40, 4 << 20)),
    FetchLocalRequest(FetchPart("test", 3, 1 << 40, (1 << 31) - 1), 4 << 20),
    MultiFetchRequest(()),
    MultiFetchRequest((FetchPart("a", 0, 0, 10), FetchPart("a", 0, 0, 10), FetchPart("b.c-d_e", 7, 99, 0))),
    MultiProduceRequest(()),
    MultiProduceRequest((ProducePart("a", 0, SET), ProducePart("b", 1, b""))),
    OffsetsRequest("test", 0, -1, 1),
    OffsetsRequest("test", 2, -2, 10),
    OffsetsRequest("test", 2, 1_700_000_000_000, 5),
    ProduceAckedRequest(1, 5000, (ProducePart("a", 0, SET),)),
    ProduceAckedRequest(-1, 0, ()),
    FetchWaitRequest(100, 1, (FetchPart("a", 0, 0, 1024), FetchPart("b", 1, 5, 2048))),
    FetchWaitRequest(0, 0, ()),
    MetadataRequest(()),
    MetadataRequest(("a", "b.c-d_e", "a")),
    CreateTopicRequest("events", 8),
    CreateTopicRequest("x", -1),
    CreateTopicRequest("kv", 2, (("cleanup.policy", "compact"), ("min.compaction.lag.ms", "0"))),
    CreateTopicRequest("kv", 1, (("ключ", "значение ✓"),)),
]
IDS = [f"{type(r).__name__}-{i}" for i, r in enumerate(EVERY_REQUEST)]


def read_all(reader: RequestReader) -> list:
    events = []
    while (event := reader.next_event()) is not NEED_DATA:
        events.append(event)
    return events


@pytest.mark.parametrize("req", EVERY_REQUEST, ids=IDS)
def test_round_trip_whole(req):
    frame = encode_request(req)
    (size, type_id) = struct.unpack_from(">ih", frame)
    assert size == len(frame) - 4 and type_id == req.type
    reader = RequestReader()
    reader.receive_data(frame)
    assert read_all(reader) == [req]
    assert reader.buffered_bytes == 0


@pytest.mark.parametrize("req", EVERY_REQUEST, ids=IDS)
def test_round_trip_one_byte_at_a_time(req):
    frame = encode_request(req)
    reader = RequestReader()
    for i, byte in enumerate(frame[:-1]):
        reader.receive_data(bytes([byte]))
        assert reader.next_event() is NEED_DATA, f"event before byte {i + 1} of {len(frame)}"
    reader.receive_data(frame[-1:])
    assert reader.next_event() == req
    assert reader.next_event() is NEED_DATA


@pytest.mark.parametrize("req", EVERY_REQUEST, ids=IDS)
def test_trailing_partial_frame_stays_buffered(req):
    frame = encode_request(req)
    garbage = b"\x00\x00\x01"  # an incomplete size prefix of a next frame
    reader = RequestReader()
    reader.receive_data(frame + garbage)
    assert reader.next_event() == req
    assert reader.next_event() is NEED_DATA
    assert reader.buffered_bytes == len(garbage)


def test_pipelined_requests_in_one_read_and_split_anywhere():
    stream = b"".join(encode_request(r) for r in EVERY_REQUEST)
    reader = RequestReader()
    reader.receive_data(stream)
    assert read_all(reader) == EVERY_REQUEST
    for cut in range(0, len(stream), 37):
        reader = RequestReader()
        reader.receive_data(stream[:cut])
        events = read_all(reader)
        reader.receive_data(stream[cut:])
        assert events + read_all(reader) == EVERY_REQUEST


def test_bytes_after_the_last_field_are_ignored():
    # §2: the size may cover more than the fields; the extra bytes are skipped.
    body = encode_request(OffsetsRequest("t", 0, -1, 1))[4:] + b"extra junk"
    frame = struct.pack(">i", len(body)) + body
    follow = encode_request(FetchRequest(FetchPart("t", 0, 0, 1)))
    reader = RequestReader()
    reader.receive_data(frame + follow)
    assert read_all(reader) == [OffsetsRequest("t", 0, -1, 1), FetchRequest(FetchPart("t", 0, 0, 1))]


def test_parts_are_tuples_even_when_given_lists():
    req = MultiFetchRequest([FetchPart("a", 0, 0, 1)])
    assert isinstance(req.parts, tuple) and hash(req) == hash(MultiFetchRequest((FetchPart("a", 0, 0, 1),)))


def test_non_utf8_and_non_ascii_topics_survive():
    raw = b"caf\xc3\xa9-\xff\xfe"  # UTF-8 e-acute, then bytes that are not UTF-8
    body = struct.pack(">hh", 1, len(raw)) + raw + struct.pack(">iqi", 0, 0, 10)
    req = decode_request_body(body)
    assert req.part.topic == "café-\udcff\udcfe"
    assert encode_request(req)[4:] == body  # the raw bytes come back unchanged


def test_fetch_local_without_inline_max_size_bounds_both_answers_by_max_size():
    """docs §9.8: inlineMaxSize is optional; a request that ends after maxSize means maxSize."""
    part = FetchPart("t", 0, 7, 100)
    short = encode_request(FetchLocalRequest(part))
    assert len(encode_request(FetchLocalRequest(part, 50))) == len(short) + 4
    plain = decode_request_body(short[4:])
    assert plain == FetchLocalRequest(part) and plain.inline_part == part
    assert decode_request_body(encode_request(FetchLocalRequest(part, 50))[4:]).inline_part == FetchPart("t", 0, 7, 50)


def test_request_type_properties():
    assert not RequestType.PRODUCE.expects_response and not RequestType.MULTIPRODUCE.expects_response
    assert all(t.expects_response for t in (1, 2, 4, 100, 101, 104) for t in [RequestType(t)])
    assert [t for t in RequestType if t.is_extension] == [
        RequestType.PRODUCE_ACKED, RequestType.FETCH_WAIT, RequestType.METADATA, RequestType.CREATE_TOPIC,
        RequestType.FETCH_LOCAL, RequestType.REPLICA_FETCH, RequestType.EPOCH_END_OFFSET]


def test_the_request_table_gives_each_type_its_own_class_label_and_id():
    kinds = list(RequestType)
    assert len({k.api.request_class for k in kinds}) == len({k.label for k in kinds}) == len(kinds)
    for kind in kinds:
        assert kind.api.request_class.type is kind and int(kind) == kind.api.key
        assert kind.api.supports(0) and not kind.api.supports(1) and not kind.api.flexible(0)


@pytest.mark.parametrize("request_", EVERY_REQUEST, ids=lambda r: type(r).__name__)
def test_a_frame_carries_its_request_class_type_id(request_):
    (type_id,) = struct.unpack_from(">h", encode_request(request_), 4)
    assert RequestType(type_id).api.request_class is type(request_)


# ---------------------------------------------------------------- spec §2 close conditions


def frame_of(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def topic16(name: bytes) -> bytes:
    return struct.pack(">h", len(name)) + name


def expect_close(frame: bytes, match: str, max_request_bytes: int = 104857600) -> RequestReader:
    reader = RequestReader(max_request_bytes)
    reader.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match=match):
        reader.next_event()
    return reader


CLOSE_CASES = {
    "size zero": (struct.pack(">i", 0), "size 0"),
    "size negative": (struct.pack(">i", -5), "size -5"),
    "size one, no type": (struct.pack(">i", 1) + b"\x00", "too short for request type"),
    "unknown type 5": (frame_of(struct.pack(">h", 5) + b"\x00" * 30), "unknown request type 5"),
    "unknown type -1": (frame_of(struct.pack(">h", -1)), "unknown request type -1"),
    "unknown type 99": (frame_of(struct.pack(">h", 99) + b"\x00" * 30), "unknown request type 99"),
    "fetch body too short": (frame_of(struct.pack(">h", 1) + topic16(b"t") + b"\x00\x00\x00\x00" + b"\x00" * 7),
                             "too short for offset"),
    "topic length negative": (frame_of(struct.pack(">hh", 1, -1) + b"\x00" * 16), "negative topic length"),
    "topic past the end": (frame_of(struct.pack(">hh", 1, 50) + b"abc"), "too short for topic"),
    "produce set past the end": (frame_of(struct.pack(">h", 0) + topic16(b"t") + struct.pack(">ii", 0, 100) + b"x"),
                                 "too short for messageSet"),
    "produce set size negative": (frame_of(struct.pack(">h", 0) + topic16(b"t") + struct.pack(">ii", 0, -1)),
                                  "negative messageSet size"),
    "produce missing set size": (frame_of(struct.pack(">h", 0) + topic16(b"t") + struct.pack(">i", 0)),
                                 "too short for messageSet size"),
    "multifetch count negative": (frame_of(struct.pack(">hh", 2, -1)), "negative part count"),
    "multifetch missing part": (frame_of(struct.pack(">hh", 2, 2) + topic16(b"t") + struct.pack(">iqi", 0, 0, 1)),
                                "too short for topic length"),
    "multiproduce count negative": (frame_of(struct.pack(">hh", 3, -7)), "negative part count"),
    "multiproduce no count": (frame_of(struct.pack(">h", 3) + b"\x00"), "too short for part count"),
    "offsets missing max": (frame_of(struct.pack(">h", 4) + topic16(b"t") + struct.pack(">iq", 0, -1)),
                            "too short for maxNumOffsets"),
    "produce_acked count negative": (frame_of(struct.pack(">hihh", 100, 1, 1000, -2)), "negative part count"),
    "produce_acked truncated header": (frame_of(struct.pack(">hh", 100, 1) + b"\x00"), "too short for timeout_ms"),
    "fetch_wait count negative": (frame_of(struct.pack(">hiih", 101, 10, 1, -1)), "negative part count"),
    "fetch_wait part past end": (frame_of(struct.pack(">hiih", 101, 10, 1, 1) + topic16(b"abc") + b"\x00"),
                                 "too short for partition"),
    "metadata count negative": (frame_of(struct.pack(">hh", 102, -1)), "negative topic count"),
    "metadata topic past end": (frame_of(struct.pack(">hh", 102, 2) + topic16(b"a") + struct.pack(">h", 9)),
                                "too short for topic"),
    "create_topic no partitions": (frame_of(struct.pack(">h", 103) + topic16(b"t") + b"\x00"),
                                   "too short for partitions"),
}


@pytest.mark.parametrize("case", list(CLOSE_CASES))
def test_close_conditions_raise_remote_protocol_error(case):
    frame, match = CLOSE_CASES[case]
    reader = expect_close(frame, match)
    # The reader stays failed, and later bytes are neither parsed nor kept.
    reader.receive_data(encode_request(OffsetsRequest("t", 0, -1, 1)))
    assert reader.failed and reader.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError):
        reader.next_event()


def test_close_condition_after_a_good_request_still_delivers_the_good_one():
    good = encode_request(FetchRequest(FetchPart("t", 0, 0, 1)))
    reader = RequestReader()
    reader.receive_data(good + struct.pack(">i", -1))
    assert reader.next_event() == FetchRequest(FetchPart("t", 0, 0, 1))
    with pytest.raises(RemoteProtocolError):
        reader.next_event()


def test_frames_read_together_come_out_in_order_and_count_as_buffered_until_returned():
    frames = [encode_request(r) for r in EVERY_REQUEST]
    reader = RequestReader()
    reader.receive_data(b"".join(frames) + frames[0][:5])  # and the start of one more
    for i, req in enumerate(EVERY_REQUEST):
        assert reader.buffered_bytes == sum(map(len, frames[i:])) + 5
        assert reader.next_event() == req
    assert reader.next_event() is NEED_DATA and reader.buffered_bytes == 5
    reader.receive_data(frames[0][5:] + struct.pack(">i", 0))  # then a size the broker closes on
    assert reader.next_event() == EVERY_REQUEST[0]
    with pytest.raises(RemoteProtocolError, match="size 0 outside"):
        reader.next_event()
    assert reader.failed and reader.buffered_bytes == 0


def test_oversized_prefix_refused_after_four_bytes_without_buffering():
    reader = RequestReader(max_request_bytes=1000)
    reader.receive_data(struct.pack(">i", 1001))  # nothing but the prefix was sent
    assert reader.failed and reader.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError, match="size 1001 outside"):
        reader.next_event()


def test_oversized_prefix_refused_when_fed_byte_by_byte():
    reader = RequestReader()
    prefix = struct.pack(">i", 104857601)
    for byte in prefix[:3]:
        reader.receive_data(bytes([byte]))
        assert reader.next_event() is NEED_DATA
    reader.receive_data(prefix[3:])
    with pytest.raises(RemoteProtocolError):
        reader.next_event()


def test_size_at_the_bound_is_accepted():
    req = ProduceRequest(ProducePart("t", 0, SET))
    frame = encode_request(req)
    reader = RequestReader(max_request_bytes=len(frame) - 4)
    reader.receive_data(frame)
    assert reader.next_event() == req
    expect_close(frame, "outside", max_request_bytes=len(frame) - 5)


def test_huge_declared_size_allocates_nothing(tracemalloc_peak):
    # A prefix announcing 100 MB (within the bound): only what arrives is held.
    reader = RequestReader()
    with tracemalloc_peak() as measured:
        reader.receive_data(struct.pack(">i", 104857600) + b"\x00\x00")
        assert reader.next_event() is NEED_DATA
    assert reader.buffered_bytes == 6
    assert measured["peak"] < 64 * 1024


def test_many_small_reads_reuse_one_buffer():
    # O(bytes) receive: bytes are appended to one bytearray, never re-joined.
    req = ProduceRequest(ProducePart("t", 0, b"\x00" * 300_000))
    frame = encode_request(req)
    reader = RequestReader()
    buffer_before = reader._frames._buf
    for start in range(0, len(frame), 512):
        reader.receive_data(frame[start:start + 512])
        assert reader._frames._buf is buffer_before
    assert reader.next_event() == req


@pytest.fixture
def tracemalloc_peak():
    """A context manager filling a dict with the peak traced allocation inside it."""
    import contextlib
    import tracemalloc

    @contextlib.contextmanager
    def measure():
        result = {}
        tracemalloc.start()
        try:
            yield result
        finally:
            result["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

    return measure


# ---------------------------------------------------------------- local errors on encode


@pytest.mark.parametrize("req, match", [
    (ProduceRequest(ProducePart("t", 1 << 31, b"")), "partition"),
    (FetchRequest(FetchPart("t", -(1 << 31) - 1, 0, 1)), "partition"),
    (FetchRequest(FetchPart("t", 0, 1 << 63, 1)), "offset"),
    (FetchRequest(FetchPart("t", 0, 0, 1 << 31)), "max_bytes"),
    (OffsetsRequest("t" * 32768, 0, -1, 1), "longer than a string16"),
    (OffsetsRequest("t", 0, -1, 1 << 31), "max_offsets"),
    (OffsetsRequest("t", 0, -(1 << 63) - 1, 1), "time_ms"),
    (ProduceAckedRequest(1 << 15, 0, ()), "acks"),
    (ProduceAckedRequest(1, 1 << 31, ()), "timeout_ms"),
    (FetchWaitRequest(1 << 31, 0, ()), "max_wait_ms"),
    (FetchWaitRequest(0, -(1 << 31) - 1, ()), "min_bytes"),
    (MultiFetchRequest(tuple(FetchPart("t", 0, 0, 0) for _ in range(32768))), "part count"),
    (OffsetsRequest(b"t", 0, -1, 1), "topic must be str"),
    (FetchRequest(FetchPart("t", True, 0, 1)), "partition"),
    ("not a request", "not a request"),
])
def test_encode_rejects_values_that_do_not_fit(req, match):
    with pytest.raises(LocalProtocolError, match=match):
        encode_request(req)


def test_encode_accepts_the_extremes():
    req = FetchRequest(FetchPart("t" * 32767, -(1 << 31), -(1 << 63), (1 << 31) - 1))
    reader = RequestReader()
    reader.receive_data(encode_request(req))
    assert reader.next_event() == req


def test_create_topic_without_settings_keeps_its_first_encoding():
    frame = encode_request(CreateTopicRequest("events", 8))
    assert frame == struct.pack(">ih", 2 + 2 + 6 + 4, 103) + struct.pack(">h", 6) + b"events" + struct.pack(">i", 8)


@pytest.mark.parametrize("tail, message", [
    (struct.pack(">h", 3) + struct.pack(">h", 1) + b"k", "too short"),  # a count larger than what follows
    (struct.pack(">h", -1), "negative"),
    (struct.pack(">h", 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">h", 0), "not UTF-8"),
])
def test_create_topic_settings_from_a_peer_are_checked(tail, message):
    body = struct.pack(">h", 103) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + tail
    reader = RequestReader()
    reader.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(RemoteProtocolError, match=message):
        reader.next_event()
