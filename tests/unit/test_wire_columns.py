"""Named cases for ``wire.columns.decode_set``: which pieces a set becomes and what they report.

The gather is the Spark source's (``trikafka.spark.columns.ArrowGather``); a
spy around it records the runs, and a lying gather shows that its output is
checked, not trusted.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

import trikafka.wire.columns as wire_columns  # noqa: E402
from trikafka.spark.columns import ArrowGather  # noqa: E402
from trikafka.wire import Codec, InvalidMessageError, build_message_set, iter_messages  # noqa: E402
from trikafka.wire.columns import MIN_RUN, LoosePiece, RunPiece, decode_set  # noqa: E402


def _decode(data: bytes | bytearray, base: int = 0, end: int | None = None, runs=None):  # type: ignore[no-untyped-def]
    gather = ArrowGather(data)

    def spy(pos, stride, count, header):  # type: ignore[no-untyped-def]
        if runs is not None:
            runs.append((pos, stride, count))
        return gather(pos, stride, count, header)

    return decode_set(data, spy, base, end)


def _rows(decoded):  # type: ignore[no-untyped-def]
    rows = []
    base = decoded.base_offset
    for piece in decoded.pieces:
        if isinstance(piece, RunPiece):
            values = bytes(piece.payloads)
            n = piece.payload_bytes
            for i in range(piece.count):
                at = piece.pos + i * piece.stride
                rows.append((base + at, base + at + piece.stride, values[i * n:(i + 1) * n]))
        else:
            rows += [(base + o, base + e, p) for o, e, p in zip(piece.offsets, piece.next_offsets, piece.payloads)]
    assert len(rows) == decoded.count
    return rows


def _expected(data: bytes, base: int = 0):  # type: ignore[no-untyped-def]
    return [(m.offset, m.next_offset, m.payload) for m in iter_messages(data, base)]


def test_a_fixed_size_set_is_one_run():  # type: ignore[no-untyped-def]
    data = build_message_set([bytes([i]) * 50 for i in range(100)])
    runs: list = []
    decoded = _decode(data, 1 << 62, runs=runs)
    assert _rows(decoded) == _expected(data, 1 << 62)
    assert runs == [(0, 60, 100)] and [type(p) for p in decoded.pieces] == [RunPiece]
    assert decoded.valid_bytes == len(data)


def test_a_partial_tail_ends_the_run_and_is_left_for_the_next_fetch():  # type: ignore[no-untyped-def]
    data = build_message_set([b"x" * 20] * 40)
    cut = data[:-7]
    runs: list = []
    decoded = _decode(cut, 5, runs=runs)
    assert _rows(decoded) == _expected(cut, 5)
    assert decoded.count == 39 and decoded.valid_bytes == 39 * 30
    assert runs == [(0, 30, 39)]


def test_a_reused_buffer_is_decoded_up_to_its_end_only():  # type: ignore[no-untyped-def]
    data = build_message_set([b"y" * 12] * 30)
    buffer = bytearray(data) + build_message_set([b"stale" * 3] * 20)  # bytes of an earlier fetch
    decoded = _decode(buffer, 7, end=len(data))
    assert _rows(decoded) == _expected(data, 7) and decoded.valid_bytes == len(data)


def test_runs_of_either_magic_next_to_other_sizes_and_wrappers():  # type: ignore[no-untyped-def]
    data = b"".join([
        build_message_set([b"a" * 7] * (MIN_RUN + 3), magic=0),
        build_message_set([b"b" * 9, b"c" * 3]),
        build_message_set([b"d" * 30] * 5, codec=Codec.GZIP),
        build_message_set([b"e" * 11] * (3 * MIN_RUN)),
        build_message_set([b"f" * 11] * (MIN_RUN - 2)),  # same size, short: continues the run above
    ])
    runs: list = []
    decoded = _decode(data, 3, runs=runs)
    assert _rows(decoded) == _expected(data, 3)
    assert [stride for _, stride, _ in runs] == [16, 21]
    assert [type(p) for p in decoded.pieces] == [RunPiece, LoosePiece, RunPiece]


def test_short_equal_stretches_and_tiny_payloads_stay_on_the_entry_path():  # type: ignore[no-untyped-def]
    runs: list = []
    for data in (build_message_set([b"z" * (10 + (i // 3) % 2) for i in range(60)]),  # stretches of 3
                 build_message_set([b"abc"] * 40),  # payloads shorter than a CRC
                 build_message_set([b""] * 40, magic=0)):
        assert _rows(_decode(data, runs=runs)) == _expected(data)
    assert runs == []


def test_a_run_broken_in_the_middle_is_measured_to_the_break():  # type: ignore[no-untyped-def]
    # The last entry has the first one's size (the optimistic whole-fetch window), one in between not.
    payloads = [b"m" * 20] * 50
    payloads[30] = b"m" * 21
    payloads[31] = b"m" * 19
    data = build_message_set(payloads)
    runs: list = []
    assert _rows(_decode(data, runs=runs)) == _expected(data)
    # After the odd entry at 900 whose probe failed, entries up to that probe (900 + 7 * 31)
    # go one by one; the run picks up again at the next entry after it, entry 38.
    assert runs == [(0, 30, 30), (38 * 30, 30, 12)]


def test_a_crc_error_inside_a_run_names_that_entry():  # type: ignore[no-untyped-def]
    data = bytearray(build_message_set([b"p" * 16] * 50))
    data[26 * 17 + 12] ^= 1  # a payload byte of entry 17 (26 bytes per entry)
    with pytest.raises(InvalidMessageError, match=f"at offset {1000 + 26 * 17}$"):
        _decode(bytes(data), 1000)


@pytest.mark.parametrize("damage", ["last payload", "swapped crcs", "crc lane", "both magics"])
def test_the_two_crc_calls_per_run_catch_damage_anywhere_in_it(damage):  # type: ignore[no-untyped-def]
    """The run's CRCs are checked at once (``_run_crcs_hold``): damage at its last entry, in any
    byte lane of a stored CRC, or spread over two entries is still found and named."""
    for magic, header in ((1, 10), (0, 9)):
        data = bytearray(build_message_set([bytes([i]) * 16 for i in range(3 * MIN_RUN)], magic=magic))
        stride, last = 16 + header, 3 * MIN_RUN - 1
        if damage == "last payload":
            data[last * stride + header + 15] ^= 0x80
            bad = last
        elif damage == "swapped crcs":
            a, b = 3 * stride + header - 4, 5 * stride + header - 4
            data[a:a + 4], data[b:b + 4] = data[b:b + 4], data[a:a + 4]
            bad = 3
        else:
            for lane in range(4):
                broken = bytearray(data)
                broken[4 * stride + header - 4 + lane] ^= 1
                with pytest.raises(InvalidMessageError, match=f"at offset {4 * stride}$"):
                    _decode(bytes(broken))
            data[4 * stride + header - 4 + (2 if damage == "crc lane" else 0)] ^= 1
            data[6 * stride + header - 1] ^= 1
            bad = 4
        with pytest.raises(InvalidMessageError, match=f"at offset {bad * stride}$"):
            _decode(bytes(data))


def test_a_gather_that_returns_other_bytes_is_caught():  # type: ignore[no-untyped-def]
    data = build_message_set([bytes([i]) * 16 for i in range(20)])

    def lying(pos, stride, count, header):  # type: ignore[no-untyped-def]
        return bytes(16) * count

    with pytest.raises(AssertionError, match="the gather returned other bytes"):
        decode_set(data, lying)


def test_many_layouts_keep_the_spaced_buffer_cache_bounded():  # type: ignore[no-untyped-def]
    for size in range(4, 4 + 3 * wire_columns._MAX_ZEROS):
        data = build_message_set([b"q" * size] * (2 * MIN_RUN))
        assert _rows(_decode(data)) == _expected(data)
        assert len(wire_columns._local.zeros) <= wire_columns._MAX_ZEROS


def test_empty_and_header_only_inputs():  # type: ignore[no-untyped-def]
    assert _decode(b"").count == 0
    assert _decode(b"\x00\x00").valid_bytes == 0
    with pytest.raises(InvalidMessageError, match="negative entry length"):
        _decode(b"\xff\xff\xff\xff")
