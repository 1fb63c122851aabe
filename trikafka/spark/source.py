"""``spark.read.format("trikafka")`` and ``spark.readStream.format("trikafka")``.

The Hadoop load pattern of the Kafka papers on PySpark's Python Data Source
API: one input partition per broker/topic/partition (the design doc's "one
map task per node/topic/partition"), each task reading its byte range with
the blocking client and yielding Arrow record batches.

Where things run (PySpark 4.x): ``schema()`` in a short-lived worker at
``load()``; ``partitions()`` in a planner worker at the first action;
``read()`` in tasks on unpickled copies of the reader.  Readers therefore
carry only plain, picklable data (parsed options, planned ranges) and open
their sockets inside ``read()``.

Usage::

    df = (spark.read.format("trikafka")
          .option("brokers", "0:127.0.0.1:9092,1:127.0.0.1:9093")
          .option("topics", "pageviews")
          .load())

The options are documented in ``trikafka.spark.options``; the streaming
reader in ``trikafka.spark.stream``.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .columns import SCHEMA
from .kafka_columns import kafka_schema
from .kafka_options import is_kafka_mode, parse_kafka_options
from .options import OptionError, SourceOptions, parse_options
from .planning import plan_batch
from .tasks import RangePartition, commit_to_group, read_partition

SOURCE_NAME = "trikafka"


def _check_schema(schema: StructType, expected: StructType = SCHEMA) -> None:
    if schema != expected:
        raise OptionError(
            f"the trikafka source has a fixed schema {expected.simpleString()}; got {schema.simpleString()}"
        )


class TrikafkaBatchReader(DataSourceReader):
    """Batch reads: ``partitions()`` plans byte ranges, ``read()`` fetches one."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(r) for r in plan_batch(self.options)]

    def read(self, partition: InputPartition) -> Iterator["object"]:
        yield from read_partition(self.options, partition)
        if isinstance(partition, RangePartition):
            # Like the 0.7 Hadoop mappers: a task that read its whole range records it.
            commit_to_group(self.options, {partition.planned.key: partition.planned.end})


class TrikafkaDataSource(DataSource):
    """The ``trikafka`` data source: batch and streaming reads of 0.7 topics, and of Kafka-format
    topics (docs/protocol.md §16.6) when the option ``kafka.bootstrap.servers`` is set
    (``trikafka.spark.kafka_source``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        # Parsed here to fail at load() with a clear message, not at the first action.
        if is_kafka_mode(self.options):
            return kafka_schema(parse_kafka_options(self.options, streaming=False).include_headers)
        parse_options(self.options)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_kafka_mode(self.options):
            from .kafka_source import KafkaBatchReader

            options = parse_kafka_options(self.options, streaming=False)
            _check_schema(schema, kafka_schema(options.include_headers))
            return KafkaBatchReader(options)
        _check_schema(schema)
        return TrikafkaBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import TrikafkaStreamReader

        if is_kafka_mode(self.options):
            from .kafka_source import KafkaStreamReader

            kafka_options = parse_kafka_options(self.options, streaming=True)
            _check_schema(schema, kafka_schema(kafka_options.include_headers))
            return KafkaStreamReader(kafka_options)
        _check_schema(schema)
        options = parse_options(self.options)
        if options.ending.kind != "latest":
            raise OptionError("endingOffsets applies to batch reads only")
        return TrikafkaStreamReader(options)
