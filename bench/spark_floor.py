"""Spark's own floor: a synthetic source that yields prebuilt RecordBatches (no I/O, no decoding).

``bench/spark_bench.py`` runs it beside the trikafka source, into the same
sinks, so the ratio of the two rates is what the source costs on top of what
Spark itself costs on the machine.
"""

from __future__ import annotations

import random


def register_synthetic_source(spark, rows: int, payload_bytes: int, partitions: int,  # type: ignore[no-untyped-def]
                              batch_rows: int = 5000) -> str:
    """Register the floor-measuring source under the name it returns: ``rows`` rows of random
    ``payload_bytes`` payloads over ``partitions`` tasks, yielded as prebuilt RecordBatches
    (batch reads, and streaming reads with one micro-batch of all rows)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from trikafka.spark.columns import SCHEMA

    class SyntheticReader(DataSourceReader):
        BATCH_ROWS = batch_rows  # 5000: about what one 1 MiB fetch of 200-byte messages holds

        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            from trikafka.spark.columns import arrow_schema

            rng = random.Random(partition.value)
            n = self.BATCH_ROWS
            batch = pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar("bench", pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.repeat(pa.scalar(partition.value, pa.int32()), n), pa.array(range(n), pa.int64()),
                pa.array(range(1, n + 1), pa.int64()),
                pa.array([rng.randbytes(payload_bytes) for _ in range(n)], pa.binary()),
            ], schema=arrow_schema())
            left = rows // partitions
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self):  # type: ignore[no-untyped-def]
            return {"read": 0}

        def latestOffset(self, start=None, limit=None):  # type: ignore[no-untyped-def]
            return {"read": 1}

        def prepareForTriggerAvailableNow(self):  # type: ignore[no-untyped-def]
            pass

        def partitions(self, start, end):  # type: ignore[no-untyped-def]
            return SyntheticReader().partitions() if start != end else []

        def read(self, partition):  # type: ignore[no-untyped-def]
            return SyntheticReader().read(partition)

    class SyntheticSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "trikafka_bench_synthetic"

        def schema(self):  # type: ignore[no-untyped-def]
            return SCHEMA

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return SyntheticReader()

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return SyntheticStreamReader()

    spark.dataSource.register(SyntheticSource)
    return SyntheticSource.name()
