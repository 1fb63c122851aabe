"""``decode_set_columns`` (the Spark source's decoder) equals ``iter_messages``.

Sets are built from segments that exercise both of its paths: runs of
equally sized messages (the strided path, at least ``MIN_RUN`` long or just
short of it), single messages of any size, magic 0 and magic 1, and
compressed wrappers; then cut anywhere and maybe corrupted in one byte.
"""

from __future__ import annotations

from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

import trikafka.wire.columns as wire_columns
from trikafka.wire import Codec, InvalidMessageError, build_message_set, iter_messages
from trikafka.wire.columns import MIN_RUN, decode_set_columns

shapes = st.sampled_from([(0, Codec.NONE), (1, Codec.NONE), (1, Codec.GZIP), (1, Codec.SNAPPY)])


@st.composite
def runs(draw):
    """A run of equally sized payloads, plain (so it can take the strided path)."""
    size = draw(st.integers(0, 40))
    count = draw(st.sampled_from([MIN_RUN - 1, MIN_RUN, MIN_RUN + 1, 3 * MIN_RUN + 5]))
    payloads = [draw(st.binary(min_size=size, max_size=size)) for _ in range(count)]
    return payloads, draw(st.sampled_from([0, 1])), Codec.NONE


@st.composite
def singles(draw):
    payloads = draw(st.lists(st.binary(max_size=60), max_size=6))
    magic, codec = draw(shapes)
    return payloads, magic, codec


segments = st.lists(st.one_of(runs(), singles()), max_size=5)


def _outcome(fn):
    try:
        return "ok", fn()
    except InvalidMessageError as exc:
        return "invalid", type(exc)


def _messages(data: bytes, base: int):
    columns = decode_set_columns(data, base)
    ends = list(columns.value_ends)
    assert ends[0] == 0 and len(ends) == columns.count + 1
    payloads = [columns.values[a:b] for a, b in zip(ends, ends[1:])]
    assert len(columns.values) == ends[-1]
    assert columns.base_offset == base
    rows = [(base + o, base + n, p) for o, n, p in zip(columns.offsets, columns.next_offsets, payloads)]
    # The next fetch starts right after the last complete entry.
    assert columns.valid_bytes == (max(columns.next_offsets) if rows else 0)
    return rows


@contextmanager
def _small_blocks(entries: int):
    saved = wire_columns._BLOCK_ENTRIES
    wire_columns._BLOCK_ENTRIES = entries
    try:
        yield
    finally:
        wire_columns._BLOCK_ENTRIES = saved


@settings(max_examples=300)
@given(segments, st.data())
def test_decode_set_columns_agrees_with_iter_messages(parts, data):
    """Same messages, offsets and next offsets on whole, cut and corrupted sets; an
    error where iter_messages raises one."""
    whole = b"".join(build_message_set(p, magic=m, codec=c) for p, m, c in parts)
    cut = whole[:data.draw(st.integers(0, len(whole)))] if data.draw(st.booleans()) else whole
    if cut and data.draw(st.booleans()):  # flip one byte: a CRC, length, magic or codec error (or none)
        at = data.draw(st.integers(0, len(cut) - 1))
        cut = cut[:at] + bytes([cut[at] ^ data.draw(st.integers(1, 255))]) + cut[at + 1:]
    base = data.draw(st.integers(0, 1 << 62))
    expected = _outcome(lambda: [(m.offset, m.next_offset, m.payload) for m in iter_messages(cut, base)])
    assert _outcome(lambda: _messages(cut, base)) == expected
    assert _outcome(lambda: _messages(memoryview(bytearray(cut)), base)) == expected
    with _small_blocks(3):  # runs cut into several blocks give the same answer
        assert _outcome(lambda: _messages(cut, base)) == expected
