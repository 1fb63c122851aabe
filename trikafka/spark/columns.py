"""The row layout of the trikafka source and its Arrow form.

One row per consumed message (compressed wrappers unpacked, spec §3.3):

* ``topic``, ``broker``, ``partition``: where it was read;
* ``offset``: byte offset of its top-level entry (spec §4);
* ``next_offset``: the offset a consumer commits after it (for the inner
  messages of a wrapper: the wrapper's start, except the last one's end);
* ``payload``: the message bytes.

Tasks yield ``pyarrow.RecordBatch``es, about twice as fast as tuples; their
schema must equal Spark's Arrow conversion of ``SCHEMA`` exactly, so it is
derived from it once per task.  A fetched set is decoded by
``wire.columns.decode_set`` with an Arrow gather (``decode_fetched``) and
the batches adopt what it gathered (no per-row Python objects).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from trikafka.wire.columns import DecodedSet, LoosePiece, RunPiece, decode_set

from .offsets import PartitionKey

SCHEMA = StructType([
    StructField("topic", StringType(), nullable=False),
    StructField("broker", IntegerType(), nullable=False),
    StructField("partition", IntegerType(), nullable=False),
    StructField("offset", LongType(), nullable=False),
    StructField("next_offset", LongType(), nullable=False),
    StructField("payload", BinaryType(), nullable=False),
])


def arrow_schema(schema: StructType = SCHEMA) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (nullability included)."""
    from pyspark.sql.pandas.types import to_arrow_schema  # needs no pandas

    return to_arrow_schema(schema, timezone="UTC")


class ArrowGather:
    """``wire.columns``' gather over one fetched buffer, with Arrow: the payloads of a run are
    cut out of a fixed-size-binary view of the buffer (no copy) by ``binary_slice``, one C
    pass writing them back to back."""

    __slots__ = ("_buffer",)

    def __init__(self, data: bytes | bytearray):
        self._buffer = pa.py_buffer(data)  # a view: the caller keeps ``data`` unchanged while gathering

    def __call__(self, pos: int, stride: int, count: int, header: int) -> pa.Buffer:
        import pyarrow.compute as pc  # here and below: planners never need its 25 ms import
        rows = pa.FixedSizeBinaryArray.from_buffers(pa.binary(stride), count,
                                                    [None, self._buffer.slice(pos, count * stride)])
        values = pc.binary_slice(rows, header, stride).buffers()[1]
        size = count * (stride - header)
        return values if values.size == size else values.slice(0, size)


def decode_fetched(data: bytes | bytearray, base_offset: int, end: int | None = None) -> DecodedSet:
    """``wire.columns.decode_set`` of ``data[:end]`` with the Arrow gather; what it returns
    owns its memory, so ``data`` may be reused at once."""
    return decode_set(data, ArrowGather(data), base_offset, end)


_MAX_CACHED = 16  # layouts (strides, payload sizes) kept per worker process
_MIN_CACHED = 1 << 14  # entries a cached column covers at least
# stride -> int64 i * stride, payload size -> int32 i * size: they depend on the layout only, so
# every task of a (reused) Spark worker shares them instead of building ~2 ms of them per task.
_POSITIONS: dict[int, pa.Array] = {}
_ENDS: dict[int, pa.Array] = {}


class RecordBatchBuilder:
    """Builds one task's RecordBatches from decoded sets without touching a row.

    A run's offset columns are a cached ``i * stride`` array plus the run's
    absolute start (one vectorised add), its payload column adopts the
    gathered payloads with cached ``i * payload size`` ends (Arrow's binary
    layout), and the constant columns are built once, for the longest batch, and sliced.
    Loose messages are converted entry by entry (they are the rare case).
    """

    def __init__(self, key: PartitionKey, schema: pa.Schema):
        self.key = key
        self.schema = schema
        self._constants: tuple[int, list[pa.Array]] = (-1, [])

    def build(self, decoded: DecodedSet) -> pa.RecordBatch:
        count = decoded.count
        if self._constants[0] < count:
            # Built for the longest batch yet and sliced (no copy) for shorter ones: batch lengths
            # differ by an entry or two from fetch to fetch, and a rebuild costs ~20 ns a row.
            rows = max(count, _MIN_CACHED)
            self._constants = (rows, [
                pa.repeat(pa.scalar(self.key.topic, pa.string()), rows),
                pa.repeat(pa.scalar(self.key.broker, pa.int32()), rows),
                pa.repeat(pa.scalar(self.key.partition, pa.int32()), rows),
            ])
        constants = self._constants[1]
        if self._constants[0] != count:
            constants = [column.slice(0, count) for column in constants]
        parts = [self._piece(piece, decoded.base_offset) for piece in decoded.pieces]
        if len(parts) == 1:
            offsets, next_offsets, payloads = parts[0]
        elif parts:
            offsets, next_offsets, payloads = (pa.concat_arrays(list(column)) for column in zip(*parts))
        else:
            offsets = next_offsets = pa.array([], pa.int64())
            payloads = pa.array([], pa.binary())
        return pa.RecordBatch.from_arrays([*constants, offsets, next_offsets, payloads], schema=self.schema)

    def _piece(self, piece: RunPiece | LoosePiece, base_offset: int) -> tuple[pa.Array, pa.Array, pa.Array]:
        import pyarrow.compute as pc

        int64 = pa.int64()
        if isinstance(piece, LoosePiece):
            base = pa.scalar(base_offset, int64)
            return (pc.add_checked(pa.array(piece.offsets, int64), base),
                    pc.add_checked(pa.array(piece.next_offsets, int64), base),
                    pa.array(piece.payloads, pa.binary()))
        count, start = piece.count, pa.scalar(base_offset + piece.pos, int64)
        positions = _multiples(_POSITIONS, piece.stride, count, int64)
        ends = _multiples(_ENDS, piece.payload_bytes, count, pa.int32()).buffers()[1].slice(0, 4 * (count + 1))
        return (pc.add_checked(positions.slice(0, count), start), pc.add_checked(positions.slice(1, count), start),
                pa.Array.from_buffers(pa.binary(), count, [None, ends, piece.payloads]))


def _multiples(cache: dict[int, pa.Array], step: int, count: int, kind: pa.DataType) -> pa.Array:
    """``i * step`` for ``i`` in ``0..count`` at least, from ``cache`` (built when missing or
    short; a cache of more than ``_MAX_CACHED`` layouts starts over)."""
    found = cache.get(step)
    if found is None or len(found) <= count:
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        found = cache[step] = pa.array(range(0, max(count + 1, _MIN_CACHED) * step, step), kind)
    return found
