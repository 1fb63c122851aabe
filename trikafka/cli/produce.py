"""``trikafka produce``: each stdin line as one message, to one broker or through the Producer."""

from __future__ import annotations

import argparse
import os
import sys

import trio

from trikafka.cli.common import add_broker, add_zookeeper, leaf_exceptions, plural, run_client

PRODUCE_BATCH_MESSAGES = 200  # 0.7's async producer batch.size
READ_BYTES = 256 * 1024
LEADER_WAIT_S = 60.0  # a replicated partition: how long a batch may wait for a new leader


def add_parser(commands) -> None:
    """Register ``produce`` on the ``trikafka`` subparsers."""
    produce = commands.add_parser("produce", help="send stdin lines as messages")
    produce.add_argument("topic", metavar="TOPIC", help="the topic to send to")
    add_broker(produce)
    produce.add_argument("--partition", type=int, default=0, metavar="N",
                         help="the partition (default 0; -1: the broker picks at random)")
    produce.add_argument("--batch", type=int, default=PRODUCE_BATCH_MESSAGES, metavar="N",
                         help=f"messages per request (default {PRODUCE_BATCH_MESSAGES})")
    produce.add_argument("--acks", type=int, choices=(0, 1, -1), default=1,
                         help="0: plain 0.7 PRODUCE; 1: appended (by the leader); -1: flushed, or on a replicated "
                              "topic committed by every in-sync replica (default 1)")
    produce.add_argument("--timeout-ms", type=int, default=10_000, metavar="MS",
                         help="with --acks 1/-1: how long the broker may take (default 10000)")
    produce.add_argument("--magic", type=int, choices=(0, 1), default=1,
                         help="message format: 0 (0.6) or 1 (with attributes: compression, keys; default)")
    produce.add_argument("--key-separator", metavar="SEP",
                         help="each line is KEY<SEP>VALUE, written as a keyed message; KEY<SEP> alone deletes KEY")
    add_zookeeper(produce, "find brokers and partitions in this ZooKeeper and send through the batching "
                           "Producer; --broker, --partition and --magic are ignored", default=False)
    produce.add_argument("--audit", action="store_true",
                         help="with --zookeeper: wrap messages in the audit envelope and publish audit "
                              "events to trikafka-audit")
    produce.set_defaults(func=cmd_produce, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    if args.audit and not args.zookeeper:
        parser.error("--audit needs --zookeeper (the batching Producer writes the envelope)")
    if args.audit and args.key_separator is not None:
        parser.error("--audit and --key-separator exclude each other (keyed messages carry no envelope)")

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
    from trikafka.wire import ErrorCode, build_message_set
    from trikafka.wire.keyed import build_keyed_set

    if args.key_separator is not None and args.magic != 1:
        print("trikafka: --key-separator writes keyed messages, which are magic 1", file=sys.stderr)
        return 2
    if args.zookeeper:
        return await _produce_with_producer(args)
    host, port = args.broker
    max_message_size = await _broker_max_message_size(host, port, args.topic)
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    sender = _PartitionSender(host, port, args.topic, args.partition)
    await sender.start()
    async with sender, stdin:
        async for lines in _read_lines(stdin):
            for i in range(0, len(lines), args.batch):
                if args.key_separator is not None:
                    try:
                        items = split_keyed_lines(lines[i:i + args.batch], args.key_separator)
                    except ValueError as exc:
                        print(f"trikafka: {exc}", file=sys.stderr)
                        return 2
                    message_set = build_keyed_set(items)
                else:
                    message_set = build_message_set(lines[i:i + args.batch], magic=args.magic)
                too_large = _too_large(message_set, max_message_size)
                if too_large is not None:  # refused here: with --acks 0 the broker would drop it unsaid
                    print(f"trikafka: not sent to {args.topic} on {host}:{port}: {too_large}; "
                          f"{plural(sent, 'message')} sent before it",
                          file=sys.stderr)
                    return 1
                error, partition = await sender.send(message_set, args.acks, args.timeout_ms)
                if error != ErrorCode.NO_ERROR:
                    print(f"trikafka: produce to {args.topic}-{partition} failed: {error.name}", file=sys.stderr)
                    return 1
                sent += len(lines[i:i + args.batch])
    print(f"trikafka: sent {plural(sent, 'message')} to {args.topic}", file=sys.stderr)
    return 0


class _PartitionSender:
    """Sends to ``--partition`` at the broker given or, for a replicated topic
    (docs/protocol.md §12), at the partition's current leader, following it
    through a failover (up to ``LEADER_WAIT_S``; a batch may then be written twice)."""

    def __init__(self, host: str, port: int, topic: str, partition: int) -> None:
        from trikafka.client import LeaderDirectory

        self._leaders = LeaderDirectory([(host, port)])
        self.address, self.topic, self.partition = (host, port), topic, partition
        self.replicated = False
        self._conn = None

    async def start(self) -> None:
        """Learn whether the topic is replicated (one METADATA; a 0.7 broker cannot say)."""
        import random

        await self._leaders.refresh([self.topic])
        count = self._leaders.cache.partition_count(self.topic)
        self.replicated = bool(self._leaders.cache.replicated(self.topic))
        if self.replicated and self.partition == -1 and count:
            self.partition = random.randrange(count)  # no leader for "any": pick one here

    async def __aenter__(self) -> "_PartitionSender":
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._conn is not None:
            await self._conn.aclose()

    async def _connection(self):
        from trikafka.client import connect

        if self._conn is None or self._conn.closed:
            if self.replicated:
                self.address = await self._leaders.leader_address(self.topic, self.partition,
                                                                  timeout_s=LEADER_WAIT_S)
            self._conn = await connect(*self.address)
        return self._conn

    async def send(self, message_set: bytes, acks: int, timeout_ms: int):
        """``(error, partition)`` of one message set; failovers are retried on a replicated topic."""
        from trikafka.client import BrokerConnectionError
        from trikafka.wire import ErrorCode, is_retriable

        deadline = trio.current_time() + LEADER_WAIT_S
        delay_s = 0.05
        while True:
            try:
                conn = await self._connection()
                if acks == 0:
                    await conn.produce(self.topic, self.partition, message_set)
                    return ErrorCode.NO_ERROR, self.partition
                [result] = await conn.produce_acked([(self.topic, self.partition, message_set)],
                                                    acks=acks, timeout_ms=timeout_ms)
            except BrokerConnectionError:
                if not self.replicated or trio.current_time() >= deadline:
                    raise
                error = None
            else:
                error = result.error
                if (error == ErrorCode.NO_ERROR or not self.replicated or not is_retriable(error)
                        or trio.current_time() >= deadline):
                    return error, result.partition
            self._leaders.leader_moved(self.topic, self.partition)
            if self._conn is not None:
                await self._conn.aclose()
                self._conn = None
            await trio.sleep(delay_s)
            delay_s = min(delay_s * 2, 1.0)


async def _broker_max_message_size(host: str, port: int, topic: str) -> int | None:
    """The broker's ``max.message.size`` from METADATA (None from a plain 0.7 broker, which cannot say)."""
    from trikafka.client import partition_counts

    return (await partition_counts(host, port, [topic])).max_message_size


def _too_large(message_set: bytes, max_message_size: int | None) -> str | None:
    """Why the broker would refuse ``message_set`` for its size (the broker's own check), or None."""
    from trikafka.wire import validate_message_set
    from trikafka.wire.errors import MessageSizeTooLargeError

    if max_message_size is None:
        return None
    try:
        validate_message_set(message_set, max_message_size)
    except MessageSizeTooLargeError as exc:
        return str(exc)
    return None


def split_keyed_lines(lines: list[bytes], separator: str) -> list[tuple[bytes, bytes | None]]:
    """``key<SEP>value`` lines as ``(key, value)``; ``key<SEP>`` alone is a tombstone (None).

    A line without the separator is a ``ValueError`` naming it.
    """
    sep = separator.encode()
    items: list[tuple[bytes, bytes | None]] = []
    for line in lines:
        key, found, value = line.partition(sep)
        if not found:
            raise ValueError(f"line without the key separator {separator!r}: {line[:60]!r}")
        items.append((key, value if value else None))
    return items


async def _produce_with_producer(args: argparse.Namespace) -> int:
    """``--zookeeper``: the Producer finds brokers and partitions (spec §8.5) and batches."""
    from trikafka.producer import MessageTooLargeError, Producer, ProducerError
    from trikafka.zk import CoordinatorError

    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    keyed = args.key_separator is not None
    try:
        async with Producer(zk_connect=args.zookeeper, producer_type="async", acks=args.acks,
                            batch_size=args.batch, ack_timeout_s=args.timeout_ms / 1000,
                            keyed_topics={args.topic} if keyed else (), audit=args.audit) as producer, stdin:
            async for lines in _read_lines(stdin):
                if keyed:
                    try:
                        items = split_keyed_lines(lines, args.key_separator)
                    except ValueError as exc:
                        print(f"trikafka: {exc}", file=sys.stderr)
                        return 2
                    await producer.send_batch(args.topic, [v for _, v in items], keys=[k for k, _ in items])
                else:
                    await producer.send_batch(args.topic, lines)
                sent += len(lines)
    except CoordinatorError as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    except (ProducerError, BaseExceptionGroup) as exc:  # the producer's, raised directly or from its tasks
        leaves = leaf_exceptions(exc)
        if not all(isinstance(e, ProducerError) for e in leaves):
            raise
        if isinstance(leaves[0], MessageTooLargeError):
            print(f"trikafka: not sent to {args.topic}: {leaves[0]}; {plural(sent, 'message')} sent before it",
                  file=sys.stderr)
        else:
            print(f"trikafka: sending to {args.topic} failed: {leaves[0]}", file=sys.stderr)
        return 1
    print(f"trikafka: sent {plural(sent, 'message')} to {args.topic}", file=sys.stderr)
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    return run_client(_produce_main, args)
