"""One Spark task's read of a Kafka-format partition, two ways (docs/protocol.md §16.6).

    python bench/spark_kafka_read_bench.py [--messages N] [--size BYTES] [--runs N]

A task of the source's Kafka-format mode runs in a plain Python worker, so
it either speaks the protocol over a blocking socket (``kafka_reading.read_range``,
what the source does) or wraps the Trio client in ``trio.run``
(``PartitionConsumer`` fetching the same range).  Both decode the same
batches and build the same Arrow record batches; the broker runs in this
process's thread (``running_kafka_broker``), records come from
confluent-kafka.  Prints the median rows per second of each, N runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import trio
from confluent_kafka import Producer

from trikafka.client.kafka import KafkaClient, PartitionConsumer
from trikafka.spark.kafka_columns import KafkaBatchBuilder
from trikafka.spark.kafka_options import parse_kafka_options
from trikafka.spark.kafka_reading import KafkaPlanner, read_range
from trikafka.testing import running_kafka_broker

TOPIC = "bench"
ROWS_PER_BATCH = 10_000


def blocking_read(options, planned) -> int:  # type: ignore[no-untyped-def]
    return sum(batch.num_rows for batch in read_range(options, planned))


def trio_read(bootstrap: str, end: int) -> int:
    builder = KafkaBatchBuilder(TOPIC, 0, False)

    async def main() -> int:
        rows = 0
        async with KafkaClient(bootstrap) as client, PartitionConsumer(client, TOPIC, 0, 0) as consumer:
            while consumer.position is None or consumer.position < end:
                records = [r for r in await consumer.fetch() if r.offset < end]
                for first in range(0, len(records), ROWS_PER_BATCH):
                    chunk = records[first:first + ROWS_PER_BATCH]
                    # The Trio consumer hands out records without their batch headers: CreateTime rows.
                    rows += builder.build([(_CREATE_TIME_HEADER, r) for r in chunk]).num_rows
        return rows
    return trio.run(main)


class _Header:
    log_append_time = False


_CREATE_TIME_HEADER = _Header()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with running_kafka_broker(num_partitions=1) as kafka:
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 20})
        for i in range(args.messages):
            producer.produce(TOPIC, key=b"k%d" % i, value=b"v" * args.size, partition=0)
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        options = parse_kafka_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": TOPIC},
                                      streaming=False)
        with KafkaPlanner(options) as planner:
            tps = planner.partitions(require=True)
            [planned] = planner.ranges(planner.resolve(options.starting, tps, "startingOffsets"),
                                       planner.resolve(options.ending, tps, "endingOffsets"))
        results: dict[str, list[float]] = {"blocking socket (read_range)": [], "trio.run + PartitionConsumer": []}
        for _ in range(args.runs):
            for label, run in (("blocking socket (read_range)", lambda: blocking_read(options, planned)),
                               ("trio.run + PartitionConsumer", lambda: trio_read(kafka.bootstrap, planned.end))):
                started = time.perf_counter()
                rows = run()
                elapsed = time.perf_counter() - started
                assert rows == args.messages, (label, rows)
                results[label].append(rows / elapsed)
    for label, rates in results.items():
        print(f"{label:32s} median {statistics.median(rates):>12,.0f} rows/s  "
              f"(min {min(rates):,.0f}, max {max(rates):,.0f}; {args.messages} x {args.size} B)")


if __name__ == "__main__":
    main()
