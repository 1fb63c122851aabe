"""The producer's message-set builder against the wire reader (spec §3, §4)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from trikafka.producer.encoding import encode_part, encode_plain
from trikafka.wire import Codec, build_message_set, iter_messages, parse_entries, validate_message_set

payload_lists = st.lists(st.binary(max_size=300), min_size=1, max_size=40)


@given(payload_lists)
def test_plain_sets_are_byte_identical_to_the_wire_builder(payloads):
    assert encode_plain(payloads) == build_message_set(payloads)


@given(payload_lists, st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY]),
       st.integers(min_value=200, max_value=5000), st.integers(min_value=0, max_value=10_000))
def test_offsets_match_what_a_consumer_reads(payloads, codec, max_message_size, base_offset):
    part = encode_part(payloads, codec, max_message_size)
    validate_message_set(part.data)
    consumed = list(iter_messages(part.data, base_offset))
    assert [m.payload for m in consumed] == payloads
    offsets = part.message_offsets(payloads, base_offset)
    # a consumer sees a wrapper's inner messages at the wrapper's start (§4)
    assert [o for o, _ in offsets] == [m.offset for m in consumed]
    entries = {e.offset: e.next_offset for e in parse_entries(part.data, base_offset).entries}
    assert all(entries[o] == n for o, n in offsets)


def test_a_compressed_part_splits_into_wrappers_that_fit_max_message_size():
    payloads = [os.urandom(100) for _ in range(40)]  # incompressible: ~4 KB compressed
    part = encode_part(payloads, Codec.GZIP, 1000)
    wrappers = parse_entries(part.data).entries
    assert len(wrappers) > 4 and sum(part.wrapper_counts) == 40
    assert all(len(w.message.payload) <= 1000 for w in wrappers)
    assert validate_message_set(part.data, max_message_size=1000).message_count == 40
    assert [m.payload for m in iter_messages(part.data)] == payloads


def test_gzip_level_trades_speed_for_size_in_the_same_format():
    payloads = [b"GET /page/%d user=%d lorem ipsum dolor sit amet" % (i, i * 7) for i in range(200)]
    fast, default = (encode_part(payloads, Codec.GZIP, 1_000_000, level) for level in (1, 6))
    assert fast.data != default.data
    for part in (fast, default):
        assert [m.payload for m in iter_messages(part.data)] == payloads
        assert len(part.data) < len(encode_plain(payloads)) / 3
