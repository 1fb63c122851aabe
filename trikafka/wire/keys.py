"""The key of a keyed message (docs/protocol.md §11.2): attribute bits and the payload split.

Apart from ``keyed.py`` so that the set reader (``reading.py``), which
``keyed.py`` builds on, can split keys too.
"""

from __future__ import annotations

import struct

from .errors import InvalidMessageError

KEYED = 0x04
TOMBSTONE = 0x08
_INT32 = struct.Struct(">i")


def split_key(payload: bytes, attributes: int) -> tuple[bytes | None, bytes]:
    """``(key, value)`` of a message payload; ``(None, payload)`` when it is not KEYED."""
    if not attributes & KEYED:
        return None, payload
    if len(payload) < 4:
        raise InvalidMessageError("keyed message shorter than its key length")
    (key_length,) = _INT32.unpack_from(payload, 0)
    if key_length < 0 or 4 + key_length > len(payload):
        raise InvalidMessageError(f"keyed message with a bad key length {key_length}")
    return bytes(payload[4:4 + key_length]), bytes(payload[4 + key_length:])
