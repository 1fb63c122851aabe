"""Properties of the wire codec: CRC against an independent oracle, and round trips
of message sets and requests through the encoders, validators and readers."""

import crcmod.predefined
from hypothesis import given
from hypothesis import strategies as st

from trikafka.wire import (
    NEED_DATA,
    Codec,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    RequestReader,
    build_message_set,
    crc32,
    encode_request,
    iter_messages,
    parse_entries,
    scan_valid_prefix,
    validate_message_set,
)

CRCMOD_CRC32 = crcmod.predefined.mkCrcFun("crc-32")

int16s = st.integers(-(1 << 15), (1 << 15) - 1)
int32s = st.integers(-(1 << 31), (1 << 31) - 1)
int64s = st.integers(-(1 << 63), (1 << 63) - 1)
# Any str whose UTF-8 (with surrogateescape for lone low surrogates) fits a string16.
topics = st.one_of(
    st.text(alphabet="abcXYZ019._-", min_size=0, max_size=20),
    st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
payload_lists = st.lists(st.binary(max_size=300), max_size=8)
set_shapes = st.sampled_from([(0, Codec.NONE), (1, Codec.NONE), (1, Codec.GZIP), (1, Codec.SNAPPY)])


@given(st.binary(max_size=5000))
def test_crc32_equals_crcmod(data):
    assert crc32(data) == CRCMOD_CRC32(data)


@given(payload_lists, set_shapes, st.integers(0, 1 << 40))
def test_message_set_round_trip(payloads, shape, base_offset):
    magic, codec = shape
    data = build_message_set(payloads, magic=magic, codec=codec)
    validated = validate_message_set(data)
    assert validated.valid_bytes == len(data) and validated.message_count == len(payloads)
    assert scan_valid_prefix(data) == len(data)
    consumed = list(iter_messages(data, base_offset))
    assert [m.payload for m in consumed] == payloads
    # §4: offsets never decrease; the last message's next offset is the end of the set
    next_offsets = [m.next_offset for m in consumed]
    assert next_offsets == sorted(next_offsets)
    if consumed:
        assert next_offsets[-1] == base_offset + len(data)


@given(st.lists(st.tuples(payload_lists, set_shapes), max_size=5), st.data())
def test_concatenated_sets_and_truncation(batches, data):
    sets = [build_message_set(p, magic=m, codec=c) for p, (m, c) in batches]
    whole = b"".join(sets)
    cut = data.draw(st.integers(0, len(whole)))
    prefix = whole[:cut]
    # A fetch cut anywhere parses to the last whole entry boundary before the cut.
    parsed = parse_entries(prefix)
    assert parsed.valid_bytes + parsed.partial_tail_bytes == cut
    assert scan_valid_prefix(prefix) == parsed.valid_bytes
    entry_ends = {e.next_offset for e in parse_entries(whole).entries} | {0}
    assert parsed.valid_bytes == max(x for x in entry_ends if x <= cut)


fetch_parts = st.builds(FetchPart, topics, int32s, int64s, int32s)
produce_parts = st.builds(ProducePart, topics, int32s, st.binary(max_size=200))
requests = st.one_of(
    st.builds(ProduceRequest, produce_parts),
    st.builds(FetchRequest, fetch_parts),
    st.builds(MultiFetchRequest, st.lists(fetch_parts, max_size=5).map(tuple)),
    st.builds(MultiProduceRequest, st.lists(produce_parts, max_size=5).map(tuple)),
    st.builds(OffsetsRequest, topics, int32s, int64s, int32s),
    st.builds(ProduceAckedRequest, int16s, int32s, st.lists(produce_parts, max_size=5).map(tuple)),
    st.builds(FetchWaitRequest, int32s, int32s, st.lists(fetch_parts, max_size=5).map(tuple)),
)


@given(st.lists(requests, min_size=1, max_size=6), st.lists(st.integers(min_value=0), max_size=12))
def test_request_round_trip_any_split(reqs, cuts):
    stream = b"".join(encode_request(r) for r in reqs)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reader = RequestReader()
    got = []
    for start, end in zip(bounds, bounds[1:]):
        reader.receive_data(stream[start:end])
        while (event := reader.next_event()) is not NEED_DATA:
            got.append(event)
    assert got == reqs
    assert reader.buffered_bytes == 0
