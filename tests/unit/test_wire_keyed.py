"""Keyed messages and padding entries (docs/protocol.md §11.2-§11.3).

Padding relies on gzip readers stopping at the end of the member and ignoring the
zeros after it.  Python's readers are checked here.  Java 17's
``java.util.zip.GZIPInputStream`` was checked by hand with a small program reading
the same bytes (the empty member plus 0, 1, 2, 7, 26, 27, 100, 5000 and 999,970
zeros), over a stream whose ``available()`` is 0 as Kafka 0.7's
``ByteBufferBackedInputStream`` and over a ``ByteArrayInputStream``: every read
returned end of stream after 0 bytes (``readTrailer`` treats the failed header of
a next member as the end).
"""

from __future__ import annotations

import gzip
import io
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.wire import InvalidMessageError, iter_messages, parse_entries, scan_valid_prefix
from trikafka.wire.columns import decode_set
from trikafka.wire.compression import Codec, decompress
from trikafka.wire.crc import crc32_zero_extend
from trikafka.wire.keyed import (
    EMPTY_GZIP_MEMBER,
    MIN_PADDING_ENTRY_BYTES,
    build_keyed_set,
    encode_keyed_entry,
    is_padding_head,
    iter_keyed_messages,
    padding_entry,
    split_key,
    split_run,
)
from trikafka.wire.message import CODEC_MASK, decode_message

ZERO_COUNTS = [0, 1, 2, 7, 26, 27, 100, 5000, 999_970]


def test_empty_gzip_member_is_what_gzip_writes_for_nothing():
    assert gzip.decompress(EMPTY_GZIP_MEMBER) == b""
    assert len(EMPTY_GZIP_MEMBER) == 20 and MIN_PADDING_ENTRY_BYTES == 30


@pytest.mark.parametrize("zeros", ZERO_COUNTS)
def test_python_gzip_readers_stop_at_the_member_and_skip_zeros(zeros):
    data = EMPTY_GZIP_MEMBER + bytes(zeros)
    assert gzip.decompress(data) == b""
    assert gzip.GzipFile(fileobj=io.BytesIO(data)).read() == b""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert d.decompress(data) == b"" and d.eof and len(d.unused_data) == zeros
    assert decompress(Codec.GZIP, data) == b""  # trikafka's own reader


def _no_run(*_args):  # a padding entry is a wrapper: decode_set never gathers a run for it
    raise AssertionError("no run expected")


@pytest.mark.parametrize("size", [30, 31, 100, 4096, 1_000_010])
def test_padding_entry_is_a_valid_empty_gzip_wrapper(size):
    entry = padding_entry(size)
    assert len(entry) == size and is_padding_head(entry[:30])
    msg = decode_message(entry[4:])
    assert msg.is_valid and msg.attributes & CODEC_MASK == Codec.GZIP  # what a 0.7 reader sees
    assert scan_valid_prefix(entry) == size  # recovery keeps it
    assert list(iter_messages(entry)) == [] and decode_set(entry, gather=_no_run).count == 0


def test_messages_around_padding_keep_their_offsets():
    a, b = encode_keyed_entry(b"k", b"first"), encode_keyed_entry(b"k", b"second")
    data = a + padding_entry(500) + b
    got = list(iter_messages(data, 1000))
    assert [(m.offset, m.next_offset) for m in got] == [(1000, 1000 + len(a)),
                                                         (1000 + len(a) + 500, 1000 + len(data))]
    assert parse_entries(data).valid_bytes == len(data)


def test_keyed_messages_split_and_tombstones():
    data = (encode_keyed_entry(b"user-1", b"bill@example.com") + encode_keyed_entry(b"user-1", None)
            + encode_keyed_entry(b"", b"empty key"))
    got = [(m.key, m.value, m.tombstone) for m in iter_keyed_messages(data)]
    assert got == [(b"user-1", b"bill@example.com", False), (b"user-1", b"", True), (b"", b"empty key", False)]
    # A 0.7 reader sees the key prefix in the payload, nothing else changes.
    assert next(iter_messages(data)).payload == b"\x00\x00\x00\x06user-1bill@example.com"


def test_keyed_messages_inside_a_wrapper_follow_the_offset_rule():
    data = build_keyed_set([(b"a", b"1"), (b"b", None)], codec=Codec.GZIP)
    got = list(iter_keyed_messages(data, 10))
    assert [(m.key, m.tombstone, m.offset, m.next_offset) for m in got] == [
        (b"a", False, 10, 10), (b"b", True, 10, 10 + len(data))]


def test_unkeyed_and_bad_keys():
    assert split_key(b"plain", 0) == (None, b"plain")
    with pytest.raises(InvalidMessageError):
        split_key(b"\x00\x00", 0x04)
    with pytest.raises(InvalidMessageError):
        split_key(b"\x00\x00\x00\x09abc", 0x04)


@given(st.binary(max_size=64), st.integers(0, 1 << 40))
def test_crc_zero_extension_matches_zlib_for_small_counts(data, zeros):
    zeros = zeros % 20_000
    assert crc32_zero_extend(zlib.crc32(data), zeros) == zlib.crc32(data + bytes(zeros))


def test_crc_zero_extension_of_a_large_count():
    n = 3_000_001
    assert crc32_zero_extend(zlib.crc32(b"x"), n) == zlib.crc32(bytes(n), zlib.crc32(b"x"))


@given(st.integers(30, 10_000_000), st.integers(60, 2_000_000))
def test_split_run_covers_the_run_with_entries_in_bounds(run, max_entry):
    sizes = split_run(run, max_entry)
    assert sum(sizes) == run
    assert all(MIN_PADDING_ENTRY_BYTES <= s <= max_entry for s in sizes)
