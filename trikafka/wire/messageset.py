"""Message sets: plain concatenations of entries (spec §3.1, §4, §5.1, §5.2, §7.3).

Four readers, one per purpose, all stdlib-only and allocation-light:

* ``validate_message_set``: what the broker accepts on produce (§5.1 steps 4-6);
  ``check_message_set`` is the same check without the result object.
* ``scan_valid_prefix``: what crash recovery keeps of a segment (§7.3).
* ``parse_entries`` and ``iter_messages`` (in ``trikafka.wire.reading``):
  shallow entries of a fetched set (§5.2); deep iteration for consumers (§4).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from .compression import Codec, compress, decompress
from .crc import crc32
from .errors import InvalidMessageError, LocalProtocolError, MessageSizeTooLargeError
from .message import CODEC_MASK, HEADER_BYTES, MAGIC_0, MAGIC_1, encode_entry

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
    messages are magic 1, codec 0 (spec §3.3).  No payloads give an empty set,
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


def validate_message_set(data: bytes | bytearray | memoryview, max_message_size: int | None = None) -> ValidatedSet:
    """Check a produced set entirely before any byte of it is written.

    Raises ``MessageSizeTooLargeError`` when a top-level payload exceeds
    ``max_message_size`` (0.7.2 drops the whole set), and
    ``InvalidMessageError`` for any framing, magic, codec, CRC or compression
    fault.  A truncated entry after the first is a dropped tail, not an error.
    """
    valid_bytes, count = check_message_set(data, max_message_size)
    return ValidatedSet(valid_bytes, count, len(data) - valid_bytes)


def check_message_set(data: bytes | bytearray | memoryview, max_message_size: int | None = None) -> tuple[int, int]:
    """``validate_message_set`` as a plain ``(valid_bytes, message_count)``: the log's append path,
    which builds no result object per append (same checks, same errors)."""
    view = memoryview(data)
    try:
        return _validate_top_level(view, max_message_size)
    except InvalidMessageError:
        # 0.7.2 applies the size rule to the whole set before it checks
        # anything else, so an oversized entry anywhere wins over a fault.
        if max_message_size is not None:
            _check_payload_sizes(view, max_message_size)
        raise


def _validate_top_level(view: memoryview, max_message_size: int | None) -> tuple[int, int]:
    # The produce hot path: one pass that checks framing, size and CRC of
    # uncompressed messages inline (no per-message call or object), and hands
    # everything else (wrappers, odd headers) to ``_validate_message``.
    limit = -1 if max_message_size is None else max_message_size
    unpack_n, unpack_crc, crc = _INT32.unpack_from, _UINT32.unpack_from, crc32
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
    """Bytes of ``data`` that crash recovery keeps (spec §7.3).

    Entries are accepted while a whole prefix remains, ``N`` is at least the
    header size of its magic, the entry ends within the data, the magic is
    known [T], and the CRC matches.  Wrappers are not decompressed.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    # Recovery runs this over whole segments: one unpack for length and
    # magic, the CRC function without a wrapper call, no per-entry objects.
    unpack_head, unpack_crc, crc = _LENGTH_MAGIC.unpack_from, _UINT32.unpack_from, crc32
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
