"""Task bodies shared by batch (``source``) and streaming (``stream``) reads.

``RangePartition`` carries one planned byte range to a Spark task;
``read_partition`` fetches it as Arrow record batches; ``commit_to_group``
publishes what was read to the ``commitToGroup`` registry.
"""

from __future__ import annotations

import logging
from typing import Iterator

from pyspark.sql.datasource import InputPartition

from .cluster import BrokerAddress
from .columns import arrow_schema, columns_to_record_batch
from .offsets import PartitionKey
from .options import SourceOptions
from .planning import PartitionRange, open_connection
from .reading import FetchSizing, iter_column_chunks

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
    schema = arrow_schema()
    sizing = FetchSizing(options.fetch_bytes, options.max_fetch_bytes)
    address = BrokerAddress(planned.key.broker, planned.host, planned.port)
    with open_connection(address, options) as conn:
        for columns in iter_column_chunks(
            conn, planned.key, planned.start, planned.end, sizing,
            fail_on_data_loss=options.fail_on_data_loss, log=log.warning,
        ):
            yield columns_to_record_batch(planned.key, columns, schema)


def commit_to_group(options: SourceOptions, offsets: dict[PartitionKey, int]) -> None:
    """Publish consumed offsets to the ``commitToGroup`` registry (advisory, for lag monitoring)."""
    if not options.commit_to_group or not offsets:
        return
    from .cluster import ZooKeeperCluster

    assert options.zookeeper, "parse_options requires zookeeper with commitToGroup"
    with ZooKeeperCluster(options.zookeeper, timeout_s=options.timeout_s) as cluster:
        cluster.commit_group_offsets(options.commit_to_group, offsets)
