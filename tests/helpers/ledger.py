"""What a fault test's clients were promised: entries by offset, and how to read them from a chunk."""

from __future__ import annotations

from trikafka.wire import iter_messages, parse_entries


class Ledger:
    """What the broker promised: entries acknowledged or seen, by offset."""

    def __init__(self) -> None:
        self.promised: dict[int, bytes] = {}  # offset -> whole entry bytes (with its 4-byte prefix)
        self.acked_messages = 0
        self.seen_messages = 0

    def promise(self, offset: int, entry: bytes, why: str) -> None:
        known = self.promised.setdefault(offset, entry)
        assert known == entry, f"offset {offset} ({why}) served different bytes than before"


def entries_of(data: bytes, base_offset: int) -> list[tuple[int, bytes]]:
    """Whole entries of a fetched chunk with their offsets; CRC-checked (raises on a bad one)."""
    parsed = parse_entries(data, base_offset)
    for _ in iter_messages(data[:parsed.valid_bytes], base_offset):
        pass  # every message decodes and its CRC matches
    return [(e.offset, data[e.offset - base_offset:e.next_offset - base_offset]) for e in parsed.entries]
