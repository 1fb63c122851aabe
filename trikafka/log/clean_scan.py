"""What the cleaner reads: the entries of a segment, their keys, and which runs can go.

An entry is a 0.7 message-set entry (``scan_segment``) or a v2 batch
(``scan_batches``, docs/protocol.md §16.6.1); the decisions are the same for both.

Decisions depend only on the bytes, the key map and the tombstone horizon, so
every replica that cleans the same range the same way writes the same segment
(docs/protocol.md §11.4.3).
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from trikafka.kafka.batch import CONTROL, HEADER_BYTES, LOG_OVERHEAD, MAGIC, TRANSACTIONAL, is_padding, read_header
from trikafka.kafka.errors import CorruptRecords
from trikafka.kafka.records import decode_batches
from trikafka.wire.compression import Codec
from trikafka.wire.crc import crc32
from trikafka.wire.errors import InvalidMessageError
from trikafka.wire.keyed import (
    KEYED,
    MIN_PADDING_ENTRY_BYTES,
    PADDING_HEAD_BYTES,
    TOMBSTONE,
    inner_messages,
    is_padding_head,
    split_key,
)
from trikafka.wire.message import CODEC_MASK, MAGIC_0, MAGIC_1

from .fs import SegmentFile
from .keymap import KeyMap, key_digest
from .throttle import Throttler

SCAN_CHUNK_BYTES = 4 << 20
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")


class CleanerError(Exception):
    """A segment the cleaner cannot read as valid entries; that log is left alone."""


class ScannedEntry(NamedTuple):
    """One entry of a segment: where (relative), how long (``4 + N``), and its keys.

    ``keys`` is None when the entry holds an unkeyed message (never removable);
    ``()`` for a padding entry; otherwise ``(digest, tombstone)`` per message.
    """

    position: int
    size: int
    padding: bool
    keys: tuple[tuple[bytes, bool], ...] | None


def scan_segment(file: SegmentFile, size: int, throttle: Throttler) -> Iterator[ScannedEntry]:
    """Every entry of a (fully written, fully visible) segment; padding payloads are skipped unread."""
    pos, buf, buf_at = 0, b"", 0
    while pos < size:
        rel = pos - buf_at
        if len(buf) - rel < PADDING_HEAD_BYTES and buf_at + len(buf) < size:
            buf, buf_at, rel = _read(file, pos, min(SCAN_CHUNK_BYTES, size - pos), throttle), pos, 0
        if len(buf) - rel < 4:
            raise CleanerError(f"{file!r}: entry prefix cut at position {pos}")
        (n,) = struct.unpack_from(">i", buf, rel)
        if n < 5 or pos + 4 + n > size:
            raise CleanerError(f"{file!r}: bad entry length {n} at position {pos}")
        if is_padding_head(buf[rel:rel + PADDING_HEAD_BYTES]):
            yield ScannedEntry(pos, 4 + n, True, ())
            pos += 4 + n
            continue
        if len(buf) - rel < 4 + n:
            buf, buf_at, rel = _read(file, pos, max(4 + n, min(SCAN_CHUNK_BYTES, size - pos)), throttle), pos, 0
        yield ScannedEntry(pos, 4 + n, False, _entry_keys(memoryview(buf)[rel + 4:rel + 4 + n], pos))
        pos += 4 + n


def scan_batches(file: SegmentFile, size: int, throttle: Throttler) -> Iterator[ScannedEntry]:
    """Every v2 batch of a (fully written, fully visible) Kafka-format segment; padding batches are
    skipped unread past their header.  A batch's keys are its records' (a null value is a
    tombstone); a batch with a null key, a control batch (a transaction marker) or a transaction's
    batch is unkeyed: never removed, and superseding nothing (§19.6: an aborted record must not
    supersede a committed one, and the cleaner does not read transactions' outcomes)."""
    pos, buf, buf_at = 0, b"", 0
    while pos < size:
        rel = pos - buf_at
        if len(buf) - rel < HEADER_BYTES:
            if size - pos < HEADER_BYTES:
                raise CleanerError(f"{file!r}: batch header cut at position {pos}")
            buf, buf_at, rel = _read(file, pos, min(SCAN_CHUNK_BYTES, size - pos), throttle), pos, 0
        header = read_header(buf, rel)
        if header.batch_length < HEADER_BYTES - LOG_OVERHEAD or pos + header.size > size or header.magic != MAGIC:
            raise CleanerError(f"{file!r}: no v2 batch at position {pos}")
        if is_padding(header):
            yield ScannedEntry(pos, header.size, True, ())
            pos += header.size
            continue
        if len(buf) - rel < header.size:
            buf, buf_at, rel = _read(file, pos, max(header.size, min(SCAN_CHUNK_BYTES, size - pos)), throttle), pos, 0
        yield ScannedEntry(pos, header.size, False, _batch_keys(memoryview(buf)[rel:rel + header.size], pos))
        pos += header.size


def _batch_keys(data: memoryview, pos: int) -> tuple[tuple[bytes, bool], ...] | None:
    try:
        header, records = next(decode_batches(data))
    except (CorruptRecords, StopIteration) as exc:
        raise CleanerError(f"batch at position {pos}: {exc or 'not whole'}") from None
    if header.attributes & (CONTROL | TRANSACTIONAL) or not records or any(r.key is None for r in records):
        return None
    return tuple((key_digest(r.key), r.value is None) for r in records if r.key is not None)


def _read(file: SegmentFile, pos: int, n: int, throttle: Throttler) -> bytes:
    throttle.charge(n)
    data = file.pread(pos, n)
    if len(data) != n:
        raise CleanerError(f"{file!r}: short read at {pos}")
    return data


def _entry_keys(message: memoryview, pos: int) -> tuple[tuple[bytes, bool], ...] | None:
    magic = message[0]
    if magic == MAGIC_0:
        return None
    if magic != MAGIC_1 or len(message) < 6:
        raise CleanerError(f"unknown magic {magic} at position {pos}")
    attributes, (crc,) = message[1], _CRC.unpack_from(message, 2)
    if crc32(message[6:]) != crc:
        raise CleanerError(f"CRC mismatch at position {pos}")
    if attributes & CODEC_MASK == Codec.NONE:
        # The common case, inline: one keyed message, its key read in place.
        if not attributes & KEYED:
            return None
        if len(message) < 10:
            raise CleanerError(f"keyed message shorter than its key length at position {pos}")
        (key_length,) = _INT32.unpack_from(message, 6)
        if key_length < 0 or 10 + key_length > len(message):
            raise CleanerError(f"keyed message with a bad key length {key_length} at position {pos}")
        return ((key_digest(message[10:10 + key_length]), bool(attributes & TOMBSTONE)),)
    try:
        inner = inner_messages(attributes & CODEC_MASK, bytes(message[6:]))
        return _keys_of([(a if m == MAGIC_1 else 0, p) for m, a, p in inner])
    except InvalidMessageError as exc:
        raise CleanerError(f"entry at position {pos}: {exc}") from None


def _keys_of(messages: list[tuple[int, bytes]]) -> tuple[tuple[bytes, bool], ...] | None:
    keys = []
    for attributes, payload in messages:
        key, _ = split_key(payload, attributes)
        if key is None:
            return None
        keys.append((key_digest(key), bool(attributes & TOMBSTONE)))
    return tuple(keys) if keys else None


def add_to_map(keymap: KeyMap, segment_start: int, entries: list[ScannedEntry]) -> None:
    """Record every key of ``entries`` (oldest first) at its entry's absolute offset."""
    for entry in entries:
        for digest, _ in entry.keys or ():
            keymap.put(digest, segment_start + entry.position)


def new_keys(keymap: KeyMap, entries: list[ScannedEntry]) -> int:
    """How many keys of ``entries`` the map does not hold yet (an upper bound on its growth)."""
    return len({d for e in entries for d, _ in e.keys or () if keymap.get(d) < 0})


def removable_runs(segment_start: int, entries: list[ScannedEntry], keymap: KeyMap,
                   drop_tombstones: bool, keep: frozenset[int] = frozenset(),
                   min_run_bytes: int = MIN_PADDING_ENTRY_BYTES) -> list[tuple[int, int, bool]]:
    """Runs ``(start, end, news)`` of removable entries (relative positions); ``news`` is
    True when the run removes something that is not padding yet.

    An entry is removable when it is padding, or when each of its messages is keyed
    and either a later entry holds the same key or it is a tombstone past the horizon.
    The segment's last entry always stays, and so do runs shorter than ``min_run_bytes``,
    the smallest padding entry of the format (docs/protocol.md §11.3.1, §16.6.1), and the
    entries at the offsets in ``keep``.
    """
    runs: list[tuple[int, int, bool]] = []
    current: list[ScannedEntry] = []

    def close_run() -> None:
        if current:
            start, end = current[0].position, current[-1].position + current[-1].size
            if end - start >= min_run_bytes:
                runs.append((start, end, any(not e.padding for e in current)))
        current.clear()

    for index, entry in enumerate(entries):
        offset = segment_start + entry.position
        last = index == len(entries) - 1
        if not last and offset not in keep and (entry.padding or _obsolete(entry, offset, keymap, drop_tombstones)):
            current.append(entry)
        else:
            close_run()
    close_run()
    return runs


def _obsolete(entry: ScannedEntry, offset: int, keymap: KeyMap, drop_tombstones: bool) -> bool:
    if entry.keys is None:
        return False
    return all(keymap.get(d) > offset or (tombstone and drop_tombstones) for d, tombstone in entry.keys)


def pinned_tombstones(plans: list[tuple[int, list[ScannedEntry], list[tuple[int, int, bool]]]],
                      keymap: KeyMap) -> set[int]:
    """Offsets of removed entries that are the latest for a tombstoned key while an older
    entry holding that key stays (a segment's last entry, a short run, a wrapper kept for
    another key): dropping the tombstone would bring that older value back, so it stays.

    ``plans`` are ``(segment_start, entries, runs)`` in offset order.
    """
    retained: set[bytes] = set()
    pins: set[int] = set()
    for segment_start, entries, runs in plans:
        run_index = 0
        for entry in entries:
            while run_index < len(runs) and runs[run_index][1] <= entry.position:
                run_index += 1
            removed = run_index < len(runs) and runs[run_index][0] <= entry.position
            offset = segment_start + entry.position
            if not removed:
                retained.update(d for d, _ in entry.keys or ())
            elif any(t and keymap.get(d) <= offset and d in retained for d, t in entry.keys or ()):
                pins.add(offset)
    return pins
