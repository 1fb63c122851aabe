"""The Kafka-protocol codec's cost per call (docs/protocol.md §16): µs per request or response.

Run: ``python bench/kafka_codec.py``.  Prints, for a few shapes each:

- Produce v9 request decode: ``parse_request`` (header and body through kio)
  and kio's body reader alone, one partition or 16 partitions of one
  batch of 100 records of 100 bytes;
- Metadata v12 response encode (``encode_response``, kio's writer): 3 brokers
  and 1 or 50 topics of 8 partitions;
- Fetch v12 and v11 response encode (``encode_fetch_response``): 1 or 16
  partitions, records as file regions (no byte of them is touched);
- ``build_batch`` and ``decode_batches`` of 100 records of 100 bytes.

Takes about ten seconds; figures vary with the machine's load.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Callable

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
                                              MetadataResponseTopic)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i32Timedelta

from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.fetch import FetchPartition, encode_fetch_response
from trikafka.kafka.framing import encode_request, encode_response, parse_request
from trikafka.kafka.records import build_batch, decode_batches
from trikafka.wire.responses import FileRegion

TARGET_SECONDS_PER_CASE = 0.4
BATCH = build_batch([b"v" * 100] * 100, timestamp_ms=1)


def measure(fn: Callable[[], object]) -> float:
    """µs per call of ``fn``, repeating until the case took long enough."""
    fn()  # warm up
    calls, elapsed, batch = 0, 0.0, 1
    while elapsed < TARGET_SECONDS_PER_CASE:
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        elapsed += time.perf_counter() - start
        calls += batch
        batch *= 2
    return elapsed / calls * 1e6


def produce_request(partitions: int) -> bytes:
    body = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(timedelta(seconds=30)),
                          topic_data=(TopicProduceData(name=TopicName("events"), partition_data=tuple(
                              PartitionProduceData(index=i32(p), records=BATCH) for p in range(partitions))),))
    return encode_request(0, 9, 1, "bench", body)[4:]


def metadata_response(topics: int) -> MetadataResponse:
    brokers = tuple(MetadataResponseBroker(node_id=BrokerId(b), host=f"broker-{b}.example", port=i32(9093))
                    for b in range(3))
    partitions = tuple(MetadataResponsePartition(error_code=ErrorCode.none, partition_index=i32(p),
                                                 leader_id=BrokerId(p % 3), leader_epoch=i32(4),
                                                 replica_nodes=(BrokerId(0), BrokerId(1)),
                                                 isr_nodes=(BrokerId(0), BrokerId(1)), offline_replicas=())
                       for p in range(8))
    return MetadataResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)), brokers=brokers, cluster_id="AAAAAAAAAAAAAAAAAAAAAA",
        controller_id=BrokerId(0),
        topics=tuple(MetadataResponseTopic(error_code=ErrorCode.none, name=TopicName(f"topic-{t}"),
                                           topic_id=uuid.uuid4(), partitions=partitions) for t in range(topics)))


class Segment:
    """A file region's source: never read here."""

    def pread(self, position: int, length: int) -> bytes:
        raise KafkaCodecError("the bench never reads records")


def fetch_parts(count: int) -> list[FetchPartition]:
    return [FetchPartition("events", p, 0, 10_000, 10_000, 0, FileRegion(Segment(), 0, 1 << 20))
            for p in range(count)]


def main() -> None:
    metadata_request = parse_request(encode_request(3, 12, 1, "bench", MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))[4:])
    produce_reader = entity_reader(ProduceRequest)
    cases: list[tuple[str, Callable[[], object]]] = []
    for partitions in (1, 16):
        frame = produce_request(partitions)
        body_at = 8 + 2 + len("bench") + 1
        batch = f"{partitions} x {len(BATCH) / 1000:.1f} KB batch"
        cases.append((f"Produce v9 parse_request, {batch}",
                      lambda frame=frame: parse_request(frame)))
        cases.append((f"Produce v9 kio body reader, {batch}",
                      lambda frame=frame, at=body_at: produce_reader(frame, at)))
    for topics in (1, 50):
        body = metadata_response(topics)
        cases.append((f"Metadata v12 encode_response, {topics} topics x 8 partitions",
                      lambda body=body: encode_response(metadata_request, body)))
    for version in (12, 11):
        for count in (1, 16):
            parts = fetch_parts(count)
            cases.append((f"Fetch v{version} encode_fetch_response, {count} partitions",
                          lambda parts=parts, v=version: encode_fetch_response(v, 1, 0, 0, 0, parts)))
    cases.append(("build_batch, 100 records x 100 B, none", lambda: build_batch([b"v" * 100] * 100, timestamp_ms=1)))
    cases.append(("decode_batches, 100 records x 100 B, none", lambda: list(decode_batches(BATCH))))
    print(f"{'case':<58}  {'µs/call':>9}")
    for name, fn in cases:
        print(f"{name:<58}  {measure(fn):9.1f}")


if __name__ == "__main__":
    main()
