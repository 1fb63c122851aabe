"""Client quotas (docs/protocol.md §20.2): a throttled producer's (or consumer's) measured rate against
its quota, beside an unthrottled one on the same broker.

    python bench/quota_bench.py [--quota-bytes-per-s N] [--seconds S] [--skip-s S] [--value-bytes B]
                                [--batch-bytes B] [--no-free] [--fetch]

Starts an in-process standalone broker (``trikafka.testing.running_kafka_broker``), sets
``producer_byte_rate`` = N (default 1,000,000) for client id ``throttled`` through AlterClientQuotas
(the Trio admin client), then runs two confluent-kafka producers at once for S seconds (default 54),
each sending B-byte values (default 10,000) as fast as its client allows, acks 1, in batches of at
most ``--batch-bytes`` (default 64 kB): ``throttled`` and, unless ``--no-free``, ``free`` (no
quota).  A producer's rate is the bytes of the values the broker acknowledged between ``--skip-s``
(default 11) and the end, over that time.  A quota's rate is taken over 10 to 11 windows of 1 s
(Kafka's measure), so a client that sends as fast as it may gets about 10 s of its quota at once
whenever its oldest window expires, then waits: over 20 s its rate swings by ±25% with the phase of
those bursts (0.73 x the quota over seconds 5-25 with 1 MB batches); over 43 s, starting once the
first burst's window has expired, it is within a few percent.  Prints both rates, the throttled
one's ratio to its quota (the goal: within 20%), and the throttle times the throttled client was
told.  ``--fetch``: the same with ``consumer_byte_rate`` and two confluent-kafka consumers reading
one partition from its start, filled first with (S + 20) s of the quota; the free consumer's rate
is taken from 0 until it has read the whole partition.  Not a test: no figure is asserted.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trikafka.client.kafka.admin import KafkaAdmin, QuotaEntity  # noqa: E402
from trikafka.client.kafka.client import KafkaClient  # noqa: E402
from trikafka.testing import running_kafka_broker  # noqa: E402

TOPIC = "quota-bench"
THROTTLED, FREE = "throttled", "free"
# Each producer's batches by default: Kafka's Java client's default is 16 kB, librdkafka's 1 MB; a 1 MB
# request is a second of a 1 MB/s quota by itself, so the rate is measured in steps of that size.
BATCH_BYTES = 65536


def run_producer(bootstrap: str, client_id: str, value_bytes: int, batch_bytes: int, until_s: float,
                 skip_until_s: float, out: dict[str, float]) -> None:
    """Send until ``until_s``; ``out``: acknowledged value bytes after ``skip_until_s``, throttle events."""
    acked = {"bytes": 0.0, "throttles": 0.0, "throttle_ms": 0.0}

    def delivered(error: object, message: object) -> None:
        if error is None and time.monotonic() >= skip_until_s:
            acked["bytes"] += value_bytes

    def throttled(event: object) -> None:
        acked["throttles"] += 1
        acked["throttle_ms"] += getattr(event, "throttle_time", 0.0) * 1000

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 4096, "batch.size": batch_bytes, "throttle_cb": throttled})
    value = b"v" * value_bytes
    while time.monotonic() < until_s:
        try:
            producer.produce(TOPIC, value, on_delivery=delivered)
        except BufferError:  # the client's queue is full: wait for deliveries
            producer.poll(0.01)
            continue
        producer.poll(0)
    # What is still queued after the end is not counted: stop the clock first.
    counted = acked["bytes"]
    producer.purge()
    producer.flush(10)
    out.update(bytes=counted, throttles=acked["throttles"], throttle_ms=acked["throttle_ms"])


def run_consumer(bootstrap: str, client_id: str, until_s: float, skip_until_s: float,
                 out: dict[str, float]) -> None:
    """Read the topic from its start until ``until_s`` or its end; ``out``: value bytes read after
    ``skip_until_s``, the seconds counted, throttle events."""
    seen = {"throttles": 0.0, "throttle_ms": 0.0}

    def throttled(event: object) -> None:
        seen["throttles"] += 1
        seen["throttle_ms"] += getattr(event, "throttle_time", 0.0) * 1000

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False, "enable.partition.eof": True, "throttle_cb": throttled})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    # The rate is over the time counted: up to the end of the topic when it is reached, else up to
    # ``until_s`` (not to the last record: a throttled consumer reads in bursts, and the time from
    # its last burst to the end is its to count).
    read, last_s = 0, until_s
    while (now_s := time.monotonic()) < until_s:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:  # the end of the topic: the rate is up to here
            last_s = max(now_s, skip_until_s)
            break
        if now_s >= skip_until_s:
            read += len(message.value() or b"")
    consumer.close()
    out.update(bytes=read, seconds=max(last_s - skip_until_s, 1e-9), **seen)


def fill_topic(bootstrap: str, total_bytes: int, value_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "filler", "linger.ms": 5})
    value = b"v" * value_bytes
    for _ in range(total_bytes // value_bytes):
        while True:
            try:
                producer.produce(TOPIC, value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(60) == 0


async def set_quota(bootstrap: str, key: str, quota: int) -> None:
    async with KafkaClient(bootstrap) as client:
        errors = await KafkaAdmin(client).alter_client_quotas({QuotaEntity.of([("client-id", THROTTLED)]): {key: quota}})
    assert all(error is None for error in errors.values()), errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quota-bytes-per-s", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=54.0)
    parser.add_argument("--skip-s", type=float, default=11.0)
    parser.add_argument("--value-bytes", type=int, default=10_000)
    parser.add_argument("--batch-bytes", type=int, default=BATCH_BYTES, help="the producers' batch.size")
    parser.add_argument("--no-free", action="store_true", help="run the throttled client alone")
    parser.add_argument("--fetch", action="store_true",
                        help="consumers under consumer_byte_rate instead, reading a topic filled first")
    args = parser.parse_args()
    with running_kafka_broker(num_partitions=1) as kafka:
        if args.fetch:  # enough for the throttled consumer's whole run, with its first burst
            fill_topic(kafka.bootstrap, int(args.quota_bytes_per_s * (args.seconds + 20)), args.value_bytes)
        key = "consumer_byte_rate" if args.fetch else "producer_byte_rate"
        trio.run(set_quota, kafka.bootstrap, key, args.quota_bytes_per_s)
        start_s = time.monotonic()
        until_s, skip_until_s = start_s + args.seconds, start_s + args.skip_s
        results: dict[str, dict[str, float]] = {THROTTLED: {}} if args.no_free else {THROTTLED: {}, FREE: {}}
        threads = [threading.Thread(target=run_consumer, args=(kafka.bootstrap, client_id, until_s,
                                                               start_s if client_id == FREE else skip_until_s,
                                                               results[client_id]))
                   if args.fetch else
                   threading.Thread(target=run_producer, args=(kafka.bootstrap, client_id, args.value_bytes,
                                                               args.batch_bytes, until_s, skip_until_s,
                                                               results[client_id]))
                   for client_id in results]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(f"quota: {key} {args.quota_bytes_per_s:,} B/s for client id {THROTTLED!r}; "
          f"{args.value_bytes:,}-byte values"
          + ("" if args.fetch else f" in batches of at most {args.batch_bytes:,} bytes")
          + f"; rates over seconds {args.skip_s:g}-{args.seconds:g}"
          + (" (the free consumer's from 0 until it read the whole topic)" if args.fetch else ""))
    for client_id, result in results.items():
        rate = result["bytes"] / result.get("seconds", args.seconds - args.skip_s)
        line = f"{client_id:>9}: {rate / 1e6:8.3f} MB/s of values"
        if client_id == THROTTLED:
            line += (f" = {rate / args.quota_bytes_per_s:.2f} x quota; told to wait {result['throttles']:.0f} times, "
                     f"{result['throttle_ms'] / 1000:.1f} s in all")
        print(line)


if __name__ == "__main__":
    main()
