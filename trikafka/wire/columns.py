"""A fetched message set decoded straight into column buffers (spec §4, §5, §8).

``decode_set_columns`` gives what ``iter_messages`` yields (same messages,
same offsets, same CRC checks, wrappers unpacked with the §5 offset rule) as
four flat buffers a columnar consumer can adopt without touching a row:

* ``offsets`` / ``next_offsets``: ``array('q')`` of byte offsets relative to
  the set's ``base_offset`` (a consumer adds it in one vectorised step);
* ``values``: every payload back to back, and ``value_ends``: an
  ``array('i')`` of ``count + 1`` positions into it (0 first), i.e. Arrow's
  binary layout, so ``pyarrow`` wraps them without copying.

Why it is fast: producers usually write runs of equally sized messages (one
payload size per topic, or a producer batch of fixed records).  A run of
entries with the same length prefix and header sits in the set at a fixed
stride, so its length, magic and CRC bytes are read as strided slices of the
set (``data[a:b:stride]``, C speed) instead of entry by entry, and the CRCs
of a whole run are checked with one ``zlib.crc32`` call over a rearranged
copy (``_crcs_hold``; only then, to name a bad entry, entry by entry).
Entries outside runs go one at a time: plain ones with ``iter_messages``' own
inline checks, compressed wrappers and odd headers through ``iter_messages``
itself.

stdlib only, like the rest of ``wire``.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

from .errors import InvalidMessageError
from .message import CODEC_MASK, MAGIC_0, MAGIC_1
from .reading import iter_messages

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# Shortest run worth the strided path; shorter ones go entry by entry.
MIN_RUN = 8
# A run is measured in windows growing from MIN_RUN entries, so a set whose sizes
# vary costs O(entries), not O(entries^2).
_WINDOW_GROWTH = 8
# A run is cut in blocks of at most this many entries (bounds the cached slices).
_BLOCK_ENTRIES = 1 << 14
_LAYOUTS: dict[tuple[int, int], "_Layout"] = {}  # (stride, header) -> cached buffers of a run block
_MAX_LAYOUTS = 16
_MAX_COUNTS = 64  # per layout: the run lengths whose expected aggregate CRC is kept
# Arrow's binary offsets are int32.
_MAX_VALUE_BYTES = (1 << 31) - 1


class SetColumns(NamedTuple):
    """The messages of a fetched set as Arrow-ready buffers (see the module docstring).

    Offsets are relative to ``base_offset`` (a message's offset is
    ``base_offset + offsets[i]``), so that runs can share cached buffers and
    the per-fetch addition is left to a vectorised consumer.
    """

    base_offset: int
    offsets: array  # 'q', relative to base_offset
    next_offsets: array  # 'q', relative to base_offset
    values: bytes
    value_ends: array  # 'i', count + 1 entries, 0 first
    valid_bytes: int  # bytes of complete entries: where the next fetch starts, relative to the set

    @property
    def count(self) -> int:
        return len(self.offsets)


def decode_set_columns(data: bytes | bytearray | memoryview, base_offset: int = 0) -> SetColumns:
    """Decode the complete entries of a fetched set into column buffers.

    Equal to ``iter_messages(data, base_offset)`` message for message; a
    partial trailing entry is left out (``valid_bytes`` stops before it).
    Raises ``InvalidMessageError`` on the first bad entry (nothing is
    returned then).
    """
    if type(data) is not bytes:
        data = bytes(data)  # strided slicing and fast slicing need bytes
    end = len(data)
    unpack_length, unpack_crc, checksum = _INT32.unpack_from, _UINT32.unpack_from, zlib.crc32
    offsets, next_offsets, value_ends = _Column("q"), _Column("q"), _Column("i")
    payloads: list[bytes] = []
    add_offset, add_next, add_payload, add_end = (
        offsets.pending.append, next_offsets.pending.append, payloads.append, value_ends.pending.append)
    add_end(0)
    value_bytes = pos = retry_run_at = 0
    while end - pos >= 4:
        (n,) = unpack_length(data, pos)
        stop = pos + 4 + n
        if n < 0 or stop > end:
            if n < 0:
                raise InvalidMessageError(f"negative entry length {n} at offset {base_offset + pos}")
            break
        magic = data[pos + 4] if n else -1
        if magic == MAGIC_1 and n >= 6 and not data[pos + 5] & CODEC_MASK:
            header = 10
        elif magic == MAGIC_0 and n >= 5:
            header = 9
        else:  # wrappers and odd headers: iter_messages itself, one entry
            for message in iter_messages(memoryview(data)[pos:stop], base_offset + pos):
                add_offset(message.offset - base_offset)
                add_next(message.next_offset - base_offset)
                add_payload(message.payload)
                value_bytes += len(message.payload)
                add_end(value_bytes)
            pos = stop
            continue
        if pos >= retry_run_at:
            # The entry MIN_RUN - 1 strides on has this length too: maybe a run.
            stride = n + 4
            probe = pos + (MIN_RUN - 1) * stride
            if probe + stride <= end and unpack_length(data, probe)[0] == n:
                run = _run_length(data, pos, stride, (end - pos) // stride)
                if run >= MIN_RUN:
                    value_bytes = _take_run(data, pos, stride, header, run, base_offset, value_bytes,
                                            offsets, next_offsets, payloads, value_ends)
                    pos += run * stride
                    continue
                retry_run_at = pos + run * stride  # a short run: not measured again entry by entry
            else:
                retry_run_at = probe
        # A plain entry on its own: iter_messages' fast path, inline.
        payload = data[pos + header:stop]
        if checksum(payload) != unpack_crc(data, pos + header - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        add_offset(pos)
        add_next(stop)
        add_payload(payload)
        value_bytes += stop - pos - header
        add_end(value_bytes)
        pos = stop
    if value_bytes > _MAX_VALUE_BYTES:
        raise InvalidMessageError(
            "one fetch decodes to 2 GiB of payload or more (Arrow's binary limit); use a smaller fetch size"
        )
    return SetColumns(base_offset, offsets.finish(), next_offsets.finish(), b"".join(payloads),
                      value_ends.finish(), pos)


class _Column:
    """An ``array`` built from Python ints appended one by one (``pending``) and from
    whole arrays adopted by runs, concatenated once at the end."""

    __slots__ = ("typecode", "parts", "pending")

    def __init__(self, typecode: str):
        self.typecode = typecode
        self.parts: list[array] = []
        self.pending: list[int] = []  # the decoder holds its bound append: never rebind

    def adopt(self, part: array) -> None:
        if self.pending:
            self.parts.append(array(self.typecode, self.pending))
            self.pending.clear()
        self.parts.append(part)

    def finish(self) -> array:
        self.adopt(array(self.typecode))
        if len(self.parts) <= 2:
            return self.parts[0]
        whole = array(self.typecode)
        for part in self.parts:
            whole.extend(part)
        return whole


def _take_run(
    data: bytes, pos: int, stride: int, header: int, run: int, base_offset: int, value_bytes: int,
    offsets: _Column, next_offsets: _Column, payloads: list[bytes], value_ends: _Column,
) -> int:
    """Decode ``run`` plain entries of ``stride`` bytes from ``pos`` whose header bytes
    (length, magic, attributes) are all equal, in blocks of at most ``_BLOCK_ENTRIES``;
    return ``value_bytes`` after them."""
    size = stride - header
    while run > 0:
        count = min(run, _BLOCK_ENTRIES)
        stop = pos + count * stride
        # Cut with slices cached per layout, relative to the block's start.
        layout = _layout(stride, header, count)
        block = data if pos == 0 else data[pos:stop]
        cut = itemgetter(*layout.slices[:count])(block) if count > 1 else (block[layout.slices[0]],)
        if not _crcs_hold(block, stride, header, count, layout):
            _raise_first_bad_crc(block, stride, header, cut, base_offset + pos)
        payloads.extend(cut)
        if pos == 0:  # the usual case (a fetch starts at an entry): cached buffers
            offsets.adopt(layout.offsets[:count])
            next_offsets.adopt(layout.offsets[1:count + 1])
        else:
            offsets.adopt(array("q", range(pos, stop, stride)))
            next_offsets.adopt(array("q", range(pos + stride, stop + 1, stride)))
        if value_bytes == 0:
            value_ends.adopt(layout.value_ends[1:count + 1])
        elif size:
            value_ends.adopt(array("i", range(value_bytes + size, value_bytes + count * size + 1, size)))
        else:
            value_ends.adopt(array("i", repeat(value_bytes, count)))
        value_bytes += count * size
        pos, run = stop, run - count
    return value_bytes


def _crcs_hold(block: bytes, stride: int, header: int, count: int, layout: "_Layout") -> bool:
    """Whether every entry's stored CRC matches its payload, with one ``zlib.crc32`` call.

    CRC-32 has a residue: ``crc32(p + crc32(p) little-endian)`` is the same
    constant for every ``p``, and it is affine in its input.  So the CRC of
    ``p_0 + le(c_0) + pad + p_1 + le(c_1) + pad + ...`` (``c_i`` the stored CRCs,
    ``pad`` zeros standing where the next header was) is one value for every
    run of valid entries of this layout and count; a single bad entry always
    changes it.  Only corruption of several entries that cancels exactly could
    pass (a 2^-32 chance for random damage, like any one CRC-32). One call over
    the run costs less than a call per entry (bench/spark_source_profile.py's
    decode stage).
    """
    work = bytearray(count * stride + header)
    memoryview(work)[:count * stride] = memoryview(block)[:count * stride]  # a plain copy (slices copy twice)
    zeros = bytes(count)
    for lane in range(header):  # where entry i + 1's header was: le(c_i), then zeros
        work[stride + lane::stride] = block[header - 1 - lane:count * stride:stride] if lane < 4 else zeros
    return zlib.crc32(memoryview(work)[header:]) == layout.expected_crc(count)


def _raise_first_bad_crc(block: bytes, stride: int, header: int, cut: tuple[bytes, ...], first_offset: int) -> None:
    """Find the run's first entry whose CRC is wrong, entry by entry, and raise naming it."""
    for i, payload in enumerate(cut):
        if zlib.crc32(payload) != _UINT32.unpack_from(block, i * stride + header - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {first_offset + i * stride}")
    raise AssertionError("the aggregate CRC check failed but every entry is valid")  # cannot happen


class _Layout(NamedTuple):
    """Buffers shared by every run block of one (stride, header), relative to the block."""

    slices: list[slice]  # payload i: block[slices[i]]
    offsets: array  # 'q': i * stride, one more than slices (the next offsets are offsets[1:])
    value_ends: array  # 'i': i * payload size
    stride: int
    header: int
    expected: dict[int, int]  # count -> what _crcs_hold's CRC is for that many valid entries

    def expected_crc(self, count: int) -> int:
        crc = self.expected.get(count)
        if crc is None:
            # Any valid entries give the same value: build it from all-zero payloads.
            size = self.stride - self.header
            unit = bytes(size) + zlib.crc32(bytes(size)).to_bytes(4, "little") + bytes(self.header - 4)
            crc = zlib.crc32(unit * count)
            if len(self.expected) >= _MAX_COUNTS:
                self.expected.clear()
            self.expected[count] = crc
        return crc


def _layout(stride: int, header: int, count: int) -> _Layout:
    """The cached layout of (stride, header) covering at least ``count`` entries.

    Building slice objects and offsets costs more than using them, and a
    producer's fixed-size messages give the same few layouts fetch after
    fetch.  At most ``_MAX_LAYOUTS`` are kept.
    """
    layout = _LAYOUTS.get((stride, header))
    if layout is None or len(layout.slices) < count:
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        size = stride - header
        # Room for more entries than asked, within int32 value ends (count * size is within a fetch).
        have = max(count, min(_BLOCK_ENTRIES // 16, _MAX_VALUE_BYTES // max(size, 1) - 1))
        layout = _LAYOUTS[stride, header] = _Layout(
            list(map(slice, range(header, have * stride, stride), range(stride, have * stride + 1, stride))),
            array("q", range(0, (have + 1) * stride, stride)),
            array("i", range(0, (have + 1) * size, size) if size else repeat(0, have + 1)),
            stride, header, {},
        )
    return layout


def _run_length(data: bytes, pos: int, stride: int, most: int) -> int:
    """How many entries from ``pos`` (at most ``most``) share the first one's length prefix,
    magic and attributes byte, i.e. sit at a fixed ``stride``."""
    checked, window = 0, MIN_RUN
    lanes = range(6 if data[pos + 4] == MAGIC_1 else 5)  # length prefix, magic[, attributes]
    while checked < most:
        count = min(window, most - checked)
        at = pos + checked * stride
        stop = at + count * stride
        same = count
        for lane in lanes:
            strided = data[at + lane:stop:stride]
            same = min(same, count - len(strided.lstrip(data[pos + lane:pos + lane + 1])))
            if same == 0:
                break
        checked += same
        if same < count:
            break
        window *= _WINDOW_GROWTH
    return checked
