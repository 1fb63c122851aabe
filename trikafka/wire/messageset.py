"""Message sets: plain concatenations of entries (spec §4.1, §5, §6.1, §8, §10.5).

Four readers, one per purpose, all stdlib-only and allocation-light:

* ``validate_message_set``: what the broker accepts on produce (§6.1 steps 5-8).
* ``scan_valid_prefix``: what crash recovery keeps of a segment (§10.5).
* ``parse_entries``: shallow entries of a fetched set, stopping cleanly at a
  truncated trailing entry and saying so (§8).
* ``iter_messages``: deep iteration for consumers, unpacking compressed
  wrappers with 0.7's offset rule (§5).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

from .compression import Codec, compress, decompress
from .crc import crc32
from .errors import InvalidMessageError, LocalProtocolError, MessageSizeTooLargeError
from .message import CODEC_MASK, HEADER_BYTES, MAGIC_0, MAGIC_1, Message, decode_message, encode_entry

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_LENGTH_MAGIC = struct.Struct(">iB")
_VALID_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY)
# Wrappers inside wrappers are legal to read (the Java reader recurses) but
# 0.7 never writes them; bound the depth so a hostile set cannot recurse forever.
MAX_WRAPPER_DEPTH = 4


@dataclass(frozen=True, slots=True)
class ValidatedSet:
    """Outcome of validating a produced set: append ``data[:valid_bytes]``."""

    valid_bytes: int
    message_count: int  # inner messages: a wrapper counts as its contents
    dropped_tail_bytes: int


def build_message_set(
    payloads: Iterable[bytes], *, magic: int = MAGIC_1, codec: int = Codec.NONE
) -> bytes:
    """Encode payloads as a message set, as a 0.7 producer would.

    With a codec, the whole batch becomes **one** magic-1 wrapper whose inner
    messages are magic 1, codec 0 (spec §4.4).  No payloads give an empty set,
    never an empty wrapper.
    """
    if codec == Codec.NONE:
        return b"".join(encode_entry(p, magic=magic) for p in payloads)
    if magic != MAGIC_1:
        raise LocalProtocolError("only magic-1 messages can be compressed")
    inner = b"".join(encode_entry(p, magic=MAGIC_1) for p in payloads)
    if not inner:
        return b""
    return encode_entry(compress(Codec(codec), inner), magic=MAGIC_1, codec=codec)


def validate_message_set(data: bytes | memoryview, max_message_size: int | None = None) -> ValidatedSet:
    """Check a produced set entirely before any byte of it is written.

    Raises ``MessageSizeTooLargeError`` when a top-level payload exceeds
    ``max_message_size`` (0.7.2 drops the whole set), and
    ``InvalidMessageError`` for any framing, magic, codec, CRC or compression
    fault.  A truncated entry after the first is a dropped tail, not an error.
    """
    view = memoryview(data)
    try:
        valid_bytes, count = _validate_top_level(view, max_message_size)
    except InvalidMessageError:
        # 0.7.2 applies the size rule to the whole set before it checks
        # anything else, so an oversized entry anywhere wins over a fault.
        if max_message_size is not None:
            _check_payload_sizes(view, max_message_size)
        raise
    return ValidatedSet(valid_bytes, count, len(view) - valid_bytes)


def _validate_top_level(view: memoryview, max_message_size: int | None) -> tuple[int, int]:
    # The produce hot path: one pass that checks framing, size and CRC of
    # uncompressed messages inline (no per-message call or object), and hands
    # everything else (wrappers, odd headers) to ``_validate_message``.
    limit = -1 if max_message_size is None else max_message_size
    unpack_n, unpack_crc, crc = _INT32.unpack_from, _UINT32.unpack_from, zlib.crc32
    pos, end, count = 0, len(view), 0
    while pos < end:
        if end - pos < 4:
            if pos == 0:
                raise InvalidMessageError("message set ends inside an entry's length prefix")
            break
        (n,) = unpack_n(view, pos)
        if n < 0:
            raise InvalidMessageError(f"negative entry length {n} at position {pos}")
        stop = pos + 4 + n
        if stop > end:
            if pos == 0:
                raise InvalidMessageError(f"entry at position {pos} runs past the end of the set")
            break
        magic = view[pos + 4] if n else -1
        if magic == MAGIC_0 and n >= 5:
            if limit >= 0 and n - 5 > limit:
                raise _too_large(n - 5, limit)
            if crc(view[pos + 9:stop]) != unpack_crc(view, pos + 5)[0]:
                raise InvalidMessageError("CRC mismatch")
            count += 1
        elif magic == MAGIC_1 and n >= 6 and not view[pos + 5] & CODEC_MASK:
            if limit >= 0 and n - 6 > limit:
                raise _too_large(n - 6, limit)
            if crc(view[pos + 10:stop]) != unpack_crc(view, pos + 6)[0]:
                raise InvalidMessageError("CRC mismatch")
            count += 1
        else:
            header = HEADER_BYTES.get(magic)
            if limit >= 0 and header is not None and n >= header and n - header > limit:
                raise _too_large(n - header, limit)
            count += _validate_message(view[pos + 4:stop], 0)
        pos = stop
    return pos, count


def _too_large(payload_bytes: int, max_message_size: int) -> MessageSizeTooLargeError:
    return MessageSizeTooLargeError(
        f"message payload of {payload_bytes} bytes exceeds max.message.size {max_message_size}"
    )


def _check_payload_sizes(view: memoryview, max_message_size: int) -> None:
    # A separate cheap pass, because 0.7.2 applies the size rule before it
    # walks and checks the entries; framing faults are left to that walk.
    pos, end = 0, len(view)
    while end - pos >= 4:
        (n,) = _INT32.unpack_from(view, pos)
        if n < 1 or pos + 4 + n > end:
            return
        header = HEADER_BYTES.get(view[pos + 4])
        if header is None or n < header:
            return
        if n - header > max_message_size:
            raise MessageSizeTooLargeError(
                f"message payload of {n - header} bytes exceeds max.message.size {max_message_size}"
            )
        pos += 4 + n


def _validate_entries(view: memoryview, depth: int, strict_tail: bool) -> tuple[int, int]:
    pos, end, count = 0, len(view), 0
    while pos < end:
        if end - pos < 4:
            if pos == 0 or strict_tail:
                raise InvalidMessageError("message set ends inside an entry's length prefix")
            break
        (n,) = _INT32.unpack_from(view, pos)
        if n < 0:
            raise InvalidMessageError(f"negative entry length {n} at position {pos}")
        if pos + 4 + n > end:
            if pos == 0 or strict_tail:
                raise InvalidMessageError(f"entry at position {pos} runs past the end of the set")
            break
        count += _validate_message(view[pos + 4:pos + 4 + n], depth)
        pos += 4 + n
    return pos, count


def _validate_message(msg: memoryview, depth: int) -> int:
    """Validate one message; return how many messages it counts as."""
    if len(msg) < 1:
        raise InvalidMessageError("empty message")
    magic = msg[0]
    if magic == MAGIC_0:
        if len(msg) < 5:
            raise InvalidMessageError("magic-0 message shorter than its header")
        (crc,) = _UINT32.unpack_from(msg, 1)
        if crc32(msg[5:]) != crc:
            raise InvalidMessageError("CRC mismatch")
        return 1
    if magic != MAGIC_1:
        raise InvalidMessageError(f"unknown magic byte {magic}")
    if len(msg) < 6:
        raise InvalidMessageError("magic-1 message shorter than its header")
    codec = msg[1] & CODEC_MASK
    (crc,) = _UINT32.unpack_from(msg, 2)
    payload = msg[6:]
    if crc32(payload) != crc:
        raise InvalidMessageError("CRC mismatch")
    if codec == Codec.NONE:
        return 1
    if codec not in _VALID_CODECS:
        raise InvalidMessageError(f"unknown compression codec {codec}")
    if depth >= MAX_WRAPPER_DEPTH:
        raise InvalidMessageError("compressed wrappers nested too deeply")
    inner = memoryview(decompress(codec, payload))
    if len(inner) == 0:
        raise InvalidMessageError("compressed wrapper holds no messages")
    _, count = _validate_entries(inner, depth + 1, strict_tail=True)
    return count


def scan_valid_prefix(data: bytes | memoryview) -> int:
    """Bytes of ``data`` that crash recovery keeps (spec §10.5).

    Entries are accepted while a whole prefix remains, ``N`` is at least the
    header size of its magic, the entry ends within the data, the magic is
    known [T], and the CRC matches.  Wrappers are not decompressed.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    # Recovery runs this over whole segments: one unpack for length and
    # magic, zlib's CRC without a wrapper call, no per-entry objects.
    unpack_head, unpack_crc, crc = _LENGTH_MAGIC.unpack_from, _UINT32.unpack_from, zlib.crc32
    while end - pos >= 5:
        n, magic = unpack_head(view, pos)
        stop = pos + 4 + n
        if n < 5 or stop > end:
            break
        if magic == MAGIC_0:
            payload_at = pos + 9
        elif magic == MAGIC_1 and n >= 6:
            payload_at = pos + 10
        else:
            break
        if crc(view[payload_at:stop]) != unpack_crc(view, payload_at - 4)[0]:
            break
        pos = stop
    return pos


class Entry(NamedTuple):
    """One top-level entry of a fetched set, at its absolute byte offset."""

    offset: int
    size: int  # N: the message bytes, without the 4-byte prefix
    message: Message

    @property
    def next_offset(self) -> int:
        return self.offset + 4 + self.size


@dataclass(frozen=True, slots=True)
class ParsedSet:
    """Complete entries of a fetched set and what was left over.

    ``valid_bytes`` is what the fetch position advances by.  When the *first*
    entry is incomplete, ``first_entry_bytes`` says how many bytes a fetch needs
    to hold it whole (``None`` when even its length prefix is cut).
    """

    entries: tuple[Entry, ...]
    valid_bytes: int
    partial_tail_bytes: int
    first_entry_bytes: int | None = None

    @property
    def truncated(self) -> bool:
        return self.partial_tail_bytes > 0


def parse_entries(data: bytes | memoryview, base_offset: int = 0) -> ParsedSet:
    """Shallow entries of a fetched set (the client algorithm of spec §8).

    Stops cleanly at a truncated trailing entry and reports it; a negative
    length or a malformed message raises ``InvalidMessageError``.  CRCs are not
    checked here (``iter_messages`` checks them).
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    entries: list[Entry] = []
    first_needed: int | None = None
    while end - pos >= 4:
        (n,) = _INT32.unpack_from(view, pos)
        if n < 0:
            raise InvalidMessageError(f"negative entry length {n} at offset {base_offset + pos}")
        if end - pos - 4 < n:
            if pos == 0:
                first_needed = 4 + n
            break
        entries.append(Entry(base_offset + pos, n, decode_message(view[pos + 4:pos + 4 + n])))
        pos += 4 + n
    return ParsedSet(tuple(entries), pos, end - pos, first_needed)


class ConsumedMessage(NamedTuple):
    """A message as a consumer sees it, with 0.7's offset rule (spec §5).

    ``offset`` is where its top-level entry starts.  ``next_offset`` is the
    offset to commit after consuming it: the entry's end for a plain message;
    for the inner messages of a wrapper, the wrapper's start for all but the
    last and the wrapper's end for the last.
    """

    offset: int
    next_offset: int
    payload: bytes
    magic: int
    codec: int  # codec of the top-level entry this message came from


def iter_messages(data: bytes | memoryview, base_offset: int = 0) -> Iterator[ConsumedMessage]:
    """Deep, CRC-checked iteration over the complete entries of a fetched set.

    A partial trailing entry is skipped silently (see ``parse_entries`` to
    learn about it); a bad CRC or an undecodable wrapper raises
    ``InvalidMessageError``.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    unpack_length, unpack_crc, checksum = _INT32.unpack_from, _UINT32.unpack_from, zlib.crc32
    none = Codec.NONE
    # Reading bytes directly is faster than through a view (slices copy once).
    source = data if type(data) is bytes else view
    make = tuple.__new__  # ConsumedMessage(...) without NamedTuple's slower __new__
    while end - pos >= 4:
        (n,) = unpack_length(source, pos)
        if n < 0:
            raise InvalidMessageError(f"negative entry length {n} at offset {base_offset + pos}")
        stop = pos + 4 + n
        if stop > end:
            return
        offset = base_offset + pos
        next_offset = base_offset + stop
        # Fast path, the common case: an uncompressed message, decoded in place
        # (the same checks as decode_message + is_valid, without the objects).
        magic = source[pos + 4] if n else -1
        if magic == MAGIC_1 and n >= 6 and not source[pos + 5] & CODEC_MASK:
            payload_at = pos + 10
        elif magic == MAGIC_0 and n >= 5:
            payload_at = pos + 9
        else:
            yield from _iter_entry(view[pos + 4:stop], offset, next_offset)
            pos = stop
            continue
        payload = source[payload_at:stop]
        if type(payload) is not bytes:
            payload = bytes(payload)
        if checksum(payload) != unpack_crc(source, payload_at - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {offset}")
        yield make(ConsumedMessage, (offset, next_offset, payload, magic, none))
        pos = stop


class MessageColumns(NamedTuple):
    """The messages of a fetched set as columns (what ``iter_messages`` yields, minus magic and codec)."""

    offsets: list[int]
    next_offsets: list[int]
    payloads: list[bytes]


def decode_columns(data: bytes | memoryview, base_offset: int = 0) -> MessageColumns:
    """``iter_messages`` for column consumers (Arrow, Parquet): the same checks and
    offsets, eagerly, about twice as fast for uncompressed sets.  Raises on the
    first bad entry (nothing is returned then)."""
    view = memoryview(data)
    pos, end = 0, len(view)
    source = data if type(data) is bytes else view
    unpack_length, unpack_crc, checksum = _INT32.unpack_from, _UINT32.unpack_from, zlib.crc32
    offsets: list[int] = []
    next_offsets: list[int] = []
    payloads: list[bytes] = []
    add_offset, add_next, add_payload = offsets.append, next_offsets.append, payloads.append
    while end - pos >= 4:
        (n,) = unpack_length(source, pos)
        stop = pos + 4 + n
        if n < 0 or stop > end:
            if n < 0:
                raise InvalidMessageError(f"negative entry length {n} at offset {base_offset + pos}")
            break
        magic = source[pos + 4] if n else -1
        if magic == MAGIC_1 and n >= 6 and not source[pos + 5] & CODEC_MASK:
            payload_at = pos + 10
        elif magic == MAGIC_0 and n >= 5:
            payload_at = pos + 9
        else:
            for message in _iter_entry(view[pos + 4:stop], base_offset + pos, base_offset + stop):
                add_offset(message.offset)
                add_next(message.next_offset)
                add_payload(message.payload)
            pos = stop
            continue
        payload = source[payload_at:stop]
        if type(payload) is not bytes:
            payload = bytes(payload)
        if checksum(payload) != unpack_crc(source, payload_at - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        add_offset(base_offset + pos)
        add_next(base_offset + stop)
        add_payload(payload)
        pos = stop
    return MessageColumns(offsets, next_offsets, payloads)


def _iter_entry(message: memoryview, offset: int, next_offset: int) -> Iterator[ConsumedMessage]:
    """The general case of ``iter_messages`` for one entry: any magic, wrappers unpacked."""
    msg = decode_message(message)
    if not msg.is_valid:
        raise InvalidMessageError(f"CRC mismatch in the entry at offset {offset}")
    codec = msg.codec
    if codec == Codec.NONE:
        yield ConsumedMessage(offset, next_offset, msg.payload, msg.magic, codec)
        return
    inner = list(_iter_inner(msg, depth=1))
    last = len(inner) - 1
    for i, payload in enumerate(inner):
        yield ConsumedMessage(offset, next_offset if i == last else offset, payload, msg.magic, codec)


def _iter_inner(wrapper: Message, depth: int) -> Iterator[bytes]:
    if depth > MAX_WRAPPER_DEPTH:
        raise InvalidMessageError("compressed wrappers nested too deeply")
    if wrapper.codec not in _VALID_CODECS:
        raise InvalidMessageError(f"unknown compression codec {wrapper.codec}")
    inner = memoryview(decompress(wrapper.codec, wrapper.payload))
    parsed = parse_entries(inner)
    if parsed.truncated:
        raise InvalidMessageError("compressed wrapper ends inside an entry")
    for entry in parsed.entries:
        if not entry.message.is_valid:
            raise InvalidMessageError("CRC mismatch inside a compressed wrapper")
        if entry.message.codec == Codec.NONE:
            yield entry.message.payload
        else:
            yield from _iter_inner(entry.message, depth + 1)
