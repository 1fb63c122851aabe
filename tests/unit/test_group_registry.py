"""Unit tests for the consumer-registry codecs (spec §8.1, §8.3) and the Java regex subset.

Expected Java results (regex matches, ``Long.toHexString``) were produced once
with OpenJDK 17 and are written here as literals.
"""

import re
import socket
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.group.javaregex import JavaRegexError, compile_java_regex, translate_java_regex
from trikafka.zk.paths import consumer_offset
from trikafka.group.registry import (
    RegistryValueError,
    StaticTopicCount,
    TopicFilter,
    WildcardTopicCount,
    blacklist,
    decode_offset,
    decode_owner,
    decode_topic_count,
    encode_offset,
    encode_owner,
    new_consumer_id,
    normalize_topic_filter,
    parse_partition_name,
    partition_name,
    thread_ids,
    uuid_hex8,
    whitelist,
)


def _uuid_with_msb(msb: int) -> uuid.UUID:
    return uuid.UUID(int=(msb << 64) | 0x1122334455667788)


# ---------------------------------------------------------------- consumer ids


def test_consumer_id_exact_format():
    cid = new_consumer_id(
        "mygroup", hostname="web01", clock_ms=lambda: 1349990000123,
        uuid_factory=lambda: _uuid_with_msb(0x5F3A2B1C12345678),
    )
    assert cid == "mygroup_web01-1349990000123-5f3a2b1c"


@pytest.mark.parametrize(
    "msb, expected",
    [
        (0x5F3A2B1C12345678, "5f3a2b1c"),
        (0x0ABCDEF012345678, "abcdef01"),  # Java drops the leading zero digit first
        (0xFFFFFFFFFFFFFFFF, "ffffffff"),  # toHexString is unsigned
        (0x8000000000004000, "80000000"),
        (0x4ABC, "00004abc"),  # shorter than 8 digits: Java throws, we pad [T]
    ],
)
def test_uuid_hex8(msb, expected):
    assert uuid_hex8(_uuid_with_msb(msb)) == expected


def test_consumer_id_override_and_defaults(monkeypatch):
    assert new_consumer_id("g", consumer_id="test1") == "g_test1"
    monkeypatch.setattr(socket, "gethostname", lambda: "box")
    cid = new_consumer_id("g")
    assert re.fullmatch(r"g_box-[0-9]{13,}-[0-9a-f]{8}", cid)
    assert new_consumer_id("g") != cid  # a fresh random UUID each time


@pytest.mark.parametrize("group", ["", "a/b", ".", "..", "bad\x00", "x\ud800"])
def test_consumer_id_rejects_bad_group_ids(group):
    with pytest.raises(RegistryValueError):
        new_consumer_id(group, consumer_id="c")


def test_consumer_id_rejects_bad_override_and_hostname():
    with pytest.raises(RegistryValueError, match="consumer id"):
        new_consumer_id("g", consumer_id="a/b")
    with pytest.raises(RegistryValueError):
        new_consumer_id("g", hostname="h/x", clock_ms=lambda: 1)


def test_thread_ids():
    assert thread_ids("g_c", 3) == ["g_c-0", "g_c-1", "g_c-2"]
    assert thread_ids("g_c", 0) == []


# ---------------------------------------------------------------- partition names


def test_partition_names_round_trip():
    assert partition_name(3, 10) == "3-10"
    assert parse_partition_name("3-10") == (3, 10)
    assert parse_partition_name("0-0") == (0, 0)
    with pytest.raises(RegistryValueError):
        partition_name(-1, 0)


def test_replicated_partitions_are_named_by_number_alone():
    # docs/protocol.md §12.9: a replicated partition has no fixed broker.
    assert partition_name(None, 7) == "7"
    assert parse_partition_name("7") == (None, 7)
    assert parse_partition_name("0") == (None, 0)
    assert consumer_offset("g", "t", None, 12) == "/consumers/g/offsets/t/12"
    with pytest.raises(RegistryValueError):
        parse_partition_name("07")


@pytest.mark.parametrize("name", ["", "3-", "-1-0", "1-2-3", "a-0", "1-0 ", "1-2147483648", "١-0"])
def test_parse_partition_name_rejects(name):
    with pytest.raises(RegistryValueError):
        parse_partition_name(name)


# ---------------------------------------------------------------- static topic counts


@pytest.mark.parametrize(
    "counts, expected",
    [
        ({"t1": 2, "t2": 1}, b'{ "t1": 2,"t2": 1 }'),
        ({"mytopic": 1}, b'{ "mytopic": 1 }'),
        ({}, b"{  }"),
    ],
)
def test_static_encode_exact_bytes(counts, expected):
    assert StaticTopicCount(counts).encode() == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        (b'{ "t1": 2,"t2": 1 }', {"t1": 2, "t2": 1}),
        (b'{"topic": 1}', {"topic": 1}),  # brod's json.dumps form
        (b' {\n "a.b-c_d" : 12 } ', {"a.b-c_d": 12}),
        (b"{}", {}),
        (b'{"t": 0, "u": -3}', {"t": 0, "u": -3}),
        ('{"caf\u00e9": 1}'.encode(), {"caf\u00e9": 1}),
    ],
)
def test_static_decode(data, expected):
    decoded = decode_topic_count(data)
    assert isinstance(decoded, StaticTopicCount)
    assert dict(decoded.counts) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"mytopic",  # samsa's bare topic name
        b"",
        b"[1]",
        b"5",
        b'{"t": 1.0}',
        b'{"t": 1e2}',
        b'{"t": "1"}',
        b'{"t": true}',
        b'{"t": null}',
        b'{"t": {"x": 1}}',
        b'{"t": 2147483648}',
        b'{"t": NaN}',
        b'{"t": 1',
        b'{"t\xff": 1}',
    ],
)
def test_static_decode_rejects(data):
    with pytest.raises(RegistryValueError):
        decode_topic_count(data)


def test_nonpositive_stream_counts_decode_but_give_no_threads_and_cannot_be_written():
    tc = decode_topic_count(b'{"t": 0, "u": 2}')
    assert tc.thread_ids_per_topic("g_c", []) == {"t": [], "u": ["g_c-0", "g_c-1"]}
    with pytest.raises(RegistryValueError, match=">= 1"):
        tc.encode()
    with pytest.raises(RegistryValueError):
        StaticTopicCount({"": 1}).encode()


def test_static_ignores_broker_topics_and_is_immutable():
    tc = StaticTopicCount({"a": 1, "b": 2})
    assert tc.streams_per_topic(["x"]) == {"a": 1, "b": 2}
    with pytest.raises(TypeError):
        tc.counts["a"] = 5  # type: ignore[index]
    assert tc == StaticTopicCount({"a": 1, "b": 2}) and hash(tc) == hash(StaticTopicCount({"a": 1, "b": 2}))
    with pytest.raises(RegistryValueError):
        StaticTopicCount({"a": True})
    with pytest.raises(RegistryValueError):
        StaticTopicCount({1: 1})  # type: ignore[dict-item]


@given(st.dictionaries(st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True), st.integers(1, 2**31 - 1)))
def test_static_round_trip(counts):
    encoded = StaticTopicCount(counts).encode()
    assert dict(decode_topic_count(encoded).counts) == counts
    assert encoded.startswith(b"{ ") and encoded.endswith(b" }")


# ---------------------------------------------------------------- wildcard topic counts


def test_wildcard_encode_exact_bytes():
    assert WildcardTopicCount(whitelist("foo.*"), 4).encode() == b"*4*foo.*"
    assert WildcardTopicCount(blacklist("bar, baz"), 2).encode() == b"!2!bar|baz"
    with pytest.raises(RegistryValueError):
        WildcardTopicCount(whitelist("x"), 0).encode()


def test_wildcard_decode_and_expand():
    topics = ["foo", "foobar", "xfoo", "bar"]
    white = decode_topic_count(b"*4*foo.*")
    assert white == WildcardTopicCount(TopicFilter("foo.*", True), 4)
    assert white.streams_per_topic(topics) == {"foo": 4, "foobar": 4}
    assert white.thread_ids_per_topic("g_c", ["foo"]) == {"foo": ["g_c-0", "g_c-1", "g_c-2", "g_c-3"]}
    black = decode_topic_count(b"!1!foo.*")
    assert black.streams_per_topic(topics) == {"xfoo": 1, "bar": 1}
    assert decode_topic_count(b"*007*a").num_streams == 7
    assert decode_topic_count(b"*1*").streams_per_topic(["a", ""]) == {"": 1}


def test_wildcard_decode_renormalizes_like_kafka():
    assert decode_topic_count(b"*1* 'a, b' ").topic_filter.regex == "a|b"


@pytest.mark.parametrize(
    "data", [b"*4!x", b"*x*foo", b"**foo", b"*-1*a", b"*99999999999*a", b"*4*a\nb", b"!1!a\rb", b"*4*[", b"*4*[a&&[b]]"]
)
def test_wildcard_decode_rejects(data):
    with pytest.raises(RegistryValueError):
        decode_topic_count(data)


# ---------------------------------------------------------------- topic filters


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("foo.*", "foo.*"),
        ('  "foo, bar"  ', "foo|bar"),
        ("'a'", "a"),
        ("\t'x'\n", "x"),
        ("\"'q'\"", "q"),
        ("a b", "ab"),
        ('"', ""),
        ("\u00a0a", "\u00a0a"),  # Java's trim only strips chars <= U+0020
        ("'\tb", "\tb"),  # quotes are stripped after the trim
    ],
)
def test_normalize_topic_filter(raw, expected):
    assert normalize_topic_filter(raw) == expected


def test_filters_match_whole_names():
    f = whitelist("foo")
    assert f.allows("foo") and not f.allows("foobar") and not f.allows("xfoo")
    assert not blacklist("foo").allows("foo") and blacklist("foo").allows("foobar")
    assert whitelist("a,b").allows("b") and not whitelist("a,b").allows("ab")


def test_invalid_filter_regex_is_a_clear_error():
    with pytest.raises(RegistryValueError, match="invalid regex"):
        whitelist("foo(")


# Each row was checked with Java's String.matches (OpenJDK 17).
JAVA_MATCHES = [
    (r"foo.*", "foobar", True),
    (r"foo.*", "xfoo", False),
    (r"a|b", "a", True),
    (r"a|b", "ab", False),
    (r"\p{Alnum}+", "abc123", True),
    (r"\p{Alnum}+", "a-b", False),
    (r"[\p{Digit}x]+", "1x2", True),
    (r"\Qa.b\E", "a.b", True),
    (r"\Qa.b\E", "axb", False),
    (r"(?i)ABC", "abc", True),
    (r"(?i:a)b", "AB", False),
    (r"(?i:a)b", "Ab", True),
    (r"\x41\u0042\0103", "ABC", True),
    (r"t\d+", "t12", True),
    (r"[^\]a]+", "bc", True),
    (r"a++b", "aab", True),
    (r"(?<n>a)\k<n>", "aa", True),
    (r"\P{Digit}+", "ab", True),
    (r"\P{Digit}+", "a1", False),
    (r"\p{Punct}+", "!-/@[`{~", True),
    (r"\p{Punct}", "a", False),
    (r"\w+", "\u00e9", False),  # ASCII \w, as in Java
    (r"a\z", "a", True),
    (r"a\Z", "a", True),
    (r"x{2}", "xx", True),
]


@pytest.mark.parametrize("pattern, topic, expected", JAVA_MATCHES)
def test_java_regex_matches_like_java(pattern, topic, expected):
    assert (compile_java_regex(pattern).fullmatch(topic) is not None) is expected


@pytest.mark.parametrize(
    "pattern",
    [r"[a-c&&[b]]", r"[a[b]]", r"a(?i)b", r"(?-i)a", r"(?x)a", r"\G", r"\R", r"\h", r"\p{L}", r"\pL",
     r"[\P{Digit}]", r"\y", "a\\", "[ab", r"(?P<x>a)", r"[\b]", r"\x{110000}", r"\u12", "a("],
)
def test_java_regex_rejects_what_it_cannot_translate(pattern):
    with pytest.raises(JavaRegexError):
        compile_java_regex(pattern)


def test_java_regex_translations():
    assert translate_java_regex(r"\p{Alpha}\P{Digit}") == "[a-zA-Z][^0-9]"
    assert translate_java_regex(r"\Qa.b\E.") == r"a\.b."
    assert translate_java_regex(r"[\Q]-\E]") == r"[\]\-]"
    assert translate_java_regex(r"(?<g>x)\k<g>") == "(?P<g>x)(?P=g)"
    assert translate_java_regex(r"\e\cA") == r"\x1b\U00000001"
    assert compile_java_regex(r"a\Z").fullmatch("a\n") is None  # fullmatch must consume all


# ---------------------------------------------------------------- offsets and owners


@pytest.mark.parametrize("offset, expected", [(0, b"0"), (1234, b"1234"), (2**63 - 1, b"9223372036854775807")])
def test_encode_offset(offset, expected):
    assert encode_offset(offset) == expected
    assert decode_offset(expected) == offset


@pytest.mark.parametrize("offset", [-1, 2**63, True, 1.0, "5"])
def test_encode_offset_rejects(offset):
    with pytest.raises(RegistryValueError):
        encode_offset(offset)


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"123", 123),
        (b"+5", 5),  # Long.parseLong accepts a plus sign
        (b"007", 7),
        (b"", None),  # samsa's empty node
        (b"abc", None),
        (b" 1", None),
        (b"1\n", None),
        (b"1.5", None),
        (b"-1", None),
        (b"9223372036854775808", None),
        (b"\xff", None),
        (bytearray(b"42"), 42),
    ],
)
def test_decode_offset(data, expected):
    assert decode_offset(data) == expected


def test_owner_values():
    assert encode_owner("mygroup_web01-1349990000123-5f3a2b1c-0") == b"mygroup_web01-1349990000123-5f3a2b1c-0"
    assert decode_owner(b"g_c-1") == "g_c-1"
    assert decode_owner("g_\u00e9-0".encode()) == "g_\u00e9-0"
    with pytest.raises(RegistryValueError):
        encode_owner("")
    with pytest.raises(RegistryValueError, match="UTF-8"):
        decode_owner(b"\xff\xfe")
