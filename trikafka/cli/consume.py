"""``trikafka consume``: one partition of one broker, or (``--group``) a consumer group member."""

from __future__ import annotations

import argparse
import sys

import trio

from trikafka.cli.common import (add_broker, add_zookeeper, leaf_exceptions, run_client, run_group_client,
                                 stop_on_sigterm)


def add_parser(commands) -> None:
    """Register ``consume`` on the ``trikafka`` subparsers."""
    consume = commands.add_parser("consume", help="print messages, one per line")
    consume.add_argument("topic", metavar="TOPIC", help="the topic (with --whitelist/--blacklist: a regex)")
    add_broker(consume)
    consume.add_argument("--partition", type=int, default=0, metavar="N", help="the partition (default 0)")
    consume.add_argument("--from", dest="from_", default="earliest", metavar="WHERE",
                         help="earliest (default), latest or a byte offset that starts an entry")
    consume.add_argument("--max-messages", type=int, metavar="N", help="stop after this many")
    consume.add_argument("--print-key", action="store_true", help="print keyed messages as KEY<SEP>VALUE")
    consume.add_argument("--key-separator", metavar="SEP", default=":", help="with --print-key (default :)")
    consume.add_argument("--no-flush", action="store_true", help="don't flush stdout after each message")
    consume.add_argument("--group", metavar="GROUP",
                         help="consume as a member of this consumer group (balanced through ZooKeeper; "
                              "--from then applies only where nothing was committed)")
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

async def _check_partition(args: argparse.Namespace) -> str | None:
    """Why ``--partition`` of ``topic`` cannot be consumed (None: it can), from METADATA or the probe."""
    from trikafka.cli.common import plural
    from trikafka.client import partition_counts
    from trikafka.wire import ErrorCode

    host, port = args.broker
    found = (await partition_counts(host, port, [args.topic])).topics[args.topic]
    if found.error == ErrorCode.INVALID_TOPIC:
        return f"the broker at {host}:{port} rejects the topic name {args.topic!r} (INVALID_TOPIC)"
    if found.error == ErrorCode.NO_ERROR and not 0 <= args.partition < found.count:
        return (f"topic {args.topic!r} has no partition {args.partition}: it has "
                f"{plural(found.count, 'partition')} (0..{found.count - 1}) on {host}:{port}")
    return None  # an unknown topic may still appear: wait for it as 0.7's consumer does


async def _consume_main(args: argparse.Namespace) -> int:
    from trikafka.client import MessageTooLargeForFetch, SimpleConsumer

    host, port = args.broker
    problem = await _check_partition(args)
    if problem is not None:
        print(f"trikafka: {problem}", file=sys.stderr)
        return 1
    try:
        status = await stop_on_sigterm(_consume_partition, args, SimpleConsumer)
        return 0 if status is None else status  # None: stopped by SIGTERM, a clean stop
    except (MessageTooLargeForFetch, BaseExceptionGroup) as error:  # direct, or from stop_on_sigterm's nursery
        leaves = leaf_exceptions(error)
        exc = leaves[0]
        if (len(leaves) != 1 or not isinstance(exc, MessageTooLargeForFetch) or args.from_ in ("earliest", "latest")
                or exc.offset != int(args.from_)):
            raise
        print(f"trikafka: offset {exc.offset} is not an entry boundary of {args.topic}-{args.partition} "
              f"(the bytes there do not start a message); give an offset printed by `consume` or "
              f"`topics`, or earliest/latest", file=sys.stderr)
        return 1


async def _consume_partition(args: argparse.Namespace, SimpleConsumer) -> int:
    from trikafka.client import LeaderDirectory

    host, port = args.broker
    # A replicated partition is read from its current leader, through failovers (§12).
    async with SimpleConsumer((host, port), args.topic, args.partition,
                              leaders=LeaderDirectory([(host, port)])) as consumer:
        if args.from_ == "earliest":
            start = await consumer.earliest()
        elif args.from_ == "latest":
            start = await consumer.latest()
        else:
            start = int(args.from_)
        # On stderr, so stdout stays payloads only; scripts may wait for this line.
        print(f"trikafka: consuming {args.topic}-{args.partition} from offset {start}", file=sys.stderr, flush=True)
        if args.print_key:
            from trikafka.wire.keyed import iter_keyed_messages

            await _print_payloads(consumer.messages(start, decode=iter_keyed_messages), args)
        else:
            await _print_payloads(consumer.messages(start), args)
    return 0


async def _print_payloads(messages, args: argparse.Namespace) -> None:
    """Each payload as one stdout line, up to ``--max-messages``, flushed unless ``--no-flush``."""
    out = sys.stdout.buffer
    count = 0
    try:
        separator = (getattr(args, "key_separator", None) or ":").encode()
        async for message in messages:
            if getattr(args, "print_key", False):  # keyed: key<SEP>value, a tombstone as key<SEP>
                out.write((message.key or b"") + separator + message.value + b"\n")
            else:
                out.write(message.payload + b"\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
            if not args.no_flush:
                out.flush()
    finally:
        out.flush()


async def _consume_group_main(args: argparse.Namespace) -> int:
    """``consume --group``: a GroupConsumer member; commits as it goes and when stopped."""
    import signal

    from trikafka.group import GroupConfig, GroupConsumer, TopicFilter, blacklist, whitelist
    from trikafka.zk import KazooCoordinator

    subscription: TopicFilter | dict[str, int]
    if args.whitelist or args.blacklist:
        subscription = (whitelist if args.whitelist else blacklist)(args.topic)
    else:
        subscription = {args.topic: args.streams}
    config = GroupConfig(autooffset_reset="largest" if args.from_ == "latest" else "smallest",
                         autocommit_interval_s=args.commit_interval_ms / 1000, num_streams=args.streams)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with KazooCoordinator(args.zookeeper) as zk, trio.open_nursery() as nursery:
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
                    await _print_payloads(consumer, args)
            nursery.cancel_scope.cancel()
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    if args.group:
        return run_group_client(_consume_group_main, args)
    return run_client(_consume_main, args)
