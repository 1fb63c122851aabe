"""Named cases for ``decode_set_columns``: which path a set takes and what it reports."""

from __future__ import annotations

import pytest

import trikafka.wire.columns as wire_columns
from trikafka.wire import Codec, InvalidMessageError, build_message_set, iter_messages
from trikafka.wire.columns import MIN_RUN, decode_set_columns


def _rows(columns):  # type: ignore[no-untyped-def]
    ends = list(columns.value_ends)
    payloads = [columns.values[a:b] for a, b in zip(ends, ends[1:])]
    base = columns.base_offset
    return [(base + o, base + n, p) for o, n, p in zip(columns.offsets, columns.next_offsets, payloads)]


def _expected(data: bytes, base: int = 0):  # type: ignore[no-untyped-def]
    return [(m.offset, m.next_offset, m.payload) for m in iter_messages(data, base)]


@pytest.fixture
def runs_taken(monkeypatch):  # type: ignore[no-untyped-def]
    """The (position, stride, count) of every run the strided path decodes."""
    taken: list[tuple[int, int, int]] = []
    real = wire_columns._take_run

    def spy(data, pos, stride, header, run, *rest):  # type: ignore[no-untyped-def]
        taken.append((pos, stride, run))
        return real(data, pos, stride, header, run, *rest)

    monkeypatch.setattr(wire_columns, "_take_run", spy)
    return taken


def test_a_fixed_size_set_is_one_run(runs_taken):  # type: ignore[no-untyped-def]
    data = build_message_set([bytes([i]) * 50 for i in range(100)])
    columns = decode_set_columns(data, 1 << 62)
    assert _rows(columns) == _expected(data, 1 << 62)
    assert runs_taken == [(0, 60, 100)]
    assert columns.valid_bytes == len(data)


def test_a_partial_tail_ends_the_run_and_is_left_for_the_next_fetch(runs_taken):  # type: ignore[no-untyped-def]
    data = build_message_set([b"x" * 20] * 40)
    cut = data[:-7]
    columns = decode_set_columns(cut, 5)
    assert _rows(columns) == _expected(cut, 5)
    assert columns.count == 39 and columns.valid_bytes == 39 * 30
    assert runs_taken == [(0, 30, 39)]


def test_runs_of_either_magic_next_to_other_sizes_and_wrappers(runs_taken):  # type: ignore[no-untyped-def]
    data = b"".join([
        build_message_set([b"a" * 7] * (MIN_RUN + 3), magic=0),
        build_message_set([b"b" * 9, b"c" * 3]),
        build_message_set([b"d" * 30] * 5, codec=Codec.GZIP),
        build_message_set([b"e" * 11] * (3 * MIN_RUN)),
        build_message_set([b"f" * 11] * (MIN_RUN - 2)),  # same size, short: continues the run above
    ])
    assert _rows(decode_set_columns(data, 3)) == _expected(data, 3)
    assert [stride for _, stride, _ in runs_taken] == [16, 21]


def test_short_equal_stretches_stay_on_the_entry_path(runs_taken):  # type: ignore[no-untyped-def]
    data = build_message_set([b"z" * (10 + (i // 3) % 2) for i in range(60)])  # stretches of 3
    assert _rows(decode_set_columns(data)) == _expected(data)
    assert runs_taken == []


def test_a_crc_error_inside_a_run_names_that_entry():  # type: ignore[no-untyped-def]
    data = bytearray(build_message_set([b"p" * 16] * 50))
    data[26 * 17 + 12] ^= 1  # a payload byte of entry 17 (26 bytes per entry)
    with pytest.raises(InvalidMessageError, match=f"at offset {1000 + 26 * 17}$"):
        decode_set_columns(bytes(data), 1000)


@pytest.mark.parametrize("damage", ["last payload", "swapped crcs", "crc lane", "both magics"])
def test_the_one_crc_call_per_run_catches_damage_anywhere_in_it(damage):  # type: ignore[no-untyped-def]
    """The run's CRCs are checked at once (``_crcs_hold``): damage at its last entry, in any
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
            data[4 * stride + header - 4 + (2 if damage == "crc lane" else 0)] ^= 1
            data[6 * stride + header - 1] ^= 1
            bad = 4
        with pytest.raises(InvalidMessageError, match=f"at offset {bad * stride}$"):
            decode_set_columns(bytes(data))


def test_runs_longer_than_a_block_are_cut_in_blocks(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(wire_columns, "_BLOCK_ENTRIES", 7)
    data = build_message_set([bytes([i % 256]) * 13 for i in range(101)])
    assert _rows(decode_set_columns(data, 9)) == _expected(data, 9)


def test_many_layouts_evict_the_slice_cache(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(wire_columns, "_LAYOUTS", {})
    for size in range(3 * wire_columns._MAX_LAYOUTS):
        data = build_message_set([b"q" * size] * (2 * MIN_RUN))
        assert _rows(decode_set_columns(data)) == _expected(data)
        assert len(wire_columns._LAYOUTS) <= wire_columns._MAX_LAYOUTS


def test_empty_and_header_only_inputs():  # type: ignore[no-untyped-def]
    assert decode_set_columns(b"").count == 0
    assert decode_set_columns(b"\x00\x00").valid_bytes == 0
    with pytest.raises(InvalidMessageError, match="negative entry length"):
        decode_set_columns(b"\xff\xff\xff\xff")
