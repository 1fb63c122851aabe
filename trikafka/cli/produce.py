"""``trikafka produce``: each stdin line as one message, to one broker or through the Producer."""

from __future__ import annotations

import argparse
import os
import sys

import trio

from trikafka.cli.common import (add_broker, add_kafka, add_zookeeper, kafka_format_hint, plural, read_lines,
                                 run_client, run_until_signal, split_keyed_lines, validate_kafka)
from trikafka.util.errors import leaf_exceptions

PRODUCE_BATCH_MESSAGES = 200  # 0.7's async producer batch.size
LEADER_WAIT_S = 60.0  # a replicated partition: how long a batch may wait for a new leader


def add_parser(commands) -> None:
    """Register ``produce`` on the ``trikafka`` subparsers."""
    produce = commands.add_parser("produce")
    produce.add_argument("topic", metavar="TOPIC", help="the topic to send to")
    add_broker(produce)
    produce.add_argument("--partition", "-p", type=int, default=None, metavar="N",
                         help="the partition (-1: the broker picks one per request; default: keyed lines by "
                              "the hash of their key, other lines any partition)")
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
    add_kafka(produce)
    add_zookeeper(produce, "find brokers and partitions in this ZooKeeper and send through the batching "
                           "Producer; --broker, --partition and --magic are ignored", default=False)
    produce.add_argument("--audit", action="store_true",
                         help="with --zookeeper: wrap messages in the audit envelope and publish audit "
                              "events to trikafka-audit")
    produce.set_defaults(func=cmd_produce, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    validate_kafka(parser, args)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    if args.audit and not args.zookeeper:
        parser.error("--audit needs --zookeeper (the batching Producer writes the envelope)")
    if args.kafka is not None and (args.zookeeper or args.audit or args.magic != 1):
        parser.error("--kafka excludes --zookeeper, --audit and --magic (Kafka-format topics hold v2 batches)")
    if args.audit and args.key_separator is not None:
        parser.error("--audit and --key-separator exclude each other (keyed messages carry no envelope)")

async def _produce_main(args: argparse.Namespace) -> int:
    import signal

    if args.kafka is not None:
        from trikafka.cli import kafka_protocol

        return await kafka_protocol.produce(args)
    if args.key_separator is not None and args.magic != 1:
        print("trikafka: --key-separator writes keyed messages, which are magic 1", file=sys.stderr)
        return 2
    if args.zookeeper:
        return await _produce_with_producer(args)
    from trikafka.client import partition_counts

    host, port = args.broker
    # max.message.size, the partition count, and the format: 0.7 requests cannot write a Kafka-format topic
    counts = await partition_counts(host, port, [args.topic], formats=True)
    if counts.topics[args.topic].kafka_format:
        print(f"trikafka: {kafka_format_hint(args.topic)}", file=sys.stderr)
        return 1
    router = _Router(args, counts.topics[args.topic].count)
    if router.note:
        print(f"trikafka: {router.note}", file=sys.stderr)
    progress = _Progress()
    status, stopped_by = await run_until_signal(_send_lines, args, router, counts.max_message_size, progress,
                                                signals=(signal.SIGINT, signal.SIGTERM))
    if stopped_by is not None:
        print(f"trikafka: {signal.Signals(stopped_by).name}: sent {plural(progress.sent, 'message')} to "
              f"{args.topic} before it (a batch in flight then may or may not have been written)", file=sys.stderr)
        return 128 + stopped_by
    assert isinstance(status, int)
    if status == 0:
        print(f"trikafka: sent {plural(progress.sent, 'message')} to {args.topic}", file=sys.stderr)
    return status


class _Progress:
    """What a produce run has sent so far (acknowledged, with --acks 1 or -1)."""

    def __init__(self) -> None:
        self.sent = 0


class _Router:
    """Which partition each batch of lines goes to.

    ``--partition N``: N.  Otherwise keyed lines go to ``hash(key) mod partitions`` (the
    Producer's hash partitioner, so one key stays in one partition) and a batch of keyless
    lines to any partition: the broker picks (-1, docs §5.1) or, on a replicated topic,
    which has no broker-side choice, a random one per batch.
    """

    def __init__(self, args: argparse.Namespace, partition_count: int) -> None:
        import random

        self._fixed = args.partition
        self._keyed = args.key_separator is not None
        self._count = partition_count
        self._rng = random.Random()
        self.note: str | None = None
        if self._fixed is None and self._keyed and partition_count == 0:
            self.note = (f"topic {args.topic!r} does not exist yet: keyed lines go to partition 0 "
                         "(create it with `trikafka topics create` first to spread keys over partitions)")

    def keyless(self, replicated: bool) -> int:
        if self._fixed is not None:
            return self._fixed
        return self._rng.randrange(self._count) if replicated and self._count else -1

    def keyed(self, items: list[tuple[bytes, bytes | None]]) -> dict[int, list[tuple[bytes, bytes | None]]]:
        """``items`` grouped by partition, each group in the lines' order."""
        from trikafka.producer.partitioner import HashPartitioner

        if self._fixed is not None or self._count == 0:
            return {0 if self._fixed is None else self._fixed: items}
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        partitioner = HashPartitioner()
        for item in items:
            by_partition.setdefault(partitioner(item[0], self._count), []).append(item)
        return by_partition


async def _send_lines(args: argparse.Namespace, router: _Router, max_message_size: int | None,
                      progress: _Progress) -> int:
    """Every stdin line as a message, ``--batch`` lines a request; 0, or 1/2 after a one-line error."""
    from trikafka.wire import ErrorCode, build_message_set
    from trikafka.wire.keyed import build_keyed_set

    host, port = args.broker
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    senders = _Senders(host, port, args.topic)
    async with senders, stdin:
        replicated = await senders.replicated()
        async for lines in read_lines(stdin):
            for i in range(0, len(lines), args.batch):
                batch = lines[i:i + args.batch]
                if args.key_separator is not None:
                    try:
                        items = split_keyed_lines(batch, args.key_separator)
                    except ValueError as exc:
                        print(f"trikafka: {exc}", file=sys.stderr)
                        return 2
                    sets = [(p, build_keyed_set(group), len(group)) for p, group in router.keyed(items).items()]
                else:
                    sets = [(router.keyless(replicated), build_message_set(batch, magic=args.magic), len(batch))]
                for partition, message_set, count in sets:
                    too_large = _too_large(message_set, max_message_size)
                    if too_large is not None:  # refused here: with --acks 0 the broker would drop it unsaid
                        print(f"trikafka: not sent to {args.topic} on {host}:{port}: {too_large}; "
                              f"{plural(progress.sent, 'message')} sent before it", file=sys.stderr)
                        return 1
                    sender = await senders.get(partition)
                    error, answered = await sender.send(message_set, args.acks, args.timeout_ms)
                    if error != ErrorCode.NO_ERROR:
                        print(f"trikafka: produce to {args.topic}-{answered} failed: {error.name}", file=sys.stderr)
                        return 1
                    progress.sent += count
    return 0


class _Senders:
    """One ``_PartitionSender`` per partition written to, each started once."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        self._host, self._port, self._topic = host, port, topic
        self._senders: dict[int, _PartitionSender] = {}

    async def replicated(self) -> bool:
        """Whether the topic is replicated (asked through the sender of 'any partition')."""
        return (await self.get(-1)).replicated

    async def get(self, partition: int) -> "_PartitionSender":
        sender = self._senders.get(partition)
        if sender is None:
            sender = self._senders[partition] = _PartitionSender(self._host, self._port, self._topic, partition)
            await sender.start()
        return sender

    async def __aenter__(self) -> "_Senders":
        return self

    async def __aexit__(self, *exc_info) -> None:
        for sender in self._senders.values():
            await sender.__aexit__(*exc_info)


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


async def _produce_with_producer(args: argparse.Namespace) -> int:
    """``--zookeeper``: the Producer finds brokers and partitions (spec §8.5) and batches."""
    from trikafka.producer import BrokerRejectedError, MessageTooLargeError, Producer, ProducerError
    from trikafka.wire import ErrorCode
    from trikafka.zk import ZooKeeperClientError

    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    sent = 0
    keyed = args.key_separator is not None
    try:
        async with Producer(zk_connect=args.zookeeper, producer_type="async", acks=args.acks,
                            batch_size=args.batch, ack_timeout_s=args.timeout_ms / 1000,
                            keyed_topics={args.topic} if keyed else (), audit=args.audit) as producer, stdin:
            async for lines in read_lines(stdin):
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
    except ZooKeeperClientError as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    except (ProducerError, BaseExceptionGroup) as exc:  # the producer's, raised directly or from its tasks
        leaves = leaf_exceptions(exc)
        if not all(isinstance(e, ProducerError) for e in leaves):
            raise
        if isinstance(leaves[0], MessageTooLargeError):
            print(f"trikafka: not sent to {args.topic}: {leaves[0]}; {plural(sent, 'message')} sent before it",
                  file=sys.stderr)
        elif any(isinstance(e, BrokerRejectedError) and e.error_code == ErrorCode.WRONG_FORMAT
                 for e in (leaves[0], *(r.error for r in getattr(leaves[0], "results", ())))):
            print(f"trikafka: {kafka_format_hint(args.topic)}", file=sys.stderr)
        else:
            print(f"trikafka: sending to {args.topic} failed: {leaves[0]}", file=sys.stderr)
        return 1
    print(f"trikafka: sent {plural(sent, 'message')} to {args.topic}", file=sys.stderr)
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    return run_client(_produce_main, args)
