"""The rows of the Kafka-format mode: Spark's Kafka source's schema, and its Arrow form.

Columns as spark-sql-kafka names them: ``key`` and ``value`` (binary, null
when the record's is), ``topic``, ``partition``, ``offset`` (the record's
logical offset), ``timestamp`` (its time, ms precision, as a Spark
timestamp), ``timestampType`` (0 CreateTime, 1 LogAppendTime), and with
``includeHeaders`` ``headers`` (an array of key/value structs, in order).
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from trikafka.kafka.batch import BatchHeader
from trikafka.kafka.records import CREATE_TIME, LOG_APPEND_TIME, Record

from .columns import arrow_schema

_BASE = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
HEADERS_FIELD = StructField("headers", ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType())])))
KAFKA_SCHEMA = StructType(_BASE)
KAFKA_SCHEMA_WITH_HEADERS = StructType([*_BASE, HEADERS_FIELD])


def kafka_schema(include_headers: bool) -> StructType:
    """The source's schema: Spark's Kafka source's, with ``headers`` when asked for."""
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


class KafkaBatchBuilder:
    """Arrow RecordBatches of one partition's records, in Spark's Arrow form of ``kafka_schema``."""

    def __init__(self, topic: str, partition: int, include_headers: bool):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(kafka_schema(include_headers))

    def build(self, rows: Sequence[tuple[BatchHeader, Record]]) -> pa.RecordBatch:
        """One RecordBatch of ``rows`` (each record with the header of its batch)."""
        count = len(rows)
        records = [record for _, record in rows]
        columns = [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(self.schema.field("timestamp").type),
            pa.array([LOG_APPEND_TIME if h.log_append_time else CREATE_TIME for h, _ in rows], pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                                    self.schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
