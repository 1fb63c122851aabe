"""Compression codecs of 0.7 wrappers (spec §3.3).

gzip is a standard RFC 1952 stream.  snappy is the *snappy-java 1.0.4.1 stream
format*: a 16-byte header (magic, version, min-compatible version) followed by
blocks of ``int32 length`` + raw snappy bytes.  Readers also accept a payload
without the header as one raw snappy block, as snappy-java (and so Kafka
0.7.2) does; writers always write the stream format (docs/protocol.md §3.3).  The raw snappy codec itself
comes from cramjam, a maintained binding; nothing here hand-codes snappy.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib

import cramjam

from .errors import InvalidMessageError


class Codec(enum.IntEnum):
    """Compression codec, from ``attributes & 0x03`` of a magic-1 message."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2


SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_JAVA_HEADER = SNAPPY_JAVA_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java writes blocks of 32 KiB of input; readers must not rely on it.
SNAPPY_BLOCK_INPUT_BYTES = 32 * 1024
# Bound on decompressed output, so a hostile wrapper cannot exhaust memory:
# a compressed wrapper can expand to at most this many bytes.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

_INT32 = struct.Struct(">i")


def compress(codec: Codec, data: bytes) -> bytes:
    """Compress ``data`` as a 0.7 producer would for ``codec``."""
    if codec == Codec.GZIP:
        # mtime=0 keeps output deterministic; Java's GZIPOutputStream also writes 0.
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == Codec.SNAPPY:
        return _snappy_java_compress(data)
    raise ValueError(f"cannot compress with codec {codec!r}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a wrapper payload; any failure is an InvalidMessageError."""
    if codec == Codec.GZIP:
        return _gunzip(bytes(data))
    if codec == Codec.SNAPPY:
        return _snappy_java_decompress(bytes(data))
    raise InvalidMessageError(f"unknown compression codec {codec}")


def _gunzip(data: bytes) -> bytes:
    # Decompress every member to end of stream, bounded in output size.
    out = bytearray()
    pos = 0
    while pos < len(data):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(data[pos:], MAX_DECOMPRESSED_BYTES - len(out) + 1)
        except zlib.error as exc:
            raise InvalidMessageError(f"gzip payload does not decompress: {exc}") from None
        if len(out) > MAX_DECOMPRESSED_BYTES:
            raise InvalidMessageError("gzip payload expands beyond the decompression bound")
        if not d.eof:
            raise InvalidMessageError("gzip payload is truncated")
        consumed = len(data) - pos - len(d.unused_data)
        pos += consumed
        if not d.unused_data.strip(b"\x00"):
            break  # trailing zero padding after the last member is tolerated
    if pos == 0:
        raise InvalidMessageError("empty gzip payload")
    return bytes(out)


def _snappy_java_compress(data: bytes) -> bytes:
    parts = [SNAPPY_JAVA_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), SNAPPY_BLOCK_INPUT_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + SNAPPY_BLOCK_INPUT_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_java_decompress(data: bytes) -> bytes:
    # snappy-java 1.0.4.1 reads a whole payload as one raw block when it is shorter
    # than the header or does not start with the magic; 0.7.2 inherits that, and
    # some third-party 0.7 producers send exactly such payloads.
    if len(data) < len(SNAPPY_JAVA_HEADER) or data[:8] != SNAPPY_JAVA_MAGIC:
        return _snappy_raw_block(data, 0)
    out = bytearray()
    pos = 16
    while pos < len(data):
        if len(data) - pos < 4:
            raise InvalidMessageError("snappy block length is truncated")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise InvalidMessageError("snappy block runs past the payload")
        out += _snappy_raw_block(data[pos:pos + length], len(out))
        pos += length
    return bytes(out)


def _snappy_raw_block(block: bytes, produced: int) -> bytes:
    """One raw snappy block, refused if it would take the output past the bound."""
    try:
        expected = cramjam.snappy.decompress_raw_len(block)
        if produced + expected > MAX_DECOMPRESSED_BYTES:
            raise InvalidMessageError("snappy payload expands beyond the decompression bound")
        return bytes(cramjam.snappy.decompress_raw(block))
    except InvalidMessageError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise InvalidMessageError(f"snappy block does not decompress: {exc}") from None
