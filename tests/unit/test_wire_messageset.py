"""Message sets (spec §3.1, §3.3, §4, §5.1 steps 4-6, §5.2, §7.3)."""

import struct

import pytest

from tests.helpers.message_sets import corrupt_crc, wrapper
from trikafka.wire import (
    Codec,
    ConsumedMessage,
    InvalidMessageError,
    LocalProtocolError,
    MessageSizeTooLargeError,
    ValidatedSet,
    build_message_set,
    compress,
    crc32,
    decode_message,
    decompress,
    encode_entry,
    iter_messages,
    parse_entries,
    scan_valid_prefix,
    validate_message_set,
)

PAYLOADS = [b"alpha", b"", b"gamma" * 100]


# ------------------------------------------------------------------ build_message_set


@pytest.mark.parametrize("magic", [0, 1])
def test_build_uncompressed_is_concatenated_entries(magic):
    data = build_message_set(PAYLOADS, magic=magic)
    assert data == b"".join(encode_entry(p, magic=magic) for p in PAYLOADS)
    assert build_message_set([], magic=magic) == b""


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
def test_build_compressed_is_one_wrapper_of_magic1_messages(codec):
    data = build_message_set(PAYLOADS, codec=codec)
    parsed = parse_entries(data)
    assert len(parsed.entries) == 1 and parsed.valid_bytes == len(data)
    outer = parsed.entries[0].message
    assert (outer.magic, outer.codec, outer.is_valid) == (1, codec, True)
    inner = parse_entries(decompress(codec, outer.payload))
    assert [(e.message.magic, e.message.codec, e.message.payload) for e in inner.entries] == [
        (1, 0, p) for p in PAYLOADS
    ]
    assert build_message_set([], codec=codec) == b""  # never an empty wrapper
    with pytest.raises(LocalProtocolError):
        build_message_set([b"x"], magic=0, codec=codec)


# ------------------------------------------------------------------ validate_message_set


@pytest.mark.parametrize("magic, codec", [(0, Codec.NONE), (1, Codec.NONE), (1, Codec.GZIP), (1, Codec.SNAPPY)])
def test_validate_accepts_and_counts_inner_messages(magic, codec):
    data = build_message_set(PAYLOADS, magic=magic, codec=codec)
    result = validate_message_set(data)
    assert (result.valid_bytes, result.message_count, result.dropped_tail_bytes) == (len(data), 3, 0)


def test_validate_mixed_magics_and_wrappers():
    data = (build_message_set([b"m0"], magic=0) + build_message_set([b"a", b"b"], codec=Codec.GZIP)
            + build_message_set([b"m1"]) + build_message_set([b"c", b"d", b"e"], codec=Codec.SNAPPY))
    assert validate_message_set(data).message_count == 7


def test_validate_empty_set():
    assert validate_message_set(b"") == ValidatedSet(0, 0, 0)


def test_validate_large_payloads():
    data = build_message_set([b"\x01" * 100_000, b"\x02" * 100_000])
    assert validate_message_set(data).message_count == 2
    wrapped = build_message_set([b"\x03" * 100_000] * 3, codec=Codec.SNAPPY)
    assert validate_message_set(wrapped).message_count == 3


def test_validate_negative_length_is_invalid():
    good = encode_entry(b"ok")
    for data in (struct.pack(">i", -1) + b"\x00" * 10, good + struct.pack(">i", -5)):
        with pytest.raises(InvalidMessageError, match="negative entry length"):
            validate_message_set(data)


def test_validate_truncated_first_entry_is_invalid():
    entry = encode_entry(b"hello")
    for cut in range(1, len(entry)):
        with pytest.raises(InvalidMessageError):
            validate_message_set(entry[:cut])


def test_validate_truncated_later_entry_is_dropped():
    first = encode_entry(b"hello")
    second = encode_entry(b"world!")
    for cut in range(1, len(second)):
        result = validate_message_set(first + second[:cut])
        assert (result.valid_bytes, result.message_count, result.dropped_tail_bytes) == (len(first), 1, cut)


@pytest.mark.parametrize("bad_entry, match", [
    (bytes.fromhex("00000006") + b"\x02\x00" + struct.pack(">I", crc32(b"")), "unknown magic byte 2"),
    (bytes.fromhex("00000006") + b"\x01\x03" + struct.pack(">I", crc32(b"")), "unknown compression codec 3"),
    (corrupt_crc(encode_entry(b"payload", magic=0)), "CRC mismatch"),
    (corrupt_crc(encode_entry(b"payload", magic=1)), "CRC mismatch"),
    (bytes.fromhex("00000000"), "empty message"),
    (bytes.fromhex("00000003") + b"\x00\x00\x00", "magic-0 message shorter"),
    (bytes.fromhex("00000005") + b"\x01\x00\x00\x00\x00", "magic-1 message shorter"),
])
@pytest.mark.parametrize("position", ["first", "later"])
def test_validate_rejects_bad_messages(bad_entry, match, position):
    data = bad_entry if position == "first" else encode_entry(b"fine") + bad_entry + encode_entry(b"after")
    with pytest.raises(InvalidMessageError, match=match):
        validate_message_set(data)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
def test_validate_rejects_bad_wrappers(codec):
    inner_bad_crc = encode_entry(b"a") + corrupt_crc(encode_entry(b"bb"))
    with pytest.raises(InvalidMessageError, match="CRC mismatch"):
        validate_message_set(wrapper(inner_bad_crc, codec))
    # an inner set that ends inside an entry is invalid (no partial tails in wrappers)
    with pytest.raises(InvalidMessageError):
        validate_message_set(wrapper(encode_entry(b"a") + encode_entry(b"b")[:-1], codec))
    # a payload that does not decompress, with a correct outer CRC
    garbage = b"\x00not a compressed stream at all"
    with pytest.raises(InvalidMessageError):
        validate_message_set(encode_entry(garbage, magic=1, codec=codec))
    # an inner magic-0 message is accepted (Java reads any inner magic)
    assert validate_message_set(wrapper(encode_entry(b"m0", magic=0), codec)).message_count == 1


def test_validate_nested_wrappers_are_read_and_bounded():
    nested = wrapper(wrapper(encode_entry(b"deep")))
    assert validate_message_set(nested).message_count == 1
    too_deep = encode_entry(b"x")
    for _ in range(6):
        too_deep = wrapper(too_deep)
    with pytest.raises(InvalidMessageError, match="nested too deeply"):
        validate_message_set(too_deep)


def test_validate_max_message_size_uncompressed():
    data = build_message_set([b"x" * 100, b"y" * 101])
    assert validate_message_set(data, max_message_size=101).message_count == 2
    with pytest.raises(MessageSizeTooLargeError) as info:
        validate_message_set(data, max_message_size=100)
    assert info.value.error_code == 5


def test_validate_max_message_size_applies_to_compressed_payload():
    # 10 KB of zeros compresses far below 1 KB: the wrapper passes, because the
    # rule is on the top-level (compressed) payload, not the inner messages.
    data = build_message_set([b"\x00" * 10_000], codec=Codec.GZIP)
    compressed_len = len(decode_message(data[4:]).payload)
    assert compressed_len < 1000
    assert validate_message_set(data, max_message_size=compressed_len).message_count == 1
    with pytest.raises(MessageSizeTooLargeError):
        validate_message_set(data, max_message_size=compressed_len - 1)


def test_validate_size_rule_applies_before_validity():
    # 0.7.2 drops an oversized set before walking it: the size error wins over a later bad CRC.
    data = build_message_set([b"x" * 50]) + corrupt_crc(encode_entry(b"small"))
    with pytest.raises(MessageSizeTooLargeError):
        validate_message_set(data, max_message_size=10)


# ------------------------------------------------------------------ scan_valid_prefix


def test_scan_valid_prefix_keeps_complete_good_entries():
    a, b, c = encode_entry(b"a" * 10, magic=0), encode_entry(b"b" * 20), build_message_set([b"c"], codec=Codec.GZIP)
    good = a + b + c
    assert scan_valid_prefix(good) == len(good)
    assert scan_valid_prefix(b"") == 0
    for cut in range(len(good)):
        expected = max(x for x in (0, len(a), len(a + b)) if x <= cut)
        assert scan_valid_prefix(good[:cut]) == expected


@pytest.mark.parametrize("tail", [
    struct.pack(">i", -1),
    struct.pack(">i", 4) + b"\x00" * 4,                       # N below any header size
    struct.pack(">i", 5) + b"\x01" + b"\x00" * 4,            # magic 1 with N = 5
    bytes.fromhex("00000006") + b"\x07\x00" + struct.pack(">I", 0),  # unknown magic
    corrupt_crc(encode_entry(b"xyz", magic=0)),
    corrupt_crc(encode_entry(b"xyz", magic=1)),
    b"\x00\x00\x00\x00",
])
def test_scan_valid_prefix_stops_at_first_bad_entry(tail):
    head = encode_entry(b"head")
    assert scan_valid_prefix(head + tail + encode_entry(b"after")) == len(head)


def test_scan_does_not_decompress():
    # A wrapper whose (CRC-correct) payload is not gzip survives recovery: it is checked at produce time.
    bogus = encode_entry(b"not gzip", magic=1, codec=Codec.GZIP)
    assert scan_valid_prefix(bogus) == len(bogus)


# ------------------------------------------------------------------ parse_entries (§5.2)


def test_parse_entries_offsets_and_partial_tail():
    a, b, c = encode_entry(b"aa", magic=0), encode_entry(b"bbb"), encode_entry(b"cccc")
    data = a + b + c[:-2]
    parsed = parse_entries(data, base_offset=1000)
    assert [(e.offset, e.size, e.next_offset, e.message.payload) for e in parsed.entries] == [
        (1000, len(a) - 4, 1000 + len(a), b"aa"),
        (1000 + len(a), len(b) - 4, 1000 + len(a + b), b"bbb"),
    ]
    assert parsed.valid_bytes == len(a + b) and parsed.partial_tail_bytes == len(c) - 2
    assert parsed.truncated and parsed.first_entry_bytes is None


def test_parse_entries_first_entry_bytes():
    big = encode_entry(b"z" * 5000)
    for cut in (4, 100, len(big) - 1):
        parsed = parse_entries(big[:cut])
        assert parsed.entries == () and parsed.valid_bytes == 0
        assert parsed.first_entry_bytes == len(big)
    for cut in (0, 1, 3):  # even the length prefix is cut
        parsed = parse_entries(big[:cut])
        assert parsed.first_entry_bytes is None and parsed.partial_tail_bytes == cut
    full = parse_entries(big)
    assert full.first_entry_bytes is None and not full.truncated


def test_parse_entries_does_not_check_crc_but_checks_framing():
    bad = corrupt_crc(encode_entry(b"data"))
    assert not parse_entries(bad).entries[0].message.is_valid
    with pytest.raises(InvalidMessageError):
        parse_entries(struct.pack(">i", -2))
    with pytest.raises(InvalidMessageError):
        parse_entries(bytes.fromhex("00000006") + b"\x09" + b"\x00" * 5)


# ------------------------------------------------------------------ iter_messages (§4)


def test_iter_messages_offsets_plain_and_wrapped():
    base = 500
    plain0 = encode_entry(b"m0", magic=0)
    wrapped = build_message_set([b"a", b"b", b"c"], codec=Codec.GZIP)
    plain1 = encode_entry(b"m1")
    data = plain0 + wrapped + plain1
    w0 = base + len(plain0)
    w_end = w0 + len(wrapped)
    got = list(iter_messages(data, base_offset=base))
    assert got == [
        ConsumedMessage(base, w0, b"m0", 0, Codec.NONE),
        ConsumedMessage(w0, w0, b"a", 1, Codec.GZIP),
        ConsumedMessage(w0, w0, b"b", 1, Codec.GZIP),
        ConsumedMessage(w0, w_end, b"c", 1, Codec.GZIP),
        ConsumedMessage(w_end, w_end + len(plain1), b"m1", 1, Codec.NONE),
    ]


def test_iter_messages_snappy_single_inner_gets_wrapper_end():
    wrapped = build_message_set([b"only"], codec=Codec.SNAPPY)
    assert list(iter_messages(wrapped, 10)) == [ConsumedMessage(10, 10 + len(wrapped), b"only", 1, Codec.SNAPPY)]


def test_iter_messages_skips_partial_tail_and_empty_payloads():
    data = build_message_set([b"", b"x"]) + encode_entry(b"partial")[:-3]
    assert [m.payload for m in iter_messages(data)] == [b"", b"x"]
    assert list(iter_messages(encode_entry(b"cut")[:-1])) == []


def test_iter_messages_raises_on_corruption():
    with pytest.raises(InvalidMessageError, match="CRC mismatch in the entry at offset 7"):
        list(iter_messages(corrupt_crc(encode_entry(b"bad")), base_offset=7))
    with pytest.raises(InvalidMessageError, match="inside a compressed wrapper"):
        list(iter_messages(wrapper(corrupt_crc(encode_entry(b"bad-inner")))))
    with pytest.raises(InvalidMessageError, match="unknown compression codec 3"):
        list(iter_messages(bytes.fromhex("00000006") + b"\x01\x03" + struct.pack(">I", crc32(b""))))
    with pytest.raises(InvalidMessageError, match="ends inside an entry"):
        list(iter_messages(wrapper(encode_entry(b"a")[:-1])))
