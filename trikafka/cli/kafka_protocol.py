"""``trikafka produce|consume|topics --kafka``: the same commands on Kafka-format topics (docs/protocol.md §16).

Each runs trikafka's Trio client of the Kafka protocol (``trikafka.client.kafka``)
against the bootstrap address ``--kafka`` names, so it works with
trikafka's Kafka listener and with any Kafka broker.  Offsets are Kafka's
logical offsets (§16.6).
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from trikafka import __version__
from trikafka.cli.common import (Printer, kafka_bootstrap, kafka_sasl_login, kafka_ssl_context, plural, read_lines,
                                 split_keyed_lines, stop_on_sigterm)
from trikafka.cli.message_format import Printed
from trikafka.client.errors import ClientError
from trikafka.client.kafka import (EARLIEST, LATEST, KafkaAdmin, KafkaClient, KafkaProducer, NewTopic,
                                   PartitionConsumer)

TOPICS_HEADER = "topic\tpartition\tleader\tstart\tend\trecords"


def kafka_client(args: argparse.Namespace, *, auto_create: bool) -> KafkaClient:
    """The client of ``--kafka``; only ``produce`` creates a topic it names (as Kafka's console producer)."""
    return KafkaClient(kafka_bootstrap(args), client_id="trikafka-cli", allow_auto_topic_creation=auto_create,
                       software_version=__version__, ssl_context=kafka_ssl_context(args),
                       sasl=kafka_sasl_login(args))


async def produce(args: argparse.Namespace) -> int:
    """Each stdin line as one record (``KEY<SEP>VALUE`` with ``--key-separator``), in order."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    partition = None if args.partition == -1 else args.partition  # -1: the partitioner picks, as on 0.7
    async with kafka_client(args, auto_create=True) as client, stdin:
        async with KafkaProducer.open(client, acks=args.acks, ack_timeout_s=args.timeout_ms / 1000) as producer:
            async for lines in read_lines(stdin):
                items: list[tuple[bytes | None, bytes | None]]
                if args.key_separator is not None:
                    try:
                        items = list(split_keyed_lines(lines, args.key_separator))
                    except ValueError as exc:
                        print(f"trikafka: {exc}", file=sys.stderr)
                        return 2
                else:
                    items = [(None, line) for line in lines]
                pending = [await producer.submit(args.topic, value, key=key, partition=partition)
                           for key, value in items]
                for record in pending:
                    await record.delivered()
                sent += len(pending)
    print(f"trikafka: sent {plural(sent, 'record')} to {args.topic}", file=sys.stderr)
    return 0


async def consume(args: argparse.Namespace) -> int:
    """The records of ``--partition`` (default: every partition) side by side, as ``--format`` prints them."""
    async with kafka_client(args, auto_create=False) as client:
        count = await client.partition_count(args.topic)
        partitions = [args.partition] if args.partition is not None else list(range(count))
        printer = Printer(args)

        async def read_all() -> None:
            async with trio.open_nursery() as nursery:
                printer.stop = nursery.cancel_scope.cancel
                for partition in partitions:
                    nursery.start_soon(_consume_partition, args, client, partition, printer)

        await stop_on_sigterm(read_all)
    if args.exit_at_end:
        print(f"trikafka: reached the end of {args.topic} ({plural(len(partitions), 'partition')}) after "
              f"{plural(printer.count, 'record')}", file=sys.stderr)
    return 0


async def _consume_partition(args: argparse.Namespace, client: KafkaClient, partition: int, printer: Printer) -> None:
    offset = {"earliest": EARLIEST, "latest": LATEST}.get(args.from_)
    if offset is None:
        offset = int(args.from_)
    committed = args.read_committed
    if offset >= 0:
        await _check_in_log(client, args.topic, partition, offset)
    consumer = PartitionConsumer(client, args.topic, partition, offset, read_committed=committed)
    position = await consumer.seek(offset)
    end = None
    if args.exit_at_end:
        end = (await KafkaAdmin(client).list_offsets(args.topic, {partition: LATEST},
                                                     read_committed=committed))[partition].offset
    print(f"trikafka: consuming {args.topic}-{partition} from offset {position}", file=sys.stderr, flush=True)
    # The end is reached by position, not by a record: markers and aborted records (§19.6) have
    # offsets and are never printed.
    while end is None or (consumer.position or 0) < end:
        for record in await consumer.fetch():
            if end is not None and record.offset >= end:
                return
            printer.write(Printed(args.topic, str(partition), record.offset, record.offset + 1, record.key,
                                  record.value or b""))


async def _check_in_log(client: KafkaClient, topic: str, partition: int, offset: int) -> None:
    """A ``--from`` offset before the log start (DeleteRecords, retention) or past its end is one line
    naming both, not the fetch's OFFSET_OUT_OF_RANGE."""
    admin = KafkaAdmin(client)
    start = (await admin.list_offsets(topic, {partition: EARLIEST}))[partition].offset
    end = (await admin.list_offsets(topic, {partition: LATEST}))[partition].offset
    if not start <= offset <= end:
        raise ClientError(f"--from {offset} is outside {topic}-{partition}: its log starts at offset {start} "
                          f"and ends at {end}")


async def topics(args: argparse.Namespace) -> int:
    """``topics --kafka [list]``: every topic; ``topics --kafka [describe] NAME...``: their partitions
    (leader, start and end offsets); ``topics --kafka create NAME [--partitions N]``: CreateTopics."""
    async with kafka_client(args, auto_create=False) as client:
        admin = KafkaAdmin(client)
        if args.topic[:1] == ["create"]:
            return await _create(admin, args)
        names = args.topic[1:] if args.topic[:1] in (["list"], ["describe"]) else args.topic
        metadata = await admin.metadata(names or None)
        if not names:
            for name, topic in sorted(metadata.topics.items()):
                print(f"{name}\t{plural(len(topic.partitions), 'partition')}")
            return 0
        status = 0
        print(TOPICS_HEADER)
        for name in names:
            topic = metadata.topics.get(name)
            if topic is None or topic.error_code or not topic.partitions:
                print(f"trikafka: no topic {name!r}", file=sys.stderr)
                status = 1
                continue
            starts = await admin.list_offsets(name, {p: EARLIEST for p in topic.partitions})
            ends = await admin.list_offsets(name, {p: LATEST for p in topic.partitions})
            for partition, info in sorted(topic.partitions.items()):
                start, end = starts[partition].offset, ends[partition].offset
                print(f"{name}\t{partition}\t{info.leader_id}\t{start}\t{end}\t{end - start}")
        return status


async def _create(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    name = args.topic[1]
    configs = dict(item.split("=", 1) for item in getattr(args, "config", None) or ())
    replication = args.replication_factor if getattr(args, "replication_factor", None) is not None else -1
    errors = await admin.create_topics([NewTopic(name, args.partitions or -1, replication, configs)])
    error = errors.get(name)
    if error is not None:
        print(f"trikafka: {error}", file=sys.stderr)
        return 1
    print(f"trikafka: created {name}", file=sys.stderr)
    return 0

