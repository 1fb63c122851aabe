"""The compression of a v2 batch's records (docs/protocol.md §16.6: ``attributes`` bits 0-2).

* gzip and snappy are the bytes 0.7 wrappers carry too, so they are
  ``trikafka.wire.compression``'s codecs: gzip as RFC 1952, snappy as the
  snappy-java stream ("xerial" framing) that Java producers write, read
  also as one raw snappy block (what librdkafka writes);
* lz4 is the LZ4 frame format with independent blocks (Kafka reads no
  linked blocks); zstd a zstd frame; both through cramjam.

Every decompression is bounded by ``wire.compression.MAX_DECOMPRESSED_BYTES``
(one bound for both protocols), so a hostile batch cannot make a reader
allocate more.
"""

from __future__ import annotations

import enum
from typing import Callable

import cramjam

from trikafka.wire import compression as wire_compression
from trikafka.wire.errors import InvalidMessageError

from .errors import CorruptRecords

# The first output buffer for lz4 and zstd, as a multiple of the compressed size; it doubles
# (up to the bound) while the output does not fit.
_FIRST_GUESS_RATIO = 8
_FIRST_GUESS_MIN_BYTES = 64 * 1024
# cramjam's message when the output buffer is full (Rust's io::ErrorKind::WriteZero); any other
# failure is corrupt input.  tests/unit/test_kafka_records.py decompresses past the first guess.
_OUTPUT_FULL = "failed to write whole buffer"

Buffer = bytes | bytearray | memoryview


class Compression(enum.IntEnum):
    """The codec of a batch's records, from ``attributes & 0x07``."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(codec: int, data: Buffer) -> bytes:
    """``data`` compressed as a Java producer would for ``codec`` (NONE: unchanged)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec in (Compression.GZIP, Compression.SNAPPY):
        return wire_compression.compress(wire_compression.Codec(codec), bytes(data))
    if codec == Compression.LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression {codec}")


def decompress(codec: int, data: Buffer) -> memoryview:
    """The records region of a batch compressed with ``codec``, as a read-only view.

    Raises ``CorruptRecords`` when it does not decompress or would exceed the bound.
    """
    if codec == Compression.NONE:
        return memoryview(bytes(data)).toreadonly()
    if codec in (Compression.GZIP, Compression.SNAPPY):
        try:
            return memoryview(wire_compression.decompress(codec, bytes(data))).toreadonly()
        except InvalidMessageError as exc:
            raise CorruptRecords(f"{Compression(codec).name.lower()}: {exc}") from None
    if codec == Compression.LZ4:
        return _bounded(cramjam.lz4.decompress_into, "lz4", data)
    if codec == Compression.ZSTD:
        return _bounded(cramjam.zstd.decompress_into, "zstd", data)
    raise CorruptRecords(f"unknown compression {codec}")


def _bounded(decompress_into: Callable[[Buffer, bytearray], int], name: str, data: Buffer) -> memoryview:
    """Decompress into buffers that double from a guess up to the bound; the output, read-only.

    Only an output that does not fit grows the buffer (cramjam stops writing
    when it is full); corrupt input fails at once, so garbage never costs a
    buffer of the bound.
    """
    bound = wire_compression.MAX_DECOMPRESSED_BYTES
    size = min(bound, max(_FIRST_GUESS_MIN_BYTES, _FIRST_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except Exception as exc:  # cramjam raises DecompressionError, for corrupt input and a full output alike
            if _OUTPUT_FULL not in str(exc):
                raise CorruptRecords(f"{name}: {exc}") from None
            if size >= bound:
                raise CorruptRecords(f"{name}: expands beyond {bound} bytes") from None
            size = min(bound, 2 * size)
            continue
        return memoryview(out)[:written].toreadonly()
