"""Task bodies shared by batch (``source``) and streaming (``stream``) reads.

``RangePartition`` carries one planned byte range to a Spark task;
``read_partition`` fetches it as Arrow record batches; ``commit_to_group``
publishes what was read to the ``commitToGroup`` registry.
"""

from __future__ import annotations

import logging
from typing import Iterator

from pyspark.sql.datasource import InputPartition

from .columns import RecordBatchBuilder, arrow_schema
from .offsets import PartitionKey
from .options import SourceOptions
from .planning import PartitionRange, open_for_range
from .prefetch import prefetched
from .reading import FetchSizing, iter_column_chunks

# Decoded fetches a task may hold ahead of Spark (memory: about this many fetch sizes).
PREFETCH_CHUNKS = 2
log = logging.getLogger("trikafka.spark")


class RangePartition(InputPartition):
    """A Spark input partition holding one ``PartitionRange`` (plain, picklable data)."""

    def __init__(self, planned: PartitionRange):
        super().__init__(f"{planned.key}[{planned.start},{planned.end})@{planned.host}:{planned.port}")
        self.planned = planned


def read_partition(options: SourceOptions, partition: InputPartition) -> Iterator["object"]:
    """Task body shared by batch and streaming reads: RecordBatches of one range."""
    if not isinstance(partition, RangePartition):
        return  # Spark turns an empty plan into one placeholder partition
    planned = partition.planned
    builder = RecordBatchBuilder(planned.key, arrow_schema())
    sizing = FetchSizing(options.fetch_bytes, options.max_fetch_bytes)
    with open_for_range(planned, options) as conn:
        # With ``prefetch``, fetching and decoding run one step ahead in a thread (see
        # trikafka.spark.prefetch); the connection is used by that thread only, and closed
        # after it has stopped.  Off by default: on a machine Spark's own work fills, the
        # thread's hand-overs cost more than the overlap gains (bench/spark_bench.py).
        chunks = iter_column_chunks(
            conn, planned.key, planned.start, planned.end, sizing,
            fail_on_data_loss=options.fail_on_data_loss, log=log.warning,
        )
        for decoded in prefetched(chunks, PREFETCH_CHUNKS) if options.prefetch else chunks:
            yield builder.build(decoded)


def commit_to_group(options: SourceOptions, offsets: dict[PartitionKey, int]) -> None:
    """Publish consumed offsets to the ``commitToGroup`` registry (for lag monitoring).

    Fenced like a group member's commit: a partition a live member of that
    group owns keeps its offset, and a warning line names it.
    """
    if not options.commit_to_group or not offsets:
        return
    from .cluster import ZooKeeperCluster

    assert options.zookeeper, "parse_options requires zookeeper with commitToGroup"
    with ZooKeeperCluster(options.zookeeper, timeout_s=options.timeout_s) as cluster:
        cluster.commit_group_offsets(options.commit_to_group, offsets)
