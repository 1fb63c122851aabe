"""Padding runs of a cleaned segment: the index, its sidecar file, and fetch synthesis.

A padding run ``[a, b)`` (positions relative to the segment) is a byte range the
cleaner covered with padding entries (docs/protocol.md §11.3).  A fetch
that starts at or inside a run is answered with one synthesized padding entry up
to ``b``, then the log's bytes from ``b`` (its next offset is exactly where the
next retained entry starts); or, when the rest of the run is longer than the
fetch's size, with one entry of that size, so the next fetch lands inside the run.

The sidecar ``<start>.padding`` stores the runs: ``segment_size:int64,
count:int32, count x (start:int64, end:int64), crc32:uint32``.
"""

from __future__ import annotations

import io
import struct
from bisect import bisect_right
from typing import NamedTuple

from trikafka.wire.crc import crc32
from trikafka.wire.keyed import MIN_PADDING_ENTRY_BYTES, is_padding_head, padding_head, short_padding_entry
from trikafka.wire.responses import ChunkSequence, FileRegion

from .fs import SegmentFile

_HEAD = struct.Struct(">qi")
_RUN = struct.Struct(">qq")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")


class PaddingRuns(NamedTuple):
    """Sorted, disjoint padding runs of one segment (relative positions)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def of(cls, runs: list[tuple[int, int]]) -> "PaddingRuns":
        runs = sorted(runs)
        for (a, b), (c, _) in zip(runs, runs[1:]):
            assert a < b <= c, runs
        return cls(tuple(a for a, _ in runs), tuple(b for _, b in runs))

    def find(self, position: int) -> tuple[int, int] | None:
        """The run ``(a, b)`` with ``a <= position < b``, or None."""
        index = bisect_right(self.starts, position) - 1
        if index >= 0 and position < self.ends[index]:
            return self.starts[index], self.ends[index]
        return None

    @property
    def padded_bytes(self) -> int:
        return sum(b - a for a, b in zip(self.starts, self.ends))

    def __bool__(self) -> bool:
        return bool(self.starts)


NO_PADDING = PaddingRuns((), ())


def encode_padding_index(segment_size: int, runs: PaddingRuns) -> bytes:
    body = _HEAD.pack(segment_size, len(runs.starts)) + b"".join(
        _RUN.pack(a, b) for a, b in zip(runs.starts, runs.ends))
    return body + _CRC.pack(crc32(body))


def decode_padding_index(data: bytes, segment_size: int) -> PaddingRuns | None:
    """The runs, or None when the sidecar is damaged or belongs to another segment size."""
    if len(data) < _HEAD.size + _CRC.size:
        return None
    body, (crc,) = data[:-4], _CRC.unpack_from(data, len(data) - 4)
    if crc32(body) != crc:
        return None
    size, count = _HEAD.unpack_from(body, 0)
    if size != segment_size or count < 0 or len(body) != _HEAD.size + count * _RUN.size:
        return None
    runs = [_RUN.unpack_from(body, _HEAD.size + i * _RUN.size) for i in range(count)]
    if any(not 0 <= a < b <= segment_size for a, b in runs):
        return None
    try:
        return PaddingRuns.of(runs)
    except AssertionError:
        return None


class ZeroSource:
    """A source of zero bytes for a ``FileRegion`` (no descriptor: sent in pieces)."""

    def fileno(self) -> int:
        raise io.UnsupportedOperation("zeros have no descriptor")

    def pread(self, position: int, n: int) -> bytes:
        return bytes(n)


ZEROS = ZeroSource()


def runs_match_file(runs: PaddingRuns, file: SegmentFile) -> bool:
    """Whether every run ``[a, b)`` is padding entries in ``file``, one after the other from
    ``a`` to exactly ``b`` (a sidecar check that tells a segment's index from its old or new
    copy's: a cleaning that rewrites a segment turns at least one entry of a run into padding)."""
    for a, b in zip(runs.starts, runs.ends):
        position = a
        while position < b:
            head = file.pread(position, MIN_PADDING_ENTRY_BYTES)
            if not is_padding_head(head):
                return False
            position += 4 + _INT32.unpack_from(head, 0)[0]
        if position != b:
            return False
    return True


def synthesized_region(file: SegmentFile, position: int, run_end: int, max_bytes: int,
                       visible_size: int) -> ChunkSequence | None:
    """The answer to a fetch at ``position`` inside the run ending at ``run_end``: one
    padding entry (its zeros never held in memory whole) to ``run_end``, then up to
    ``max_bytes`` of the segment from ``run_end`` (sent with sendfile); or, where the rest
    of the run is longer than ``max_bytes``, that entry alone, ``max_bytes`` long.

    Within 30 bytes of the run's end a short padding message stands in for the
    gzip entry.  None under 10 bytes: no removed entry started there (entries are
    at least 14 bytes), so the fetch is served raw, as 0.7 serves misaligned offsets.
    """
    rest = run_end - position
    if rest < 10:
        return None
    entry_bytes = synthesized_entry_bytes(rest, max_bytes)
    if entry_bytes < MIN_PADDING_ENTRY_BYTES:
        chunks: list = [short_padding_entry(entry_bytes)]
    else:
        chunks = [padding_head(entry_bytes), FileRegion(ZEROS, 0, entry_bytes - MIN_PADDING_ENTRY_BYTES)]
    tail = max(0, min(max_bytes, visible_size - run_end)) if entry_bytes == rest else 0
    if tail:
        chunks.append(FileRegion(file.reader, run_end, tail))
    return ChunkSequence(tuple(chunks))


def synthesized_entry_bytes(rest: int, max_bytes: int) -> int:
    """How much of a run's ``rest`` bytes one synthesized entry covers, for a fetch of ``max_bytes``
    (docs/protocol.md §11.3.2): all of it when it fits, else ``max_bytes`` (at least two padding
    entries' worth), leaving no remainder a padding entry could not cover."""
    step = max(max_bytes, 2 * MIN_PADDING_ENTRY_BYTES)
    if rest <= step:
        return rest
    entry = min(step, rest - MIN_PADDING_ENTRY_BYTES)
    assert MIN_PADDING_ENTRY_BYTES <= entry <= step and rest - entry >= MIN_PADDING_ENTRY_BYTES, (rest, step, entry)
    return entry
