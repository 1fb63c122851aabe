"""Reading message sets: shallow entries of a fetched set (§5.2), deep iteration for consumers and
columns for bulk readers, unpacking compressed wrappers with 0.7's offset rule (§4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from .compression import Codec, decompress
from .crc import crc32
from .errors import InvalidMessageError
from .keys import split_key
from .message import CODEC_MASK, MAGIC_0, MAGIC_1, Message, decode_message
from .messageset import _INT32, _UINT32, _VALID_CODECS, MAX_WRAPPER_DEPTH


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
    """Shallow entries of a fetched set (the client algorithm of spec §5.2).

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
    """A message as a consumer sees it, with 0.7's offset rule (spec §4).

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
    attributes: int = 0  # the message's own attributes byte (0 for magic 0): its KEYED/TOMBSTONE bits

    @property
    def key(self) -> bytes | None:
        """The key of a keyed message (docs/protocol.md §11.2), None for a plain one."""
        return split_key(self.payload, self.attributes)[0]

    @property
    def value(self) -> bytes:
        """The payload without its key; a plain message's whole payload."""
        return split_key(self.payload, self.attributes)[1]


def iter_messages(data: bytes | memoryview, base_offset: int = 0) -> Iterator[ConsumedMessage]:
    """Deep, CRC-checked iteration over the complete entries of a fetched set.

    A partial trailing entry is skipped silently (see ``parse_entries`` to
    learn about it); a bad CRC or an undecodable wrapper raises
    ``InvalidMessageError``.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    unpack_length, unpack_crc, checksum = _INT32.unpack_from, _UINT32.unpack_from, crc32
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
        yield make(ConsumedMessage, (offset, next_offset, payload, magic, none,
                                     source[pos + 5] if magic == MAGIC_1 else 0))
        pos = stop


def _iter_entry(message: memoryview, offset: int, next_offset: int) -> Iterator[ConsumedMessage]:
    """The general case of ``iter_messages`` for one entry: any magic, wrappers unpacked."""
    msg = decode_message(message)
    if not msg.is_valid:
        raise InvalidMessageError(f"CRC mismatch in the entry at offset {offset}")
    codec = msg.codec
    if codec == Codec.NONE:
        yield ConsumedMessage(offset, next_offset, msg.payload, msg.magic, codec, _attributes(msg))
        return
    inner = list(_iter_inner(msg, depth=1))
    last = len(inner) - 1
    for i, (payload, attributes) in enumerate(inner):
        yield ConsumedMessage(offset, next_offset if i == last else offset, payload, msg.magic, codec, attributes)


def _attributes(msg: Message) -> int:
    return msg.attributes if msg.magic == MAGIC_1 else 0


def _iter_inner(wrapper: Message, depth: int) -> Iterator[tuple[bytes, int]]:
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
            yield entry.message.payload, _attributes(entry.message)
        else:
            yield from _iter_inner(entry.message, depth + 1)


def grown_fetch_size(asked_bytes: int, limit_bytes: int, first_entry_bytes: int | None) -> int | None:
    """The one fetch-size growth rule, used by every consumer (§5.2).

    Call it when a fetch of ``asked_bytes`` returned only the cut start of its
    first entry, whose full size is ``first_entry_bytes`` (None when even its
    length prefix was cut).  The next fetch asks for at least double, and at
    once for the whole entry when its size is known, never above
    ``limit_bytes``: ``min(limit, max(entry, 2 * asked))``.  Returns None when
    no fetch up to ``limit_bytes`` can hold the entry (the fetch was already at
    the limit, or the entry is larger than it); the caller raises its
    "message too large for the fetch size" error.
    """
    if asked_bytes >= limit_bytes or (first_entry_bytes is not None and first_entry_bytes > limit_bytes):
        return None
    return min(limit_bytes, max(first_entry_bytes or 0, 2 * asked_bytes))
