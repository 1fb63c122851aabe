"""One 0.7 message: magic 0 (0.6 format) and magic 1 (attributes byte), spec §3.2.

A message on the wire is always preceded by its int32 length ``N`` (the *entry*
prefix, spec §3.1); functions here that say ``entry`` include that prefix.
The CRC covers the payload only, exactly as 0.7 computes it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .compression import Codec
from .crc import crc32
from .errors import InvalidMessageError, LocalProtocolError

MAGIC_0 = 0
MAGIC_1 = 1
ENTRY_PREFIX_BYTES = 4
# Header bytes between the entry prefix and the payload, per magic.
HEADER_BYTES = {MAGIC_0: 5, MAGIC_1: 6}
# Per-entry overhead on disk and on the wire: prefix plus header.
ENTRY_OVERHEAD_BYTES = {m: ENTRY_PREFIX_BYTES + h for m, h in HEADER_BYTES.items()}
CODEC_MASK = 0x03

_MAGIC0_ENTRY = struct.Struct(">ibI")   # N, magic, crc
_MAGIC1_ENTRY = struct.Struct(">ibBI")  # N, magic, attributes (unsigned, as decoded), crc


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded message. ``crc`` is as stored; ``is_valid`` recomputes it."""

    magic: int
    attributes: int
    crc: int
    payload: bytes

    @property
    def codec(self) -> int:
        """The compression codec (0 for magic 0, which is never compressed)."""
        return self.attributes & CODEC_MASK if self.magic == MAGIC_1 else Codec.NONE

    @property
    def is_valid(self) -> bool:
        """True when the stored CRC matches the payload."""
        return crc32(self.payload) == self.crc

    def encode_entry(self) -> bytes:
        """The entry bytes (length prefix included), with the stored CRC kept as is."""
        if self.magic == MAGIC_0:
            return _MAGIC0_ENTRY.pack(5 + len(self.payload), 0, self.crc) + self.payload
        return _MAGIC1_ENTRY.pack(6 + len(self.payload), 1, self.attributes, self.crc) + self.payload


def encode_entry(payload: bytes, *, magic: int = MAGIC_1, codec: int = Codec.NONE) -> bytes:
    """Build one entry (``N`` + message) around ``payload`` with a correct CRC."""
    if magic == MAGIC_0:
        if codec != Codec.NONE:
            raise LocalProtocolError("a magic-0 message cannot be compressed")
        return _MAGIC0_ENTRY.pack(5 + len(payload), 0, crc32(payload)) + payload
    if magic == MAGIC_1:
        if codec not in (Codec.NONE, Codec.GZIP, Codec.SNAPPY):
            raise LocalProtocolError(f"unknown codec {codec}")
        return _MAGIC1_ENTRY.pack(6 + len(payload), 1, codec, crc32(payload)) + payload
    raise LocalProtocolError(f"unknown magic {magic}")


def decode_message(buf: bytes | memoryview) -> Message:
    """Decode the ``N`` message bytes that follow an entry prefix.

    Framing is checked (length, magic); the CRC is *not* (see ``Message.is_valid``).
    """
    size = len(buf)
    if size < 1:
        raise InvalidMessageError("message is shorter than its magic byte")
    magic = buf[0]
    if magic not in HEADER_BYTES:
        raise InvalidMessageError(f"unknown magic byte {magic}")
    header = HEADER_BYTES[magic]
    if size < header:
        raise InvalidMessageError(f"message of {size} bytes is shorter than its {header}-byte header")
    if magic == MAGIC_0:
        (crc,) = struct.unpack_from(">I", buf, 1)
        return Message(MAGIC_0, 0, crc, bytes(buf[5:]))
    attributes, crc = struct.unpack_from(">bI", buf, 1)
    return Message(MAGIC_1, attributes & 0xFF, crc, bytes(buf[6:]))
