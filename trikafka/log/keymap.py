"""The cleaner's key map: key digest -> offset of the last entry holding the key, in a fixed budget.

Keys are stored as 16-byte BLAKE2b digests (a collision between two live keys is
as unlikely as with Kafka's MD5 map), so the budget does not depend on key sizes.
A Python dict of 16-byte keys and int offsets costs about ``ENTRY_BYTES`` per key;
``capacity`` is the budget divided by that.
"""

from __future__ import annotations

import hashlib

# Estimated bytes per key in a CPython dict: a 16-byte bytes object (49), an int
# (32) and the dict's slot and index (about 40 at the usual load), rounded up.
ENTRY_BYTES = 128


def key_digest(key: bytes | memoryview) -> bytes:
    """The 16-byte digest the map stores for ``key``."""
    return hashlib.blake2b(key, digest_size=16).digest()


class KeyMap:
    """At most ``capacity`` keys, each with the offset of its latest entry seen."""

    __slots__ = ("capacity", "_offsets")

    def __init__(self, budget_bytes: int):
        if budget_bytes < ENTRY_BYTES:
            raise ValueError(f"a key map budget of {budget_bytes} bytes holds no key")
        self.capacity = budget_bytes // ENTRY_BYTES
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def room(self) -> int:
        return self.capacity - len(self._offsets)

    def put(self, digest: bytes, offset: int) -> None:
        """Record that the entry at ``offset`` (later than any before) holds the key."""
        self._offsets[digest] = offset

    def get(self, digest: bytes) -> int:
        """The latest offset recorded for the key, or -1."""
        return self._offsets.get(digest, -1)
