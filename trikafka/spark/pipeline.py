"""The page-view pipeline: generate activity events, load them into Parquet with Spark.

Needs the ``trikafka[spark]`` extra (pyspark, pyarrow) and Java 17 or 21.
Start one or more brokers first, e.g. ``trikafka serve --port 9092 --log-dir broker0-data --standalone``.

Generate page views (JSON ``{"user", "page", "timestamp"}``) into a topic::

    python -m trikafka.spark.pipeline generate --brokers 0:127.0.0.1:9092 \\
        --topic pageviews --count 100000

Load the topic into Parquet, exactly once::

    python -m trikafka.spark.pipeline load --brokers 0:127.0.0.1:9092 \\
        --topic pageviews --output ./pageviews-out --checkpoint ./pageviews-ckpt

``load`` reads everything produced so far (``Trigger.AvailableNow``), writes
``OUTPUT/events/hour=YYYY-MM-DD-HH/`` (one row per message) and
``OUTPUT/page_views_per_minute/`` (page, minute, views), then exits; run it
again (e.g. from cron) to load what arrived since.  Kill it at any moment and
run it again: the output holds every message exactly once (see
``trikafka.spark.load_job`` for how).  Read ``events`` through Spark
(``spark.read.parquet(OUTPUT + "/events")``), which honours the sink's commit
log; after a successful run plain Parquet readers see the same files.

Both commands take ``--zookeeper host:2181`` instead of ``--brokers`` to
discover brokers and partitions from the registry; ``load --commit-to-group
NAME`` (with ``--zookeeper``) also publishes the loaded offsets so
``trikafka groups`` shows the lag.  ``--help`` lists every option.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from typing import Sequence

from trikafka.wire import Codec
from trikafka.wire.metadata import BrokerAddress

from .cluster import (ClusterConfigError, StaticCluster, ZooKeeperCluster, format_broker_list,
                      parse_broker_list)


NEW_TOPIC_PARTITIONS_PER_BROKER = 1  # generate --brokers: a topic no broker has gets this many on each


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--brokers", "--broker", metavar="[ID:]HOST:PORT[,...]",
                       help="static broker list (an entry without ID gets its position: 0, 1, ...)")
    where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                       help="ZooKeeper connect string of the registry")
    parser.add_argument("--topic", required=True, help="topic name")
    parser.add_argument("--partitions-per-broker", type=int, default=None,
                        help="with --brokers: partitions of the topic on each broker (default: what each "
                             f"broker reports; generate gives a topic no broker has {NEW_TOPIC_PARTITIONS_PER_BROKER} "
                             "on each)")


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev off, as every `trikafka` parser: an option is spelled out whole
    parser = argparse.ArgumentParser(prog="trikafka pipeline", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="produce page-view events", allow_abbrev=False)
    _add_cluster_arguments(gen)
    gen.add_argument("--count", type=int, required=True, help="number of events")
    gen.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    gen.add_argument("--start-ms", type=int, default=None, help="first event time, ms since epoch (default: now)")
    gen.add_argument("--interval-ms", type=int, default=50, help="time between events (default 50)")
    gen.add_argument("--users", type=int, default=1000, help="distinct users (default 1000)")
    gen.add_argument("--batch-size", type=int, default=500, help="messages per produce request (default 500)")
    gen.add_argument("--compression", choices=["none", "gzip", "snappy"], default="none")

    load = commands.add_parser("load", help="load the topic into Parquet (exactly once)", allow_abbrev=False)
    _add_cluster_arguments(load)
    load.add_argument("--output", required=True, help="output directory")
    load.add_argument("--checkpoint", required=True, help="checkpoint directory (keep it with the output)")
    load.add_argument("--starting-offsets", default="earliest",
                      help="where a NEW checkpoint starts: earliest | latest | group:<name> | JSON")
    load.add_argument("--max-bytes-per-trigger", type=int, default=None,
                      help="bytes per micro-batch (never splits a message)")
    load.add_argument("--fetch-size", type=int, default=None, help="bytes per fetch (default 1 MiB)")
    load.add_argument("--commit-to-group", default=None, help="publish loaded offsets to this consumer group")
    load.add_argument("--audit-tier", default=None,
                      help="with --zookeeper: publish the loaded counts per window to trikafka-audit "
                           "as tier spark:<NAME>")
    load.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    load.add_argument("--shuffle-partitions", type=int, default=2)
    return parser


def _open_cluster(args: argparse.Namespace) -> StaticCluster | ZooKeeperCluster:
    if args.zookeeper:
        return ZooKeeperCluster(args.zookeeper)
    return StaticCluster(parse_broker_list(args.brokers), args.partitions_per_broker)


def create_static_topic(brokers: dict[int, BrokerAddress], topic: str, partitions_per_broker: int) -> None:
    """Give ``topic`` ``partitions_per_broker`` partitions on every broker before anything is produced.

    CREATE_TOPIC on each broker (§9.5: a no-op where the topic already has that count); a
    plain 0.7 broker cannot create topics, so there the declared count stands, as in 0.7's
    static ``broker.list`` mode.  ClusterConfigError, before any write, when a broker has
    the topic with another count or refuses it.
    """
    from trikafka.wire import ErrorCode

    from .blocking_client import BlockingExtensionNotSupported, BrokerConnection

    for broker_id, address in sorted(brokers.items()):
        where = f"broker {broker_id} ({address.host}:{address.port})"
        try:
            with BrokerConnection(address.host, address.port) as conn:
                result = conn.create_topic(topic, partitions_per_broker)
        except BlockingExtensionNotSupported:
            continue
        except ConnectionError as exc:
            raise ClusterConfigError(f"cannot create {topic!r} on {where}: {exc}") from None
        if result.error == ErrorCode.NO_ERROR:
            continue
        if result.partitions >= 0:
            raise ClusterConfigError(f"topic {topic!r} has a partition count of {result.partitions} on {where}, "
                                     f"not the {partitions_per_broker} that --partitions-per-broker names")
        raise ClusterConfigError(f"{where} refuses to create topic {topic!r}: {result.error.name}")


def run_generate(args: argparse.Namespace) -> int:
    from .pageviews import generate_pageviews, wall_clock_ms

    if args.partitions_per_broker is None and not args.zookeeper:
        brokers = parse_broker_list(args.brokers)
        if not StaticCluster(brokers, allow_missing_topics=True).partitions(args.topic):
            # What a first produce would do, declared: the README's first command runs on a fresh `serve`.
            args.partitions_per_broker = NEW_TOPIC_PARTITIONS_PER_BROKER
            print(f"trikafka: topic {args.topic!r} does not exist: creating it with "
                  f"{NEW_TOPIC_PARTITIONS_PER_BROKER} partition on each broker", file=sys.stderr)
    if args.partitions_per_broker is not None and not args.zookeeper:
        create_static_topic(parse_broker_list(args.brokers), args.topic, args.partitions_per_broker)
    cluster = _open_cluster(args)
    try:
        brokers, targets = cluster.brokers(), cluster.partitions(args.topic)
    finally:
        cluster.close()
    rng = random.Random(args.seed)
    clock = (lambda: args.start_ms) if args.start_ms is not None else wall_clock_ms
    started = time.perf_counter()
    summary = generate_pageviews(
        brokers, targets, args.count, rng=rng, clock_ms=clock, interval_ms=args.interval_ms,
        users=args.users, batch_size=args.batch_size, codec=Codec[args.compression.upper()],
    )
    elapsed = time.perf_counter() - started
    print(json.dumps({
        "messages": summary.messages,
        "payload_bytes": summary.payload_bytes,
        "seconds": round(elapsed, 3),
        "partitions": {str(k): n for k, n in sorted(summary.per_partition.items())},
    }))
    return 0


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``trikafka`` source options for the load command's arguments."""
    options = {"topics": args.topic, "startingOffsets": args.starting_offsets}
    if args.zookeeper:
        options["zookeeper"] = args.zookeeper
    else:
        options["brokers"] = format_broker_list(parse_broker_list(args.brokers).values())
        if args.partitions_per_broker is not None:
            options["partitionsPerBroker"] = str(args.partitions_per_broker)
    if args.max_bytes_per_trigger is not None:
        options["maxBytesPerTrigger"] = str(args.max_bytes_per_trigger)
    if args.fetch_size is not None:
        options["fetchSize"] = str(args.fetch_size)
    if args.commit_to_group:
        options["commitToGroup"] = args.commit_to_group
    return options


def run_load_command(args: argparse.Namespace) -> int:
    from .load_job import LoadConfig, run_load
    from .session import build_session

    if args.commit_to_group and not args.zookeeper:
        raise ClusterConfigError("--commit-to-group needs --zookeeper")
    if args.audit_tier and not args.zookeeper:
        raise ClusterConfigError("--audit-tier needs --zookeeper")
    config = LoadConfig(
        source_options=source_options(args), output_dir=args.output, checkpoint_dir=args.checkpoint,
        commit_to_group=args.commit_to_group, zookeeper=args.zookeeper,
        audit_tier=f"spark:{args.audit_tier}" if args.audit_tier else None,
    )
    _check_topics(config.source_options)  # one clear line before Spark starts, not a JVM traceback
    spark = build_session("trikafka-load", master=args.master, shuffle_partitions=args.shuffle_partitions)
    try:
        started = time.perf_counter()
        summary = run_load(spark, config)
        print(json.dumps({
            "batches": summary.batches,
            "rows_loaded": summary.rows_loaded,
            "rows_total": summary.rows_total,
            "aggregate_rows": summary.aggregate_rows,
            "vacuumed_files": summary.vacuumed_files,
            "seconds": round(time.perf_counter() - started, 3),
            "end_offsets": {str(k): v for k, v in sorted(summary.end_offsets.items())},
        }))
    finally:
        spark.stop()
    return 0


def _check_topics(options_map: dict[str, str]) -> None:
    from .options import parse_options
    from .planning import discover_keys

    options = parse_options(options_map)
    cluster = options.open_cluster()
    try:
        discover_keys(options, cluster, require_topics=True)
    finally:
        cluster.close()


def _not_from_py4j(record: "logging.LogRecord") -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def main(argv: Sequence[str] | None = None) -> int:
    from .session import error_line

    args = build_parser().parse_args(argv)
    # py4j logs each call that an interrupt or a stopping JVM breaks, with its traceback, on
    # the root logger; the error that matters reaches us as an exception, printed in one line below.
    logging.getLogger().addFilter(_not_from_py4j)
    try:
        if args.command == "generate":
            return run_generate(args)
        return run_load_command(args)
    except (ClusterConfigError, ValueError, ConnectionError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trikafka: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not type(exc).__module__.startswith(("pyspark.", "py4j.")):
            raise
        print(f"trikafka: {error_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
