"""The row layout of the trikafka source and its Arrow form.

One row per consumed message (compressed wrappers unpacked, spec §4.4):

* ``topic``, ``broker``, ``partition``: where it was read;
* ``offset``: byte offset of its top-level entry (spec §5);
* ``next_offset``: the offset a consumer commits after it (for the inner
  messages of a wrapper: the wrapper's start, except the last one's end);
* ``payload``: the message bytes.

Tasks yield ``pyarrow.RecordBatch``es, about twice as fast as tuples; their
schema must equal Spark's Arrow conversion of ``SCHEMA`` exactly, so it is
derived from it once per task.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from trikafka.wire import MessageColumns

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


def columns_to_record_batch(key: PartitionKey, columns: MessageColumns, schema: pa.Schema) -> pa.RecordBatch:
    """One RecordBatch of the decoded ``columns`` read from ``key`` (constant columns via ``pa.repeat``)."""
    count = len(columns.offsets)
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(key.topic, pa.string()), count),
        pa.repeat(pa.scalar(key.broker, pa.int32()), count),
        pa.repeat(pa.scalar(key.partition, pa.int32()), count),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.next_offsets, pa.int64()),
        pa.array(columns.payloads, pa.binary()),
    ], schema=schema)
