"""Keyed messages and padding entries of compacted topics (docs/protocol.md §11.2-§11.3).

A keyed message is a magic-1 message with the KEYED attribute bit; its payload is
``key_length:int32, key, value``.  0.7 readers look only at the codec bits, so to
them it is an ordinary message.  A padding entry is a gzip wrapper (with the
PADDING bit) holding an empty message set, followed by zeros up to the entry's
exact length: the cleaner covers removed byte ranges with them, so offsets
never move.
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple

from .compression import Codec, compress, decompress
from .crc import crc32, crc32_zero_extend
from .errors import InvalidMessageError, LocalProtocolError
from .message import MAGIC_1
from .reading import parse_entries

from .keys import KEYED, TOMBSTONE, split_key
PADDING = 0x10
# The gzip member of the empty string, fixed (mtime 0, no flags, OS 3 = Unix):
# header (10), an empty final fixed-Huffman block (03 00), CRC32 0 and ISIZE 0.
EMPTY_GZIP_MEMBER = bytes.fromhex("1f8b0800000000000003" "0300" "00000000" "00000000")
PADDING_ATTRIBUTES = Codec.GZIP | PADDING
_PADDING_HEADER = struct.Struct(">ibBI")  # N, magic, attributes, crc
# Smallest padding entry: prefix 4 + header 6 + the gzip member.
MIN_PADDING_ENTRY_BYTES = 4 + 6 + len(EMPTY_GZIP_MEMBER)
# Bytes of a padding entry's head that are written (the rest is zeros, left as a hole).
PADDING_HEAD_BYTES = MIN_PADDING_ENTRY_BYTES
_INT32 = struct.Struct(">i")


class KeyedMessage(NamedTuple):
    """A consumed message with its key apart (``key`` is None for an unkeyed message)."""

    offset: int
    next_offset: int
    key: bytes | None
    value: bytes
    tombstone: bool


def keyed_payload(key: bytes, value: bytes | None) -> bytes:
    """The payload of a keyed message: ``key_length:int32, key, value`` (None = tombstone)."""
    return _INT32.pack(len(key)) + key + (value or b"")


def keyed_attributes(value: bytes | None, codec: int = Codec.NONE) -> int:
    """Attributes of a keyed message (TOMBSTONE when ``value`` is None)."""
    return codec | KEYED | (TOMBSTONE if value is None else 0)


def encode_keyed_entry(key: bytes, value: bytes | None) -> bytes:
    """One uncompressed keyed entry (``N`` + message); ``value=None`` writes a tombstone."""
    if not isinstance(key, (bytes, bytearray)):
        raise LocalProtocolError(f"a key must be bytes, not {type(key).__name__}")
    payload = keyed_payload(bytes(key), value)
    return _PADDING_HEADER.pack(6 + len(payload), MAGIC_1, keyed_attributes(value), crc32(payload)) + payload


class KeyedPayload(bytes):
    """A keyed message's payload that carries its attributes byte (KEYED, maybe TOMBSTONE),
    so encoders that take payloads write the right attributes."""

    attributes: int

    def __new__(cls, key: bytes, value: bytes | None) -> "KeyedPayload":
        self = super().__new__(cls, keyed_payload(key, value))
        self.attributes = keyed_attributes(value)
        return self


def build_keyed_set(items: Iterable[tuple[bytes, bytes | None]], codec: int = Codec.NONE) -> bytes:
    """A message set of keyed messages; with a codec, one wrapper whose inner messages carry the keys."""
    inner = b"".join(encode_keyed_entry(k, v) for k, v in items)
    if codec == Codec.NONE or not inner:
        return inner
    payload = compress(Codec(codec), inner)
    return _PADDING_HEADER.pack(6 + len(payload), MAGIC_1, codec, crc32(payload)) + payload


# -- padding ---------------------------------------------------------------------------


def padding_head(entry_bytes: int) -> bytes:
    """The written head of a padding entry of ``entry_bytes`` in all (the rest is zeros).

    The CRC covers the gzip member and the zeros, computed without materializing them.
    """
    if entry_bytes < MIN_PADDING_ENTRY_BYTES:
        raise LocalProtocolError(f"a padding entry needs at least {MIN_PADDING_ENTRY_BYTES} bytes, got {entry_bytes}")
    zeros = entry_bytes - MIN_PADDING_ENTRY_BYTES
    crc = crc32_zero_extend(crc32(EMPTY_GZIP_MEMBER), zeros)
    return _PADDING_HEADER.pack(entry_bytes - 4, MAGIC_1, PADDING_ATTRIBUTES, crc) + EMPTY_GZIP_MEMBER


def padding_entry(entry_bytes: int) -> bytes:
    """A whole padding entry, zeros included (tests and small synthesized runs)."""
    return padding_head(entry_bytes) + bytes(entry_bytes - MIN_PADDING_ENTRY_BYTES)


def short_padding_entry(entry_bytes: int) -> bytes:
    """A padding *message* of 10 to 29 bytes: magic 1, codec none, the PADDING bit, zeros.

    Only synthesized for a fetch at an offset too close to a run's end for a gzip
    padding entry (docs/protocol.md §11.3.2); never written to disk.  A 0.7
    reader sees one empty-looking message; trikafka's keyed readers skip it.
    """
    if not 10 <= entry_bytes < MIN_PADDING_ENTRY_BYTES:
        raise LocalProtocolError(f"a short padding entry has 10 to 29 bytes, not {entry_bytes}")
    payload = bytes(entry_bytes - 10)
    return _PADDING_HEADER.pack(entry_bytes - 4, MAGIC_1, PADDING, crc32(payload)) + payload


def is_padding_head(head: bytes | memoryview) -> bool:
    """Whether the first ``PADDING_HEAD_BYTES`` of an entry are a padding entry's head."""
    if len(head) < PADDING_HEAD_BYTES:
        return False
    n, magic, attributes, _ = _PADDING_HEADER.unpack_from(head, 0)
    return (magic == MAGIC_1 and attributes == PADDING_ATTRIBUTES and n >= PADDING_HEAD_BYTES - 4
            and bytes(head[10:PADDING_HEAD_BYTES]) == EMPTY_GZIP_MEMBER)


def split_run(run_bytes: int, max_entry_bytes: int) -> list[int]:
    """Sizes of the padding entries covering a run: near-equal, each in [30, max_entry_bytes]."""
    if run_bytes < MIN_PADDING_ENTRY_BYTES:
        raise LocalProtocolError(f"a run of {run_bytes} bytes is too short for a padding entry")
    if max_entry_bytes < 2 * MIN_PADDING_ENTRY_BYTES:
        raise LocalProtocolError(f"max padding entry of {max_entry_bytes} bytes is too small")
    count = -(-run_bytes // max_entry_bytes)
    base, extra = divmod(run_bytes, count)
    return [base + 1] * extra + [base] * (count - extra)


# -- consuming ---------------------------------------------------------------------------


def iter_keyed_messages(data: bytes | memoryview, base_offset: int = 0) -> Iterator[KeyedMessage]:
    """Deep, CRC-checked iteration with keys apart, with 0.7's offset rule (spec §4).

    The complete entries of ``data`` only, like ``iter_messages``; padding and other
    empty wrappers yield nothing.
    """
    parsed = parse_entries(data, base_offset)
    for entry in parsed.entries:
        msg = entry.message
        if not msg.is_valid:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {entry.offset}")
        if msg.codec == Codec.NONE:
            if msg.magic == MAGIC_1 and msg.attributes & PADDING:
                continue  # a synthesized short padding message
            key, value = split_key(msg.payload, msg.attributes if msg.magic == MAGIC_1 else 0)
            yield KeyedMessage(entry.offset, entry.next_offset, key, value,
                               bool(key is not None and msg.attributes & TOMBSTONE))
            continue
        inner = list(_inner_keyed(msg.codec, msg.payload))
        for i, (key, value, tombstone) in enumerate(inner):
            next_offset = entry.next_offset if i == len(inner) - 1 else entry.offset
            yield KeyedMessage(entry.offset, next_offset, key, value, tombstone)


def inner_messages(codec: int, payload: bytes) -> list[tuple[int, int, bytes]]:
    """``(magic, attributes, payload)`` of each message inside a wrapper (one level, CRC-checked)."""
    parsed = parse_entries(decompress(codec, payload))
    if parsed.truncated:
        raise InvalidMessageError("compressed wrapper ends inside an entry")
    out = []
    for entry in parsed.entries:
        if not entry.message.is_valid:
            raise InvalidMessageError("CRC mismatch inside a compressed wrapper")
        if entry.message.codec != Codec.NONE:
            raise InvalidMessageError("nested compressed wrappers are not read here")
        out.append((entry.message.magic, entry.message.attributes, entry.message.payload))
    return out


def _inner_keyed(codec: int, payload: bytes) -> Iterator[tuple[bytes | None, bytes, bool]]:
    for magic, attributes, inner in inner_messages(codec, payload):
        attributes = attributes if magic == MAGIC_1 else 0
        key, value = split_key(inner, attributes)
        yield key, value, bool(key is not None and attributes & TOMBSTONE)

