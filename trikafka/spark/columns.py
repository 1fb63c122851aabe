"""The row layout of the trikafka source and its Arrow form.

One row per consumed message (compressed wrappers unpacked, spec §4.4):

* ``topic``, ``broker``, ``partition``: where it was read;
* ``offset``: byte offset of its top-level entry (spec §5);
* ``next_offset``: the offset a consumer commits after it (for the inner
  messages of a wrapper: the wrapper's start, except the last one's end);
* ``payload``: the message bytes.

Tasks yield ``pyarrow.RecordBatch``es, about twice as fast as tuples; their
schema must equal Spark's Arrow conversion of ``SCHEMA`` exactly, so it is
derived from it once per task.  The batches adopt the buffers that
``wire.columns.decode_set_columns`` fills (no per-row Python objects).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from trikafka.wire.columns import SetColumns

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


class RecordBatchBuilder:
    """Wraps one task's decoded chunks as RecordBatches without touching a row.

    The payload column adopts the decoder's buffers as they are (Arrow's
    binary layout: int32 ends + values), the offset columns are its relative
    int64 arrays plus the fetch's base offset (one vectorised add), and the
    constant columns are built once per batch length.
    """

    def __init__(self, key: PartitionKey, schema: pa.Schema):
        self.key = key
        self.schema = schema
        self._constants: tuple[int, list[pa.Array]] = (-1, [])

    def build(self, columns: SetColumns) -> pa.RecordBatch:
        count = columns.count
        if self._constants[0] != count:
            self._constants = (count, [
                pa.repeat(pa.scalar(self.key.topic, pa.string()), count),
                pa.repeat(pa.scalar(self.key.broker, pa.int32()), count),
                pa.repeat(pa.scalar(self.key.partition, pa.int32()), count),
            ])
        int64, base = pa.int64(), pa.scalar(columns.base_offset, pa.int64())
        return pa.RecordBatch.from_arrays([
            *self._constants[1],
            pc.add_checked(pa.Array.from_buffers(int64, count, [None, pa.py_buffer(columns.offsets)]), base),
            pc.add_checked(pa.Array.from_buffers(int64, count, [None, pa.py_buffer(columns.next_offsets)]), base),
            pa.Array.from_buffers(pa.binary(), count,
                                  [None, pa.py_buffer(columns.value_ends), pa.py_buffer(columns.values)]),
        ], schema=self.schema)
