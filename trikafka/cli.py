"""The ``trikafka`` command: ``serve``, ``produce``, ``consume``, ``topics``.

``trikafka serve`` runs a broker (standalone: ZooKeeper registration comes
with the coordination work).  When it is ready it prints
``trikafka: serving on HOST:PORT`` to stderr and, with ``--ready-file``,
writes the port to that file, so scripts can start it on port 0.

``produce`` sends each stdin line as one message, ``consume`` prints each
payload as one line; both talk to one broker (default 127.0.0.1:9092).
``topics`` lists what a log directory holds (``--log-dir``), or the offsets
the broker reports for named topics: the 0.7 protocol has no metadata
request, and trikafka adds none.
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
    if args.standalone:
        overrides["enable_zookeeper"] = False
    config = load(args.config, overrides)
    if config.enable_zookeeper:
        logger.warning("ZooKeeper registration is not implemented yet; running standalone")
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
        print(READY_LINE.format(host=broker.host, port=broker.port), file=sys.stderr, flush=True)
        if ready_file:
            _write_ready_file(ready_file, broker.port)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = _serve_config(args)
    except (ConfigError, OSError) as exc:
        print(f"trikafka: bad configuration: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_serve_main, config, args.ready_file)
    except OSError as exc:  # e.g. the port is taken
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1
    return 0


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


def cmd_produce(args: argparse.Namespace) -> int:
    return _run_client(_produce_main, args)


# --------------------------------------------------------------------------- consume


async def _consume_main(args: argparse.Namespace) -> int:
    from trikafka.client import SimpleConsumer

    host, port = args.broker
    out = sys.stdout.buffer
    count = 0
    async with SimpleConsumer((host, port), args.topic, args.partition) as consumer:
        if args.from_ == "earliest":
            start = await consumer.earliest()
        elif args.from_ == "latest":
            start = await consumer.latest()
        else:
            start = int(args.from_)
        async for message in consumer.messages(start):
            out.write(message.payload + b"\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
            if not args.no_flush:
                out.flush()
    out.flush()
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    return _run_client(_consume_main, args)


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


async def _topics_from_broker(args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    from trikafka.client import connect, earliest_offset, latest_offset

    host, port = args.broker
    rows = []
    async with await connect(host, port) as conn:
        for topic in args.topic:
            for partition in range(args.partitions):
                rows.append((topic, partition, await earliest_offset(conn, topic, partition),
                             await latest_offset(conn, topic, partition)))
    return rows


def cmd_topics(args: argparse.Namespace) -> int:
    if args.log_dir:
        print("topic\tpartition\tsegments\tstart\tend\tbytes")
        for topic, partition, segments, start, end in _topics_from_log_dir(args.log_dir):
            print(f"{topic}\t{partition}\t{segments}\t{start}\t{end}\t{end - start}")
        return 0
    if not args.topic:
        print("trikafka: the 0.7 protocol cannot list topics; give --log-dir DIR, "
              "or name the topics to query the broker's offsets", file=sys.stderr)
        return 2
    rows = _run_client_value(_topics_from_broker, args)
    if rows is None:
        return 1
    print("topic\tpartition\tstart\tvisible_end\tbytes")
    for topic, partition, start, end in rows:
        print(f"{topic}\t{partition}\t{start}\t{end}\t{end - start}")
    return 0


# --------------------------------------------------------------------------- plumbing


def _run_client_value(fn, args: argparse.Namespace):
    from trikafka.client import ClientError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return None
    except (ClientError, OSError) as exc:
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
    serve.add_argument("--standalone", action="store_true", help="no ZooKeeper (the only mode for now)")
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
    produce.set_defaults(func=cmd_produce)

    consume = commands.add_parser("consume", help="print messages, one per line")
    consume.add_argument("topic")
    add_broker(consume)
    consume.add_argument("--partition", type=int, default=0)
    consume.add_argument("--from", dest="from_", default="earliest", help="earliest, latest or an offset")
    consume.add_argument("--max-messages", type=int, help="stop after this many")
    consume.add_argument("--no-flush", action="store_true", help="don't flush stdout after each message")
    consume.set_defaults(func=cmd_consume)

    topics = commands.add_parser("topics", help="list topics of a log dir, or offsets of named topics")
    topics.add_argument("topic", nargs="*")
    add_broker(topics)
    topics.add_argument("--log-dir", help="read this broker data directory instead of asking a broker")
    topics.add_argument("--partitions", type=int, default=1, help="partitions to query per named topic")
    topics.set_defaults(func=cmd_topics)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if getattr(args, "from_", "earliest") not in ("earliest", "latest"):
        try:
            int(args.from_)
        except ValueError:
            parser.error(f"--from must be earliest, latest or an offset, not {args.from_!r}")
    if getattr(args, "batch", 1) < 1:
        parser.error("--batch must be >= 1")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
