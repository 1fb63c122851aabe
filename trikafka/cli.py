"""The ``trikafka`` command: ``serve``, ``produce``, ``consume``, ``topics``.

``trikafka serve`` runs a broker registered in ZooKeeper (§11.2): with no
``--zookeeper`` it starts a private ZooKeeper child process (data next to the
log dir, stopped with the broker), so one command gives a one-broker cluster;
``--zookeeper host:port[,host:port][/chroot]`` joins an ensemble (more brokers
join the same way); ``--standalone`` runs without ZooKeeper.  When it is ready it prints
``trikafka: serving on HOST:PORT`` to stderr and, with ``--ready-file``,
writes the port to that file, so scripts can start it on port 0.

``produce`` sends each stdin line as one message, ``consume`` prints each
payload as one line; both talk to one broker (default 127.0.0.1:9092), except
``produce --zookeeper``, which finds brokers and partitions in ZooKeeper.
``consume --group G`` joins consumer group ``G`` through ZooKeeper (default
``127.0.0.1:2181``, where ``trikafka serve`` puts its private ZooKeeper), commits
as it goes and on SIGINT/SIGTERM; ``groups`` lists the groups, ``groups G``
shows members, owners, committed offsets, log ends and lag.
``topics`` lists what a log directory holds (``--log-dir``), the topics
registered in ZooKeeper (``--zk``), or named topics of one broker; each
partition's start, visible end and size come from OFFSETS.  The 0.7 protocol
has no metadata request, and trikafka adds none.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from typing import Sequence

import trio

from trikafka.broker.config import DEFAULT_HOST, DEFAULT_PORT, BrokerConfig, ConfigError, load

logger = logging.getLogger("trikafka.cli")

READY_LINE = "trikafka: serving on {host}:{port}"
DEFAULT_BROKER = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
PRODUCE_BATCH_MESSAGES = 200  # 0.7's async producer batch.size
DEFAULT_ZOOKEEPER = "127.0.0.1:2181"  # where `trikafka serve` starts its private ZooKeeper
READ_BYTES = 256 * 1024


def parse_broker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, or ``HOST``) to a pair; default 127.0.0.1:9092."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(DEFAULT_PORT)
    try:
        return host or DEFAULT_HOST, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}") from None


# --------------------------------------------------------------------------- serve


def _serve_config(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, object] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    flags = {"port": args.port, "host": args.host, "log_dir": args.log_dir, "broker_id": args.broker_id,
             "num_partitions": args.num_partitions}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    if args.standalone and args.zookeeper:
        raise ConfigError("--standalone and --zookeeper exclude each other")
    if args.standalone:
        overrides["enable_zookeeper"] = False
    if args.zookeeper:
        overrides.update(enable_zookeeper=True, zk_connect=args.zookeeper)
    # 0.7's enable.zookeeper defaults to true: so does the command (not the library).
    config = load(args.config, overrides, base=BrokerConfig(enable_zookeeper=True))
    if config.enable_zookeeper and config.zk_connect:
        from trikafka.zk import parse_connect_string

        try:
            parse_connect_string(config.zk_connect)
        except ValueError as exc:
            raise ConfigError(f"zk.connect: {exc}") from None
    return config


def _write_ready_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)  # readers never see a half-written file


async def _serve_main(config: BrokerConfig, ready_file: str | None) -> None:
    from trikafka.broker.server import serve

    async with trio.open_nursery() as nursery:
        broker = await nursery.start(functools.partial(serve, config, handle_signals=True))
        if broker.zookeeper is not None:
            zk = broker.zookeeper
            where = (f"private ZooKeeper {zk.connect_string} (pid {zk.private_server.pid}, "
                     f"data {zk.private_server.data_dir})" if zk.private else f"ZooKeeper {zk.connect_string}")
            print(f"trikafka: broker {config.broker_id} registered in {where}", file=sys.stderr, flush=True)
        if ready_file:  # before the ready line, so a reader of the line finds the file
            _write_ready_file(ready_file, broker.port)
        print(READY_LINE.format(host=broker.host, port=broker.port), file=sys.stderr, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = _serve_config(args)
    except (ConfigError, OSError) as exc:
        print(f"trikafka: bad configuration: {exc}", file=sys.stderr)
        return 2
    from trikafka.broker.zookeeper import ZooKeeperSetupError
    from trikafka.zk import CoordinatorError

    if config.enable_zookeeper and logging.getLogger("kazoo").level == logging.NOTSET:
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # connection chatter at INFO
    os_errors: list[BaseException] = []
    interrupted = False
    try:
        trio.run(_serve_main, config, args.ready_file)
    except* (CoordinatorError, ZooKeeperSetupError) as group:  # e.g. the broker id is taken
        os_errors.extend(_leaf_exceptions(group))
    except* OSError as group:  # e.g. the port is taken, the log dir is not writable
        os_errors.extend(_leaf_exceptions(group))
    except* KeyboardInterrupt:  # before the signal handler was installed: no clean marker
        interrupted = True
    # Anything else (a failed log, a bug) propagates with its traceback: exit status 1.
    for exc in os_errors:
        print(f"trikafka: {exc}", file=sys.stderr)
    if interrupted:
        print("trikafka: interrupted", file=sys.stderr)
        return 130
    return 1 if os_errors else 0


def _leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaf_exceptions(inner)]
    return [exc]


# --------------------------------------------------------------------------- produce


async def _read_lines(stream: trio.abc.ReceiveStream):
    """Yield lists of complete lines (without the newline) as they arrive."""
    pending = b""
    while True:
        data = await stream.receive_some(READ_BYTES)
        if not data:
            break
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        if lines:
            yield lines
    if pending:
        yield [pending]


async def _produce_main(args: argparse.Namespace) -> int:
    from trikafka.client import connect
    from trikafka.wire import ErrorCode, build_message_set

    if args.zookeeper:
        return await _produce_with_producer(args)
    host, port = args.broker
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    async with await connect(host, port) as conn, stdin:
        async for lines in _read_lines(stdin):
            for i in range(0, len(lines), args.batch):
                message_set = build_message_set(lines[i:i + args.batch], magic=args.magic)
                if args.acks == 0:
                    await conn.produce(args.topic, args.partition, message_set)
                else:
                    [result] = await conn.produce_acked([(args.topic, args.partition, message_set)],
                                                        acks=args.acks, timeout_ms=args.timeout_ms)
                    if result.error != ErrorCode.NO_ERROR:
                        print(f"trikafka: produce to {args.topic}-{result.partition} failed: "
                              f"{result.error.name}", file=sys.stderr)
                        return 1
                sent += len(lines[i:i + args.batch])
    print(f"trikafka: sent {sent} messages to {args.topic}", file=sys.stderr)
    return 0


async def _produce_with_producer(args: argparse.Namespace) -> int:
    """``--zookeeper``: the Producer finds brokers and partitions (spec §11.6) and batches."""
    from trikafka.producer import Producer
    from trikafka.zk import CoordinatorError

    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    try:
        async with Producer(zk_connect=args.zookeeper, producer_type="async", acks=args.acks,
                            batch_size=args.batch, ack_timeout_s=args.timeout_ms / 1000,
                            audit=args.audit) as producer, stdin:
            async for lines in _read_lines(stdin):
                await producer.send_batch(args.topic, lines)
                sent += len(lines)
    except CoordinatorError as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    print(f"trikafka: sent {sent} messages to {args.topic}", file=sys.stderr)
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    return _run_client(_produce_main, args)


# --------------------------------------------------------------------------- consume


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
        await _print_payloads(consumer.messages(start), args)
    return 0


async def _print_payloads(messages, args: argparse.Namespace) -> None:
    """Each payload as one stdout line, up to ``--max-messages``, flushed unless ``--no-flush``."""
    out = sys.stdout.buffer
    count = 0
    try:
        async for message in messages:
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
        return _run_group_client(_consume_group_main, args)
    return _run_client(_consume_main, args)


# --------------------------------------------------------------------------- groups


async def _groups_main(args: argparse.Namespace) -> int:
    from trikafka.group.inspect import describe_group, list_groups, measure_lag
    from trikafka.zk import KazooCoordinator

    async with KazooCoordinator(args.zookeeper, ensure_chroot=False) as zk:
        if not args.group:
            print("group\tmembers")
            for group, members in sorted((await list_groups(zk)).items()):
                print(f"{group}\t{members}")
            return 0
        description = await measure_lag(zk, await describe_group(zk, args.group))
    print(f"group {description.group}: {len(description.members)} members")
    print("member\tsubscription")
    for member, subscription in sorted(description.members.items()):
        shown = subscription if isinstance(subscription, str) else subscription.encode().decode()
        print(f"{member}\t{shown}")
    print("topic\tpartition\towner\tcommitted\tlog_end\tlag_bytes")
    for p in description.partitions:
        def text(value):
            return "-" if value is None else str(value)
        print(f"{p.topic}\t{p.partition}\t{text(p.owner)}\t{text(p.committed)}\t{text(p.log_end)}\t"
              f"{text(p.lag_bytes)}")
        if p.error:
            print(f"trikafka: {p.topic}/{p.partition}: log end unknown: {p.error}", file=sys.stderr)
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    return _run_group_client(_groups_main, args)


# --------------------------------------------------------------------------- topics


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


TopicRow = tuple[str, str, str, int, int]  # topic, partition name, broker HOST:PORT, start, visible end


async def _topics_from_broker(args: argparse.Namespace) -> tuple[list[TopicRow], bool]:
    """Rows for the named topics (every topic when none is named), and whether all were found.

    Partition counts come from METADATA, or from the FETCH probe on a plain
    0.7 broker, which cannot list topics or tell a missing topic from an empty one.
    """
    from trikafka.client import connect, earliest_offset, latest_offset, partition_counts
    from trikafka.wire import ErrorCode

    host, port = args.broker
    rows: list[TopicRow] = []
    all_found = True
    counts = None if args.partitions is not None else await partition_counts(host, port, args.topic)
    if counts is not None and not args.topic and counts.metadata is None:
        print("trikafka: this broker is a plain 0.7 broker, which cannot list its topics; "
              "name the topics, or give --zk CONNECT or --log-dir DIR", file=sys.stderr)
        return rows, False
    names = list(args.topic) or list(counts.topics)
    async with await connect(host, port) as conn:
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
            count = args.partitions if found is None else found.count
            for partition in range(count):
                rows.append((topic, str(partition), f"{host}:{port}", await earliest_offset(conn, topic, partition),
                             await latest_offset(conn, topic, partition)))
    return rows, all_found


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
    all_found = True
    if args.zk:
        rows = _run_client_value(_topics_from_zookeeper, args)
    else:
        answer = _run_client_value(_topics_from_broker, args)
        rows, all_found = answer if answer is not None else (None, False)
    if rows is None:
        return 1
    if rows or all_found:
        print("topic\tpartition\tbroker\tstart\tvisible_end\tbytes")
    for topic, partition, broker, start, end in rows:
        print(f"{topic}\t{partition}\t{broker}\t{start}\t{end}\t{end - start}")
    return 0 if all_found else 1


# --------------------------------------------------------------------------- plumbing


def _run_client_value(fn, args: argparse.Namespace):
    from trikafka.client import ClientError
    from trikafka.zk import CoordinatorError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return None
    except (ClientError, CoordinatorError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return None


def _run_client(fn, args: argparse.Namespace) -> int:
    from trikafka.client import ClientError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return 0  # interrupting a consumer is how it is meant to stop
    except BrokenPipeError:
        return 0  # stdout closed (e.g. piped into head)
    except (ClientError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1


def _run_group_client(fn, args: argparse.Namespace) -> int:
    """Like ``_run_client``, for commands that talk to ZooKeeper too."""
    from trikafka.group import ConsumerIdTakenOver, RebalanceFailedError
    from trikafka.zk import CoordinatorError

    expected = (CoordinatorError, RebalanceFailedError, ConsumerIdTakenOver)
    try:
        return _run_client(fn, args)
    except expected as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        leaves = _leaf_exceptions(group)
        if all(isinstance(e, expected) for e in leaves):
            for exc in leaves:
                print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
            return 1
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trikafka", description="Kafka 0.7 on Trio")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a broker")
    serve.add_argument("--config", help="TOML file, or a 0.7 server.properties")
    serve.add_argument("--host", help=f"address to bind (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--log-dir", help="data directory (default ./trikafka-data)")
    serve.add_argument("--broker-id", type=int)
    serve.add_argument("--num-partitions", type=int)
    serve.add_argument("--standalone", action="store_true",
                       help="no ZooKeeper (0.7's enable.zookeeper=false)")
    serve.add_argument("--zookeeper", metavar="CONNECT",
                       help="join this ZooKeeper ensemble, host:port[,host:port][/chroot] "
                            "(default: start a private ZooKeeper next to the log dir)")
    serve.add_argument("--ready-file", help="write the bound port here once serving")
    serve.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="any setting, 0.7 or snake_case name (repeatable)")
    serve.set_defaults(func=cmd_serve)

    def add_broker(p: argparse.ArgumentParser) -> None:
        p.add_argument("--broker", type=parse_broker, default=parse_broker(DEFAULT_BROKER),
                       help=f"HOST:PORT (default {DEFAULT_BROKER})")

    produce = commands.add_parser("produce", help="send stdin lines as messages")
    produce.add_argument("topic")
    add_broker(produce)
    produce.add_argument("--partition", type=int, default=0, help="-1: the broker picks at random")
    produce.add_argument("--batch", type=int, default=PRODUCE_BATCH_MESSAGES, help="messages per request")
    produce.add_argument("--acks", type=int, choices=(0, 1, -1), default=1,
                         help="0: plain 0.7 PRODUCE; 1: appended; -1: flushed (default 1)")
    produce.add_argument("--timeout-ms", type=int, default=10_000)
    produce.add_argument("--magic", type=int, choices=(0, 1), default=1)
    produce.add_argument("--zookeeper", metavar="CONNECT",
                         help="find brokers and partitions in ZooKeeper (host:port[/chroot]) and send "
                              "through the batching Producer; --broker, --partition and --magic are ignored")
    produce.add_argument("--audit", action="store_true",
                         help="with --zookeeper: wrap messages in the audit envelope and publish audit "
                              "events to trikafka-audit")
    produce.set_defaults(func=cmd_produce)

    consume = commands.add_parser("consume", help="print messages, one per line")
    consume.add_argument("topic")
    add_broker(consume)
    consume.add_argument("--partition", type=int, default=0)
    consume.add_argument("--from", dest="from_", default="earliest", help="earliest, latest or an offset")
    consume.add_argument("--max-messages", type=int, help="stop after this many")
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
    consume.set_defaults(func=cmd_consume)

    groups = commands.add_parser("groups", help="list consumer groups, or show one: members, owners, "
                                                "committed offsets, log ends and lag")
    groups.add_argument("group", nargs="?")
    groups.add_argument("--zookeeper", metavar="CONNECT", default=DEFAULT_ZOOKEEPER,
                        help=f"host:port[,host:port][/chroot] (default {DEFAULT_ZOOKEEPER})")
    groups.set_defaults(func=cmd_groups)

    topics = commands.add_parser("topics", help="list topics of a log dir, or offsets of named topics")
    topics.add_argument("topic", nargs="*")
    add_broker(topics)
    topics.add_argument("--log-dir", help="read this broker data directory instead of asking a broker")
    topics.add_argument("--zk", metavar="CONNECT",
                        help="list the topics registered in this ZooKeeper and ask each broker their offsets")
    topics.add_argument("--partitions", type=int,
                        help="partitions to query per named topic (default: ask the broker how many)")
    topics.set_defaults(func=cmd_topics)

    # mirror and audit: the logic lives in trikafka.mirror.commands.
    from trikafka.mirror.commands import add_audit_parser, add_mirror_parser

    add_mirror_parser(commands)
    add_audit_parser(commands)

    pipeline = commands.add_parser(
        "pipeline", add_help=False,
        help="the page-view pipeline on Spark: generate | load (needs trikafka[spark]; --help for more)")
    pipeline.add_argument("pipeline_args", nargs=argparse.REMAINDER)
    pipeline.set_defaults(func=cmd_pipeline)
    return parser


def cmd_pipeline(args: argparse.Namespace | Sequence[str]) -> int:
    """``trikafka pipeline ...`` is ``python -m trikafka.spark.pipeline ...``."""
    from trikafka.spark.pipeline import main as pipeline_main

    rest = args.pipeline_args if isinstance(args, argparse.Namespace) else list(args)
    return pipeline_main(rest)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pipeline"]:  # its own parser owns every option, --help included
        return cmd_pipeline(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command != "serve" and args.log_level.upper() == "INFO":
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # connection chatter, not news to a user
    if getattr(args, "from_", "earliest") not in ("earliest", "latest"):
        try:
            int(args.from_)
        except ValueError:
            parser.error(f"--from must be earliest, latest or an offset, not {args.from_!r}")
    if getattr(args, "group", None) and args.command == "consume":
        if args.from_ not in ("earliest", "latest"):
            parser.error("--from with --group must be earliest or latest (offsets come from the group)")
        if args.whitelist and args.blacklist:
            parser.error("--whitelist and --blacklist exclude each other")
        if args.streams < 1:
            parser.error("--streams must be >= 1")
    if args.command == "produce" and args.audit and not args.zookeeper:
        parser.error("--audit needs --zookeeper (the batching Producer writes the envelope)")
    if getattr(args, "batch", 1) < 1:
        parser.error("--batch must be >= 1")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
