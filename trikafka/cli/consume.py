"""``trikafka consume``: one partition of one broker, or (``--group``) a consumer group member."""

from __future__ import annotations

import argparse
import sys

import trio

from trikafka.cli.common import DEFAULT_ZOOKEEPER, add_broker, run_client, run_group_client


def add_parser(commands) -> None:
    """Register ``consume`` on the ``trikafka`` subparsers."""
    consume = commands.add_parser("consume", help="print messages, one per line")
    consume.add_argument("topic")
    add_broker(consume)
    consume.add_argument("--partition", type=int, default=0)
    consume.add_argument("--from", dest="from_", default="earliest", help="earliest, latest or an offset")
    consume.add_argument("--max-messages", type=int, help="stop after this many")
    consume.add_argument("--print-key", action="store_true", help="print keyed messages as KEY<SEP>VALUE")
    consume.add_argument("--key-separator", metavar="SEP", default=":", help="with --print-key (default :)")
    consume.add_argument("--no-flush", action="store_true", help="don't flush stdout after each message")
    consume.add_argument("--group", help="consume as a member of this consumer group (balanced through "
                                         "ZooKeeper; --from then applies only where nothing was committed)")
    consume.add_argument("--zookeeper", metavar="CONNECT", default=DEFAULT_ZOOKEEPER,
                         help=f"with --group: host:port[,host:port][/chroot] (default {DEFAULT_ZOOKEEPER})")
    consume.add_argument("--whitelist", action="store_true", help="with --group: TOPIC is a regex of topics")
    consume.add_argument("--blacklist", action="store_true", help="with --group: TOPIC is a regex to exclude")
    consume.add_argument("--streams", type=int, default=1, help="with --group: streams (threads) per topic")
    consume.add_argument("--consumer-id", help="with --group: fixed consumer id (0.7 consumerid)")
    consume.add_argument("--commit-interval-ms", type=int, default=1000,
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

async def _consume_main(args: argparse.Namespace) -> int:
    from trikafka.client import SimpleConsumer

    host, port = args.broker
    async with SimpleConsumer((host, port), args.topic, args.partition) as consumer:
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

    from trikafka.group import GroupConfig, GroupConsumer, blacklist, whitelist
    from trikafka.zk import KazooCoordinator

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
