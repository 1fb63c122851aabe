"""The Spark source's decoding (``wire.columns.decode_set`` with Arrow's gather, then
``RecordBatchBuilder``) equals ``iter_messages``.

Sets are built from segments that exercise both of its paths: runs of
equally sized messages (the gathered path, at least ``MIN_RUN`` long or just
short of it), single messages of any size, magic 0 and magic 1, and
compressed wrappers; then cut anywhere and maybe corrupted in one byte, and
decoded both as they are and from a reused receive buffer holding older
bytes after them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from trikafka.spark.columns import RecordBatchBuilder, arrow_schema, decode_fetched  # noqa: E402
from trikafka.spark.offsets import PartitionKey  # noqa: E402
from trikafka.wire import Codec, InvalidMessageError, build_message_set, iter_messages  # noqa: E402
from trikafka.wire.columns import MIN_RUN  # noqa: E402

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


def _messages(data: bytes | bytearray, base: int, end: int | None = None):
    decoded = decode_fetched(data, base, end)
    batch = RecordBatchBuilder(PartitionKey("t", 0, 0), arrow_schema()).build(decoded)
    batch.validate(full=True)
    rows = [(r["offset"], r["next_offset"], r["payload"]) for r in batch.to_pylist()]
    # The next fetch starts right after the last complete entry.
    assert decoded.valid_bytes == (max(r[1] for r in rows) - base if rows else 0) or not rows
    return rows


@settings(max_examples=300)
@given(segments, st.data())
def test_column_decoding_agrees_with_iter_messages(parts, data):
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
    reused = bytearray(cut) + whole  # a receive buffer: older bytes after this fetch's end
    assert _outcome(lambda: _messages(reused, base, len(cut))) == expected
