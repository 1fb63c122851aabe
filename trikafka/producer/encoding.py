"""Message sets as the producer builds them: lean, with per-message offsets on demand.

``build_message_set`` in ``trikafka.wire`` is general; this is the hot path
of the producer, where a batch of payloads becomes one part.  Magic 1 only
(what 0.7 producers write).  A compressed part is one wrapper, or several when
one would exceed ``max.message.size`` (a wrapper's payload is a message as
far as the broker's size check goes, docs/protocol.md §5.1 step 4).
"""

from __future__ import annotations

import gzip
import struct
from typing import Sequence, cast

from trikafka.wire import Codec, compress, crc32
from trikafka.wire.keyed import KeyedPayload

_MAGIC1_HEADER = struct.Struct(">ibBI").pack  # N, magic, attributes, crc
ENTRY_OVERHEAD_BYTES = 10  # 4 (N) + 1 (magic) + 1 (attributes) + 4 (crc)


def encode_plain(payloads: Sequence[bytes]) -> bytes:
    """Uncompressed magic-1 entries, one per payload (the producer's hot loop).

    A ``wire.keyed.KeyedPayload`` brings its own attributes (KEYED, TOMBSTONE).
    """
    pack = _MAGIC1_HEADER
    out: list[bytes] = []
    append = out.append
    for p in payloads:
        append(pack(len(p) + 6, 1, 0 if type(p) is bytes else cast(KeyedPayload, p).attributes, crc32(p)))
        append(p)
    return b"".join(out)


DEFAULT_GZIP_LEVEL = 6  # what trikafka.wire.compress and Java's GZIPOutputStream use


def _compress(codec: Codec, data: bytes, gzip_level: int) -> bytes:
    if codec == Codec.GZIP and gzip_level != DEFAULT_GZIP_LEVEL:
        # Same stream format, another speed/size trade-off (level 1 is ~3x faster here
        # for ~4% more bytes on log-like messages; bench/producer_bench.py).
        return gzip.compress(data, compresslevel=gzip_level, mtime=0)
    return compress(codec, data)


def _wrapper(codec: Codec, payloads: Sequence[bytes], gzip_level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    compressed = _compress(codec, encode_plain(payloads), gzip_level)
    return _MAGIC1_HEADER(len(compressed) + 6, 1, int(codec), crc32(compressed)) + compressed


class EncodedPart:
    """One part's message set and how its messages map onto entries.

    ``wrapper_counts`` is ``None`` for an uncompressed set, else how many
    messages each wrapper holds, in order.
    """

    __slots__ = ("data", "wrapper_counts")

    def __init__(self, data: bytes, wrapper_counts: list[int] | None) -> None:
        self.data = data
        self.wrapper_counts = wrapper_counts

    def message_offsets(self, payloads: Sequence[bytes], base_offset: int) -> list[tuple[int, int]]:
        """``(offset, next_offset)`` of every message once the set landed at ``base_offset``.

        Inner messages of a wrapper all report the wrapper's entry (docs/protocol.md §4).
        """
        result: list[tuple[int, int]] = []
        pos = base_offset
        if self.wrapper_counts is None:
            for p in payloads:
                end = pos + ENTRY_OVERHEAD_BYTES + len(p)
                result.append((pos, end))
                pos = end
            return result
        data, rel = self.data, 0
        for count in self.wrapper_counts:
            size = 4 + int.from_bytes(data[rel:rel + 4], "big")
            result.extend([(pos, pos + size)] * count)
            pos += size
            rel += size
        return result


def encode_part(payloads: Sequence[bytes], codec: Codec, max_message_size: int,
                gzip_level: int = DEFAULT_GZIP_LEVEL) -> EncodedPart:
    """The message set for one part; compressed wrappers split to fit ``max_message_size``."""
    if codec == Codec.NONE:
        return EncodedPart(encode_plain(payloads), None)
    wrappers: list[bytes] = []
    counts: list[int] = []
    _encode_wrappers(codec, list(payloads), max_message_size, gzip_level, wrappers, counts)
    return EncodedPart(b"".join(wrappers), counts)


def _encode_wrappers(codec: Codec, payloads: list[bytes], max_message_size: int, gzip_level: int,
                     wrappers: list[bytes], counts: list[int]) -> None:
    entry = _wrapper(codec, payloads, gzip_level)
    # The wrapper's payload is what the broker measures against max.message.size.
    if len(entry) - ENTRY_OVERHEAD_BYTES <= max_message_size or len(payloads) == 1:
        wrappers.append(entry)
        counts.append(len(payloads))
        return
    half = len(payloads) // 2
    _encode_wrappers(codec, payloads[:half], max_message_size, gzip_level, wrappers, counts)
    _encode_wrappers(codec, payloads[half:], max_message_size, gzip_level, wrappers, counts)
