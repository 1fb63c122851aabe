"""Compression (docs/protocol.md §3.3): gzip streams, the snappy-java 1.0.4.1 stream format,
and the headerless raw snappy block that 0.7.2 also reads."""

import gzip
import os
import struct

import cramjam
import pytest

from trikafka.wire import (
    Codec,
    InvalidMessageError,
    build_message_set,
    compress,
    decompress,
    encode_entry,
    iter_messages,
    validate_message_set,
)
from trikafka.wire import compression

SNAPPY_MAGIC = bytes.fromhex("82 53 4E 41 50 50 59 00")


def snappy_blocks(stream: bytes) -> list[bytes]:
    pos, blocks = 16, []
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        blocks.append(stream[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert pos == len(stream)
    return blocks


@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 100 * 1024])
def test_snappy_java_header_and_blocks(size):
    data = os.urandom(size // 2) + b"a" * (size - size // 2)
    stream = compress(Codec.SNAPPY, data)
    assert stream[:8] == SNAPPY_MAGIC
    assert struct.unpack_from(">ii", stream, 8) == (1, 1)  # version 1, min compatible 1
    blocks = snappy_blocks(stream)
    assert len(blocks) == -(-size // (32 * 1024))  # one block per 32 KiB of input
    # each block is independent raw snappy; concatenated outputs give the data
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data
    assert decompress(Codec.SNAPPY, stream) == data


def test_snappy_reader_does_not_depend_on_block_size():
    data = os.urandom(5000) + b"z" * 70000
    cuts = [0, 1, 777, 40000, 75000]
    stream = SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    for a, b in zip(cuts, cuts[1:]):
        block = bytes(cramjam.snappy.compress_raw(data[a:b]))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(Codec.SNAPPY, stream) == data


@pytest.mark.parametrize("data", [b"hello", b"x" * 100_000, os.urandom(70_000), b"\x82SNAPPY\x00 but raw"])
def test_snappy_reader_accepts_one_raw_block_without_the_header(data):
    """Kafka 0.7.2 (through snappy-java 1.0.4.1) reads a headerless payload as one raw block."""
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert raw[:8] != SNAPPY_MAGIC
    assert decompress(Codec.SNAPPY, raw) == data
    assert compress(Codec.SNAPPY, data).startswith(SNAPPY_MAGIC)  # writers keep the stream format


def test_a_raw_snappy_wrapper_is_a_valid_message_set():
    inner = build_message_set([b"one", b"two"], magic=1)
    raw = bytes(cramjam.snappy.compress_raw(inner))
    wrapper = encode_entry(raw, magic=1, codec=Codec.SNAPPY)
    assert [m.payload for m in iter_messages(wrapper)] == [b"one", b"two"]
    assert validate_message_set(wrapper).valid_bytes == len(wrapper)


def test_a_raw_snappy_block_that_claims_too_much_is_refused():
    # A raw block's preamble states its output length; refused before decompressing.
    huge = bytes([0x80, 0x80, 0x80, 0x80, 0x0F]) + b"\x00" * 8
    with pytest.raises(InvalidMessageError, match="beyond the decompression bound|does not decompress"):
        decompress(Codec.SNAPPY, huge)


@pytest.mark.parametrize("stream, match", [
    (b"", "does not decompress"),
    (b"\x82SNAPPX\x00" + struct.pack(">ii", 1, 1), "does not decompress"),
    (b"\xff\xff\xff\xff\xff\x00junk", "does not decompress"),
    (SNAPPY_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00", "length is truncated"),
    (SNAPPY_MAGIC + struct.pack(">iii", 1, 1, 50) + b"abc", "runs past the payload"),
    (SNAPPY_MAGIC + struct.pack(">iii", 1, 1, -1), "runs past the payload"),
    (SNAPPY_MAGIC + struct.pack(">iii", 1, 1, 4) + b"\xff\xff\xff\xff", "does not decompress"),
])
def test_snappy_malformed(stream, match):
    with pytest.raises(InvalidMessageError, match=match):
        decompress(Codec.SNAPPY, stream)


@pytest.mark.parametrize("data", [b"", b"hello", os.urandom(200_000)])
def test_gzip_round_trip_is_standard_gzip(data):
    stream = compress(Codec.GZIP, data)
    assert stream[:2] == b"\x1f\x8b"
    assert gzip.decompress(stream) == data
    assert decompress(Codec.GZIP, stream) == data


def test_gzip_reads_multiple_members_and_zero_padding():
    stream = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Codec.GZIP, stream) == b"first second"
    assert decompress(Codec.GZIP, gzip.compress(b"x") + b"\x00\x00\x00") == b"x"


@pytest.mark.parametrize("stream, match", [
    (b"", "empty gzip payload"),
    (b"not gzip at all", "does not decompress"),
    (gzip.compress(b"abcdef" * 100)[:-10], "truncated"),
])
def test_gzip_malformed(stream, match):
    with pytest.raises(InvalidMessageError, match=match):
        decompress(Codec.GZIP, stream)


def test_decompression_bound(monkeypatch):
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 1000)
    with pytest.raises(InvalidMessageError, match="beyond the decompression bound"):
        decompress(Codec.GZIP, gzip.compress(b"\x00" * 5000))
    with pytest.raises(InvalidMessageError, match="beyond the decompression bound"):
        decompress(Codec.SNAPPY, compress(Codec.SNAPPY, b"\x00" * 5000))
    assert decompress(Codec.GZIP, gzip.compress(b"\x00" * 1000)) == b"\x00" * 1000


def test_unknown_codecs():
    with pytest.raises(InvalidMessageError, match="unknown compression codec 3"):
        decompress(3, b"x")
    with pytest.raises(ValueError):
        compress(Codec.NONE, b"x")
