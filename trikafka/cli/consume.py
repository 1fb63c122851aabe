"""``trikafka consume``: one partition of one broker, or (``--group``) a consumer group member."""

from __future__ import annotations

import argparse
import sys
import trio

from trikafka.cli.common import (Printer, add_broker, add_kafka, add_zookeeper, run_client, run_group_client,
                                 stop_on_sigterm, validate_kafka)
from trikafka.util.errors import leaf_exceptions
from trikafka.cli.message_format import FORMAT_HELP, MessageFormat, Printed


def add_parser(commands) -> None:
    """Register ``consume`` on the ``trikafka`` subparsers."""
    consume = commands.add_parser("consume")
    consume.add_argument("topic", metavar="TOPIC", help="the topic (with --whitelist/--blacklist: a regex)")
    add_broker(consume)
    consume.add_argument("--partition", "-p", type=int, default=None, metavar="N",
                         help="read only this partition (default: every partition the broker has)")
    consume.add_argument("--from", dest="from_", default="earliest", metavar="WHERE",
                         help="earliest (default), latest or a byte offset that starts an entry (with --kafka: a "
                              "record offset)")
    consume.add_argument("--max-messages", "-c", type=int, metavar="N", help="stop after this many")
    consume.add_argument("--exit-at-end", "-e", action="store_true",
                         help="stop once every partition is read up to its end as it was at the start")
    consume.add_argument("--format", "-f", metavar="FMT",
                         help=f"print each message as FMT: {FORMAT_HELP} (default '%%s\\n')")
    consume.add_argument("--print-key", action="store_true",
                         help="print messages as KEY<SEP>VALUE (the format '%%k<SEP>%%s\\n')")
    consume.add_argument("--key-separator", metavar="SEP", default=":", help="with --print-key (default :)")
    consume.add_argument("--no-flush", action="store_true", help="don't flush stdout after each message")
    consume.add_argument("--group", metavar="GROUP",
                         help="consume as a member of this consumer group (balanced through ZooKeeper, or with "
                              "--kafka through the group's coordinator; --from then applies only where nothing "
                              "was committed)")
    add_kafka(consume)
    consume.add_argument("--group-protocol", choices=("classic", "consumer"), default=None,
                         help="with --kafka --group: Kafka's group.protocol, classic (the default: JoinGroup, "
                              "a member assigns) or consumer (Kafka 4's: the broker assigns, docs/protocol.md §17.9)")
    consume.add_argument("--read-committed", action="store_true",
                         help="with --kafka: read committed transactions only, up to the last stable offset "
                              "(isolation.level=read_committed, docs/protocol.md §19.7)")
    add_zookeeper(consume, "with --group: the group's ZooKeeper")
    consume.add_argument("--whitelist", action="store_true", help="with --group: TOPIC is a regex of topics")
    consume.add_argument("--blacklist", action="store_true", help="with --group: TOPIC is a regex to exclude")
    consume.add_argument("--streams", type=int, default=1, metavar="N",
                         help="with --group: streams (threads) per topic")
    consume.add_argument("--consumer-id", metavar="ID", help="with --group: fixed consumer id (0.7 consumerid)")
    consume.add_argument("--commit-interval-ms", type=int, default=1000, metavar="MS",
                         help="with --group: autocommit interval (default 1000)")
    consume.set_defaults(func=cmd_consume, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    validate_kafka(parser, args)
    if args.format is not None:
        if args.print_key:
            parser.error("--format and --print-key exclude each other (use %k in the format)")
        try:
            MessageFormat.parse(args.format)
        except ValueError as exc:
            parser.error(str(exc))
    if args.kafka is not None and args.group and (args.whitelist or args.blacklist or args.streams != 1
                                                  or args.consumer_id):
        parser.error("--whitelist, --blacklist, --streams and --consumer-id are for ZooKeeper groups, not --kafka")
    if args.group_protocol is not None and not (args.kafka is not None and args.group):
        parser.error("--group-protocol is for a --kafka --group member")
    if args.group and (args.exit_at_end or args.partition is not None):
        parser.error("--exit-at-end and --partition read partitions directly, not as a group member")
    if args.from_ not in ("earliest", "latest"):
        try:
            int(args.from_)
        except ValueError:
            parser.error(f"--from must be earliest, latest or an offset, not {args.from_!r}")
    if args.group:
        if args.from_ not in ("earliest", "latest"):
            parser.error("--from with --group must be earliest or latest (offsets come from the group)")
        if args.whitelist and args.blacklist:
            parser.error("--whitelist and --blacklist exclude each other")
        if args.streams < 1:
            parser.error("--streams must be >= 1")

async def _partitions_to_read(args: argparse.Namespace) -> tuple[list[int], str | None]:
    """(the partitions to read, why they cannot be read or None), from METADATA or the probe.

    Without ``--partition`` every partition the broker reports; a topic it does not have
    yet is waited for at partition 0, as 0.7's consumer does, unless ``--exit-at-end``.
    """
    from trikafka.cli.common import kafka_format_hint, plural
    from trikafka.client import partition_counts
    from trikafka.wire import ErrorCode

    host, port = args.broker
    found = (await partition_counts(host, port, [args.topic], formats=True)).topics[args.topic]
    if found.error == ErrorCode.INVALID_TOPIC:
        return [], f"the broker at {host}:{port} rejects the topic name {args.topic!r} (INVALID_TOPIC)"
    if found.kafka_format:
        return [], kafka_format_hint(args.topic)
    if found.error != ErrorCode.NO_ERROR or found.count == 0:
        if args.exit_at_end:
            return [], f"topic {args.topic!r} does not exist on {host}:{port}"
        partition = 0 if args.partition is None else args.partition
        print(f"trikafka: topic {args.topic!r} does not exist on {host}:{port} yet; waiting for its partition "
              f"{partition} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        return [partition], None
    if args.partition is None:
        partitions = list(range(found.count))
    elif 0 <= args.partition < found.count:
        partitions = [args.partition]
    else:
        return [], (f"topic {args.topic!r} has no partition {args.partition}: it has "
                    f"{plural(found.count, 'partition')} (0..{found.count - 1}) on {host}:{port}")
    if args.from_ not in ("earliest", "latest") and len(partitions) > 1:
        return [], (f"--from {args.from_} is a byte offset of one partition, and {args.topic!r} has "
                    f"{plural(found.count, 'partition')}: give --partition N")
    return partitions, None


async def _consume_main(args: argparse.Namespace) -> int:
    from trikafka.client import MessageTooLargeForFetch

    partitions, problem = await _partitions_to_read(args)
    if problem is not None:
        print(f"trikafka: {problem}", file=sys.stderr)
        return 1
    try:
        status = await stop_on_sigterm(_consume_partitions, args, partitions)
        return 0 if status is None else status  # None: stopped by SIGTERM, a clean stop
    except (MessageTooLargeForFetch, BaseExceptionGroup) as error:  # direct, or from a nursery
        leaves = leaf_exceptions(error)
        exc = leaves[0]
        if (len(leaves) != 1 or not isinstance(exc, MessageTooLargeForFetch) or args.from_ in ("earliest", "latest")
                or exc.offset != int(args.from_)):
            raise
        print(f"trikafka: offset {exc.offset} is not an entry boundary of {args.topic}-{partitions[0]} "
              f"(the bytes there do not start a message); give an offset printed by `consume` or "
              f"`topics`, or earliest/latest", file=sys.stderr)
        return 1


async def _consume_partitions(args: argparse.Namespace, partitions: list[int]) -> int:
    """Read ``partitions`` side by side into one printer; done at ``--max-messages``, or when
    every partition reached its end with ``--exit-at-end``."""
    printer = Printer(args)
    async with trio.open_nursery() as nursery:
        printer.stop = nursery.cancel_scope.cancel
        for partition in partitions:
            nursery.start_soon(_consume_partition, args, partition, printer)
    if args.exit_at_end:
        from trikafka.cli.common import plural

        print(f"trikafka: reached the end of {args.topic} ({plural(len(partitions), 'partition')}) after "
              f"{plural(printer.count, 'message')}", file=sys.stderr)
    return 0


async def _consume_partition(args: argparse.Namespace, partition: int, printer: Printer) -> None:
    from trikafka.client import LeaderDirectory, SimpleConsumer
    from trikafka.wire.keyed import iter_keyed_messages

    host, port = args.broker
    # A replicated partition is read from its current leader, through failovers (§12.13).
    async with SimpleConsumer((host, port), args.topic, partition,
                              leaders=LeaderDirectory([(host, port)])) as consumer:
        if args.from_ == "earliest":
            start = await consumer.earliest()
        elif args.from_ == "latest":
            start = await consumer.latest()
        else:
            start = int(args.from_)
        end = await consumer.latest() if args.exit_at_end else None
        # On stderr, so stdout stays messages only; scripts may wait for this line.
        print(f"trikafka: consuming {args.topic}-{partition} from offset {start}", file=sys.stderr, flush=True)
        if end is not None and start >= end:
            return
        async for message in consumer.messages(start, decode=iter_keyed_messages):
            printer.write(Printed(args.topic, str(partition), message.offset, message.next_offset, message.key,
                                  message.value))
            if end is not None and message.next_offset >= end:
                return


async def _kafka_format_in_zookeeper(zk, topic: str) -> bool:
    """Whether a live broker of ZooKeeper's registry has ``topic`` in Kafka format (§16.6), which the
    group's OFFSETS and fetches cannot read."""
    from trikafka.client import ClientError, partition_counts
    from trikafka.zk.registry import live_brokers

    for broker in (await live_brokers(zk)).values():
        try:
            counts = await partition_counts(broker.host, broker.port, [topic], formats=True)
        except (ClientError, OSError):
            continue  # a broker going away is the group's to handle, as without this check
        if counts.topics[topic].kafka_format:
            return True
    return False


async def _consume_group_main(args: argparse.Namespace) -> int:
    """``consume --group``: a GroupConsumer member; commits as it goes and when stopped."""
    import signal

    from trikafka.group import GroupConfig, GroupConsumer, TopicFilter, blacklist, whitelist
    from trikafka.zk import KazooZooKeeperClient

    subscription: TopicFilter | dict[str, int]
    if args.whitelist or args.blacklist:
        subscription = (whitelist if args.whitelist else blacklist)(args.topic)
    else:
        subscription = {args.topic: args.streams}
    config = GroupConfig(autooffset_reset="largest" if args.from_ == "latest" else "smallest",
                         autocommit_interval_s=args.commit_interval_ms / 1000, num_streams=args.streams)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with KazooZooKeeperClient(args.zookeeper) as zk, trio.open_nursery() as nursery:
            if not (args.whitelist or args.blacklist) and await _kafka_format_in_zookeeper(zk, args.topic):
                from trikafka.cli.common import kafka_format_hint

                print(f"trikafka: {kafka_format_hint(args.topic)}", file=sys.stderr)
                return 1
            async def stop_on_signal(scope: trio.CancelScope) -> None:
                async for signum in signals:
                    print(f"trikafka: {signal.Signals(signum).name}: committing and leaving the group",
                          file=sys.stderr, flush=True)
                    scope.cancel()
                    return

            with trio.CancelScope() as consuming:
                nursery.start_soon(stop_on_signal, consuming)
                async with GroupConsumer(zk, args.group, subscription, consumer_id=args.consumer_id,
                                         config=config) as consumer:
                    print(f"trikafka: consuming {args.topic} as {consumer.consumer_id} of group {args.group}",
                          file=sys.stderr, flush=True)
                    printer = Printer(args)
                    async for m in consumer:
                        printer.write(Printed(m.topic, m.partition, m.offset, m.next_offset, m.key, m.value))
                        if printer.done:
                            break  # leaving the loop, not cancelling: the consumer commits as it leaves
            nursery.cancel_scope.cancel()
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    if args.kafka is not None and args.group:
        from trikafka.cli import kafka_groups

        return run_client(kafka_groups.consume, args)
    if args.kafka is not None:
        from trikafka.cli import kafka_protocol

        return run_client(kafka_protocol.consume, args)
    if args.group:
        return run_group_client(_consume_group_main, args)
    return run_client(_consume_main, args)
