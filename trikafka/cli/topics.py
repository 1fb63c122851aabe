"""``trikafka topics``: what a log directory holds, the topics in ZooKeeper, or named topics of one broker."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Iterable

from trikafka.cli import topics_admin
from trikafka.cli.common import (add_broker, add_kafka, add_zookeeper, kafka_format_hint, run_client,
                                 run_client_value, validate_kafka)

HEADER = "topic\tpartition\tbroker\tstart\tvisible_end\tbytes"


def add_parser(commands) -> None:
    """Register ``topics`` on the ``trikafka`` subparsers."""
    topics = commands.add_parser(
        "topics",
        description="With no TOPIC: one line per topic (NAME, partitions, bytes).  With TOPICs: one line per "
                    "partition (topic, partition, broker, start, visible_end, bytes).  `topics create NAME "
                    "--partitions N` creates a topic (with --replication-factor R a replicated one); `topics "
                    "describe|alter|reassign NAME` read and change its state in ZooKeeper.  The partition column "
                    "is the partition number; the broker column is HOST:PORT (ID:HOST:PORT with --zookeeper).")
    topics.add_argument("topic", nargs="*", metavar="TOPIC",
                        help="topics to show (default: all); `create NAME` creates NAME")
    add_broker(topics)
    add_kafka(topics)
    topics.add_argument("--log-dir", metavar="DIR", help="read this broker data directory instead of asking a broker")
    add_zookeeper(topics, "list the topics registered in this ZooKeeper and ask each broker their offsets",
                  default=False)
    topics.add_argument("--partitions", type=int, metavar="N",
                        help="partitions to query per named topic (default: ask the broker how many); "
                             "with create: the new topic's partition count")
    topics.add_argument("--json", action="store_true",
                        help='print {"topics": [{"topic": NAME, "format": "0.7" or "kafka", "partitions": [...]}]} '
                             'instead of a table')
    topics_admin.add_options(topics)
    topics.set_defaults(func=cmd_topics, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    validate_kafka(parser, args, words="topic")
    if args.kafka is not None:
        if args.topic[:1] == ["create"] and len(args.topic) != 2:
            parser.error("usage: trikafka topics create NAME [--partitions N] [--replication-factor R] "
                         "[--config K=V ...] --kafka [HOST:PORT]")
        if args.partitions is not None and args.partitions < 1:
            parser.error("--partitions must be >= 1")
    elif topics_admin.wants_admin(args):
        topics_admin.validate(parser, args)
    elif args.topic[:1] == ["create"]:
        if len(args.topic) != 2:
            parser.error("usage: trikafka topics create NAME --partitions N [--broker HOST:PORT]")
        if args.partitions is None or args.partitions < 1:
            parser.error("topics create needs --partitions N (N >= 1)")
    elif args.partitions is not None and args.partitions < 1:
        parser.error("--partitions must be >= 1")

def _topics_from_log_dir(log_dir: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, segments, start offset, end offset) for each partition directory."""
    from trikafka.log.names import SEGMENT_SUFFIX, parse_partition_dir_name, parse_segment_file_name

    rows = []
    for name in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, name)
        if not os.path.isdir(path):
            continue
        topic, partition = parse_partition_dir_name(name)
        segments = sorted(f for f in os.listdir(path) if f.endswith(SEGMENT_SUFFIX))
        if not segments:
            rows.append((topic, partition, 0, 0, 0))
            continue
        start = parse_segment_file_name(segments[0])
        last = parse_segment_file_name(segments[-1])
        end = last + os.path.getsize(os.path.join(path, segments[-1]))
        rows.append((topic, partition, len(segments), start, end))
    return rows


# topic, partition name, broker HOST:PORT, start, visible end; start and end are None for a Kafka-format
# partition (§16.6), which 0.7's OFFSETS cannot ask
TopicRow = tuple[str, str, str, int | None, int | None]
KAFKA_FORMAT = "kafka"  # a topic's format in `topics --json`; 0.7 topics are "0.7"


async def _offset_rows(conn, broker: str, partitions: list[tuple[str, int]]) -> list[TopicRow]:
    """One row per partition on ``conn``'s broker: OFFSETS of the 0.7 ones, the Kafka-format ones
    (found first, as OFFSETS on them closes the connection) marked by no offsets."""
    from trikafka.client import earliest_offset, kafka_format_partitions, latest_offset

    kafka = await kafka_format_partitions(conn, partitions)
    rows: list[TopicRow] = []
    for topic, partition in partitions:
        if (topic, partition) in kafka:
            rows.append((topic, str(partition), broker, None, None))
        else:
            rows.append((topic, str(partition), broker, await earliest_offset(conn, topic, partition),
                         await latest_offset(conn, topic, partition)))
    return rows


async def _topics_from_broker(args: argparse.Namespace) -> tuple[list[TopicRow], bool]:
    """Rows for the named topics (every topic when none is named), and whether all were found.

    Partition counts come from METADATA, or from the FETCH probe on a plain
    0.7 broker, which cannot list topics or tell a missing topic from an empty one.
    """
    from trikafka.client import connect, partition_counts
    from trikafka.wire import ErrorCode

    host, port = args.broker
    rows: list[TopicRow] = []
    all_found = True
    counts = None if args.partitions is not None else await partition_counts(host, port, args.topic)
    if counts is not None and not args.topic and counts.metadata is None:
        print("trikafka: this broker is a plain 0.7 broker, which cannot list its topics; "
              "name the topics, or give --zookeeper CONNECT or --log-dir DIR", file=sys.stderr)
        return rows, False
    names = list(args.topic) if args.topic or counts is None else list(counts.topics)
    partitions: list[tuple[str, int]] = []
    for topic in names:
        found = counts.topics[topic] if counts is not None else None
        if found is not None and found.error == ErrorCode.INVALID_TOPIC:
            print(f"trikafka: the broker rejects the topic name {topic!r}", file=sys.stderr)
            all_found = False
            continue
        if found is not None and found.error == ErrorCode.UNKNOWN_TOPIC:
            print(f"trikafka: topic {topic!r} does not exist on {host}:{port}", file=sys.stderr)
            all_found = False
            continue
        partitions.extend((topic, p) for p in range(args.partitions if found is None else found.count))
    async with await connect(host, port) as conn:
        rows = await _offset_rows(conn, f"{host}:{port}", partitions)
    return rows, all_found


async def _topics_from_zookeeper(args: argparse.Namespace) -> list[TopicRow]:
    """Every topic registered in ZooKeeper (spec §8.2), each partition asked its offsets.

    Each row names its broker ``ID:HOST:PORT`` (0.7's registry numbers
    partitions per broker); a broker that does not answer is reported on
    stderr and skipped.
    """
    from trikafka.client import ClientError, connect
    from trikafka.zk import KazooZooKeeperClient, NoNodeError, parse_partition_count
    from trikafka.zk import paths
    from trikafka.zk.registry import live_brokers
    from trikafka.zk.replication_store import partition_states

    def skipping(name: str, exc: Exception) -> None:
        print(f"trikafka: skipping broker {name}: {exc}", file=sys.stderr)

    rows: list[TopicRow] = []
    async with KazooZooKeeperClient(args.zookeeper, ensure_chroot=False) as zk:
        brokers = {i: (info.host, info.port) for i, info in (await live_brokers(zk, skipping)).items()}
        wanted = set(args.topic)
        counts: dict[int, list[tuple[str, Iterable[int]]]] = {}  # broker -> (topic, partitions)
        try:
            topics = sorted(await zk.children(paths.broker_topics()))
        except NoNodeError:
            topics = []
        for topic in topics:
            if wanted and topic not in wanted:
                continue
            for name in await zk.children(paths.broker_topic(topic)):
                try:
                    value, _stat = await zk.get(paths.broker_topic_id(topic, int(name)))
                    counts.setdefault(int(name), []).append((topic, range(parse_partition_count(value))))
                except (NoNodeError, ValueError) as exc:
                    print(f"trikafka: skipping {topic} on broker {name}: {exc}", file=sys.stderr)
        def bad_topic(topic: str, exc: Exception) -> None:
            print(f"trikafka: skipping replicated topic {topic}: {exc}", file=sys.stderr)

        leaders = [(topic, partition, state.leader if state is not None else -1)
                   async for topic, partition, _replicas, state in partition_states(zk, bad_topic, wanted)]
    for topic, partition, leader in leaders:  # replicated topics: one row per partition, at its leader
        if leader not in brokers:
            print(f"trikafka: {topic}-{partition} has no live leader", file=sys.stderr)
            continue
        counts.setdefault(leader, []).append((topic, (partition,)))
    for broker_id, registered in sorted(counts.items()):
        if broker_id not in brokers:
            continue  # registered topics of a broker that is gone (its ephemerals are on their way out)
        host, port = brokers[broker_id]
        try:
            async with await connect(host, port) as conn:
                rows.extend(await _offset_rows(conn, f"{broker_id}:{host}:{port}",
                                               [(topic, p) for topic, partitions in registered for p in partitions]))
        except (ClientError, OSError) as exc:
            print(f"trikafka: broker {broker_id} at {host}:{port}: {exc}", file=sys.stderr)
    return sorted(rows)


async def _create_topic(args: argparse.Namespace) -> int:
    """``topics create NAME --partitions N``: CREATE_TOPIC, the result printed."""
    host, port = args.broker
    return 0 if await topics_admin.create_on_broker(host, port, args.topic[1], args.partitions) else 1


def _partitions(count: int) -> str:
    from trikafka.cli.common import plural

    return plural(count, "partition")


def _size(start: int | None, end: int | None) -> int | None:
    return None if start is None or end is None else end - start


def _print_rows(rows: list[TopicRow], *, summary: bool, as_json: bool) -> None:
    """The rows as JSON, one line per topic (``summary``) or one per partition.  A Kafka-format topic
    is marked as one (its offsets are Kafka's, shown by ``--kafka``): ``"format": "kafka"`` in JSON,
    ``Kafka format`` in place of the bytes, ``-`` for each offset."""
    kafka = {topic for topic, _partition, _broker, start, _end in rows if start is None}
    if as_json:
        import json

        by_topic: dict[str, list[dict]] = {}
        for topic, partition, broker, start, end in rows:
            by_topic.setdefault(topic, []).append({"partition": int(partition), "broker": broker, "start": start,
                                                   "visible_end": end, "bytes": _size(start, end)})
        print(json.dumps({"topics": [{"topic": t, "format": KAFKA_FORMAT if t in kafka else "0.7", "partitions": p}
                                     for t, p in by_topic.items()]}))
        return
    if summary:  # one line per topic, starting with its name: what scripts read
        totals: dict[str, list[int]] = {}
        for topic, _partition, _broker, start, end in rows:
            total = totals.setdefault(topic, [0, 0])
            total[0] += 1
            total[1] += _size(start, end) or 0
        for topic, (count, size) in totals.items():
            shown = "Kafka format (--kafka reads it)" if topic in kafka else f"{size} bytes"
            print(f"{topic}\t{_partitions(count)}\t{shown}")
        return
    print(HEADER)
    for topic, partition, broker, start, end in rows:
        def text(value: int | None) -> str:
            return "-" if value is None else str(value)

        print(f"{topic}\t{partition}\t{broker}\t{text(start)}\t{text(end)}\t{text(_size(start, end))}")
    for topic in sorted(kafka):
        print(f"trikafka: {kafka_format_hint(topic)}", file=sys.stderr)


def cmd_topics(args: argparse.Namespace) -> int:
    if args.kafka is not None:
        from trikafka.cli import kafka_protocol

        return run_client(kafka_protocol.topics, args)
    if args.log_dir:
        if not os.path.isdir(args.log_dir):
            print(f"trikafka: no data directory {args.log_dir!r}", file=sys.stderr)
            return 1
        print("topic\tpartition\tsegments\tstart\tend\tbytes")
        for topic, partition, segments, start, end in _topics_from_log_dir(args.log_dir):
            print(f"{topic}\t{partition}\t{segments}\t{start}\t{end}\t{end - start}")
        return 0
    if topics_admin.wants_admin(args):
        return topics_admin.cmd_admin(args)
    if args.topic[:1] == ["create"]:
        status = run_client_value(_create_topic, args)
        return 1 if status is None else status
    all_found = True
    if args.zookeeper:
        rows = run_client_value(_topics_from_zookeeper, args)
    else:
        answer = run_client_value(_topics_from_broker, args)
        rows, all_found = answer if answer is not None else (None, False)
    if rows is None:
        return 1
    if rows or all_found or args.json:
        _print_rows(rows, summary=not args.topic and not args.zookeeper, as_json=args.json)
    return 0 if all_found else 1
