"""``trikafka topics``: what a log directory holds, the topics in ZooKeeper, or named topics of one broker."""

from __future__ import annotations

import argparse
import os
import sys

from trikafka.cli.common import add_broker, run_client_value

PARTITION_PROBE_BATCH = 64  # partitions asked about per MULTIFETCH by `topics`
MAX_PROBED_PARTITIONS = 4096


def add_parser(commands) -> None:
    """Register ``topics`` on the ``trikafka`` subparsers."""
    topics = commands.add_parser("topics", help="list topics of a log dir, or offsets of named topics")
    topics.add_argument("topic", nargs="*")
    add_broker(topics)
    topics.add_argument("--log-dir", help="read this broker data directory instead of asking a broker")
    topics.add_argument("--zk", metavar="CONNECT",
                        help="list the topics registered in this ZooKeeper and ask each broker their offsets")
    topics.add_argument("--partitions", type=int,
                        help="partitions to query per named topic (default: ask the broker how many)")
    topics.set_defaults(func=cmd_topics)

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


async def _partition_count(conn, topic: str) -> int | None:
    """``partitions(topic)`` as the broker answers it, or None for a name it rejects.

    0.7 has no metadata request, but FETCH answers WrongPartition exactly for
    partitions outside ``[0, partitions(topic))`` and Unknown for an invalid
    name (spec §6.2).  A MULTIFETCH of ``maxSize`` 0 at offset 0 asks that of
    many partitions at once, reads no data and creates nothing (§9).
    """
    from trikafka.wire import ErrorCode

    first = 0
    while first < MAX_PROBED_PARTITIONS:
        probe = range(first, first + PARTITION_PROBE_BATCH)
        results = await conn.multifetch([(topic, p, 0, 0) for p in probe])
        for partition, result in zip(probe, results):
            if result.error == ErrorCode.UNKNOWN:
                return None
            if result.error == ErrorCode.WRONG_PARTITION:
                return partition
        first += PARTITION_PROBE_BATCH
    return MAX_PROBED_PARTITIONS


TopicRow = tuple[str, str, str, int, int]  # topic, partition name, broker HOST:PORT, start, visible end


async def _topics_from_broker(args: argparse.Namespace) -> list[TopicRow]:
    from trikafka.client import connect, earliest_offset, latest_offset

    host, port = args.broker
    rows = []
    async with await connect(host, port) as conn:
        for topic in args.topic:
            count = args.partitions if args.partitions is not None else await _partition_count(conn, topic)
            if count is None:
                print(f"trikafka: the broker rejects the topic name {topic!r}", file=sys.stderr)
                continue
            for partition in range(count):
                rows.append((topic, str(partition), f"{host}:{port}", await earliest_offset(conn, topic, partition),
                             await latest_offset(conn, topic, partition)))
    return rows


async def _topics_from_zookeeper(args: argparse.Namespace) -> list[TopicRow]:
    """Every topic registered in ZooKeeper (spec §11.2-§11.3), each partition asked its offsets.

    Partitions are named ``brokerId-partition`` as in 0.7's registry; a
    broker that does not answer is reported on stderr and skipped.
    """
    from trikafka.client import ClientError, connect, earliest_offset, latest_offset
    from trikafka.zk import KazooCoordinator, NoNodeError, parse_broker_registration, parse_partition_count
    from trikafka.zk import paths

    rows: list[TopicRow] = []
    async with KazooCoordinator(args.zk, ensure_chroot=False) as zk:
        brokers: dict[int, tuple[str, int]] = {}
        for name in await zk.children(paths.broker_ids()):
            try:
                value, _stat = await zk.get(paths.broker_id(int(name)))
                info = parse_broker_registration(value)
            except (NoNodeError, ValueError) as exc:
                print(f"trikafka: skipping broker {name}: {exc}", file=sys.stderr)
                continue
            brokers[int(name)] = (info.host, info.port)
        wanted = set(args.topic)
        counts: dict[int, list[tuple[str, int]]] = {}
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
                    counts.setdefault(int(name), []).append((topic, parse_partition_count(value)))
                except (NoNodeError, ValueError) as exc:
                    print(f"trikafka: skipping {topic} on broker {name}: {exc}", file=sys.stderr)
    for broker_id, registered in sorted(counts.items()):
        if broker_id not in brokers:
            continue  # registered topics of a broker that is gone (its ephemerals are on their way out)
        host, port = brokers[broker_id]
        try:
            async with await connect(host, port) as conn:
                for topic, count in registered:
                    for partition in range(count):
                        rows.append((topic, f"{broker_id}-{partition}", f"{host}:{port}",
                                     await earliest_offset(conn, topic, partition),
                                     await latest_offset(conn, topic, partition)))
        except (ClientError, OSError) as exc:
            print(f"trikafka: broker {broker_id} at {host}:{port}: {exc}", file=sys.stderr)
    return sorted(rows)


def cmd_topics(args: argparse.Namespace) -> int:
    if args.log_dir:
        print("topic\tpartition\tsegments\tstart\tend\tbytes")
        for topic, partition, segments, start, end in _topics_from_log_dir(args.log_dir):
            print(f"{topic}\t{partition}\t{segments}\t{start}\t{end}\t{end - start}")
        return 0
    if args.zk:
        rows = run_client_value(_topics_from_zookeeper, args)
    elif args.topic:
        rows = run_client_value(_topics_from_broker, args)
    else:
        print("trikafka: a 0.7 broker cannot list its topics (there is no metadata request); "
              "name the topics, or give --zk CONNECT (registered topics) or --log-dir DIR", file=sys.stderr)
        return 2
    if rows is None:
        return 1
    print("topic\tpartition\tbroker\tstart\tvisible_end\tbytes")
    for topic, partition, broker, start, end in rows:
        print(f"{topic}\t{partition}\t{broker}\t{start}\t{end}\t{end - start}")
    return 0
