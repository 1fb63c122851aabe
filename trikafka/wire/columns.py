"""A fetched message set decoded in column form, for bulk readers (spec §3, §4, §5.2).

``decode_set`` gives what ``iter_messages`` yields (same messages, same
offsets, same CRC checks, wrappers unpacked with the §4 offset rule), cut
into pieces a columnar consumer assembles without touching a row:

* a ``RunPiece`` is a run of plain entries of one length and header (a
  producer's fixed-size records, the common case): entry ``i`` sits at
  ``pos + i * stride``, so its offsets are arithmetic, and its payloads are
  copied out in one strided gather;
* a ``LoosePiece`` holds everything else entry by entry (other sizes,
  compressed wrappers, odd headers), as ``iter_messages`` decodes it.

The gather is the caller's (``gather(pos, stride, count, header)``: the
payload bytes ``[header, stride)`` of ``count`` entries from ``pos``,
concatenated), because the standard library has no fast strided copy and
``wire`` uses the standard library only; the Spark source passes Arrow's.
What the gather returns is checked here, so a wrong gather cannot pass bad
payloads.

Why it is fast: a run's length, magic and attributes bytes are compared as
strided slices of the set (one C-speed slice per header byte), and its CRCs
are checked with two CRC calls in all (``_run_crcs_hold``).

stdlib only, like the rest of ``wire`` (the CRC function is ``wire.crc``'s).
"""

from __future__ import annotations

import struct
import threading
from typing import Callable, NamedTuple

from .crc import crc32, crc32_zero_extend
from .errors import InvalidMessageError
from .message import CODEC_MASK, MAGIC_0, MAGIC_1
from .reading import iter_messages

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# Shortest run worth a gather; shorter ones go entry by entry.
MIN_RUN = 8
# A run is measured in windows growing from MIN_RUN entries, so a set whose sizes
# vary costs O(entries), not O(entries^2).
_WINDOW_GROWTH = 8
# A run's payloads must be at least a CRC long (``_run_crcs_hold`` spaces the stored
# CRCs by the payload size); shorter ones go entry by entry.
_MIN_RUN_PAYLOAD = 4
# Arrow's binary offsets are int32.
_MAX_VALUE_BYTES = (1 << 31) - 1

Gather = Callable[[int, int, int, int], object]  # (pos, stride, count, header) -> payload bytes (a buffer)


class RunPiece(NamedTuple):
    """``count`` plain entries of ``stride`` bytes from ``pos`` (relative to the set), each a
    ``stride - header``-byte payload after its header; ``payloads`` is the gather's buffer."""

    pos: int
    stride: int
    header: int
    count: int  # type: ignore[assignment]  # the public field name shadows tuple.count
    payloads: object

    @property
    def payload_bytes(self) -> int:
        return self.stride - self.header


class LoosePiece(NamedTuple):
    """Messages decoded one by one; offsets relative to the set."""

    offsets: list[int]
    next_offsets: list[int]
    payloads: list[bytes]


class DecodedSet(NamedTuple):
    """The complete entries of a fetched set as pieces, in order."""

    base_offset: int
    pieces: list[RunPiece | LoosePiece]
    # messages (a wrapper counts its inner messages); the public field name shadows tuple.count
    count: int  # type: ignore[assignment]
    valid_bytes: int  # bytes of complete entries: where the next fetch starts, relative to the set


def decode_set(data: bytes | bytearray, gather: Gather, base_offset: int = 0, end: int | None = None) -> DecodedSet:
    """Decode the complete entries of the fetched set ``data[:end]`` into pieces (see the
    module docstring); ``end`` lets a reused receive buffer be decoded in place.

    Equal to ``iter_messages(data[:end], base_offset)`` message for message; a
    partial trailing entry is left out (``valid_bytes`` stops before it).
    Raises ``InvalidMessageError`` on the first bad entry (nothing is
    returned then).
    """
    end = len(data) if end is None else end
    assert 0 <= end <= len(data)
    unpack_length, unpack_crc = _INT32.unpack_from, _UINT32.unpack_from
    pieces: list[RunPiece | LoosePiece] = []
    loose = LoosePiece([], [], [])
    count = value_bytes = pos = retry_run_at = 0
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
                loose.offsets.append(message.offset - base_offset)
                loose.next_offsets.append(message.next_offset - base_offset)
                loose.payloads.append(message.payload)
                value_bytes += len(message.payload)
                count += 1
            pos = stop
            continue
        if pos >= retry_run_at and n + 4 - header >= _MIN_RUN_PAYLOAD:
            # The entry MIN_RUN - 1 strides on has this length too: maybe a run.
            stride = n + 4
            most = (end - pos) // stride
            probe = pos + (MIN_RUN - 1) * stride
            if most >= MIN_RUN and unpack_length(data, probe)[0] == n:
                run = _run_length(data, pos, stride, header - 4, most)
                if run >= MIN_RUN:
                    if loose.offsets:
                        pieces.append(loose)
                        loose = LoosePiece([], [], [])
                    payloads = gather(pos, stride, run, header)
                    if not _run_crcs_hold(data, pos, stride, header, run, payloads):
                        _raise_first_bad_crc(data, pos, stride, header, run, base_offset)
                    pieces.append(RunPiece(pos, stride, header, run, payloads))
                    value_bytes += run * (stride - header)
                    count += run
                    pos += run * stride
                    continue
                retry_run_at = pos + run * stride  # a short run: not measured again entry by entry
            else:
                retry_run_at = probe
        # A plain entry on its own: iter_messages' fast path, inline.
        payload = data[pos + header:stop]
        if type(payload) is not bytes:
            payload = bytes(payload)
        if crc32(payload) != unpack_crc(data, pos + header - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        loose.offsets.append(pos)
        loose.next_offsets.append(stop)
        loose.payloads.append(payload)
        value_bytes += stop - pos - header
        count += 1
        pos = stop
    if loose.offsets:
        pieces.append(loose)
    if value_bytes > _MAX_VALUE_BYTES:
        raise InvalidMessageError(
            "one fetch decodes to 2 GiB of payload or more (Arrow's binary limit); use a smaller fetch size"
        )
    return DecodedSet(base_offset, pieces, count, pos)


def _run_length(data: bytes | bytearray, pos: int, stride: int, prefix: int, most: int) -> int:
    """How many entries from ``pos`` (at most ``most``) share the first one's ``prefix`` header
    bytes (length prefix, magic[, attributes]), i.e. sit at a fixed ``stride``."""
    checked = 0
    # A fetch of equal-sized messages is usually one run to its end: try that window first.
    whole = _INT32.unpack_from(data, pos + (most - 1) * stride)[0] == stride - 4
    window = most if whole else MIN_RUN
    while checked < most:
        count = min(window, most - checked)
        at = pos + checked * stride
        stop = at + count * stride
        same = count
        for lane in range(prefix):
            expected = data[pos + lane]
            strided = data[at + lane:stop:stride]
            if strided.count(expected) != count:  # the rare case: find where the run ends
                same = min(same, count - len(strided.lstrip(bytes((expected,)))))
                if same == 0:
                    break
        checked += same
        if same < count:
            break
        window *= _WINDOW_GROWTH
    return checked


class _Zeros(NamedTuple):
    """Per (payload size, run length): the spaced-CRC buffer and two CRCs of zeros."""

    spaced: bytearray  # payload_bytes * count bytes; lanes 0-3 of each payload-sized slot are written
    crc_of_slot: int  # crc32(bytes(payload_bytes))
    crc_of_all: int  # crc32(bytes(payload_bytes * count))


_local = threading.local()  # each thread its own spaced buffers (they are written in place)
_MAX_ZEROS = 8


def _zeros(payload_bytes: int, count: int) -> _Zeros:
    cache: dict[tuple[int, int], _Zeros] = _local.__dict__.setdefault("zeros", {})
    found = cache.get((payload_bytes, count))
    if found is None:
        if len(cache) >= _MAX_ZEROS:
            cache.clear()
        found = cache[payload_bytes, count] = _Zeros(
            bytearray(payload_bytes * count), crc32(bytes(payload_bytes)), crc32_zero_extend(0, payload_bytes * count))
    return found


def _run_crcs_hold(data: bytes | bytearray, pos: int, stride: int, header: int, count: int,
                   payloads: object) -> bool:
    """Whether every entry of the run holds the CRC of its payload, with two CRC calls.

    ``payloads`` is the gathered ``p_0 + p_1 + ...`` (``n`` bytes each), the stored CRCs are
    ``c_i``.  CRC-32 combines: ``crc(a + b) = M_len(b)(crc(a)) ^ crc(b)``, ``M_k`` the linear map
    "followed by k zero bytes".  So for valid entries ``crc(payloads) = XOR_i M_{n(count-1-i)}(c_i)``.
    The right side is, up to the affine constants of CRC-32, the CRC of ``le(c_0) 0^(n-4) le(c_1)
    0^(n-4) ...`` (a 32-bit value fed into the register then n - 4 zero bytes is ``M_n`` of it), shifted
    by one more ``M_n``: hence the comparison below.  ``M`` is invertible, so a single bad entry
    always changes the left side; only damage to several entries that cancels exactly could pass
    (a 2^-32 chance for random damage, like any one CRC-32).
    """
    n = stride - header
    zeros = _zeros(n, count)
    spaced = zeros.spaced
    crc_at, end = pos + header - 4, pos + count * stride
    for byte in range(4):  # le(c_i) at i * n: the stored big-endian CRC bytes reversed
        spaced[3 - byte::n] = data[crc_at + byte:end:stride]
    extended = crc32_zero_extend(crc32(payloads), n) ^ zeros.crc_of_slot  # type: ignore[arg-type]
    return extended == crc32(spaced) ^ zeros.crc_of_all


def _raise_first_bad_crc(data: bytes | bytearray, pos: int, stride: int, header: int, count: int,
                         base_offset: int) -> None:
    """Find the run's first entry whose CRC is wrong, entry by entry in ``data``, and raise naming it."""
    view = memoryview(data)
    for i in range(count):
        at = pos + i * stride
        if crc32(view[at + header:at + stride]) != _UINT32.unpack_from(data, at + header - 4)[0]:
            raise InvalidMessageError(f"CRC mismatch in the entry at offset {base_offset + at}")
    # Every entry is valid, so the gathered payloads were not the entries' payloads.
    raise AssertionError("the gather returned other bytes than the run's payloads")
