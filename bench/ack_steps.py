"""Event-loop task steps and loop CPU per acknowledged produce request (docs/protocol.md §7.2, §9.2, §16.4).

Run: ``python bench/ack_steps.py [--requests 200] [--fsync on|off] [--in-dir DIR]``.  Starts
a broker in this process (its own Trio loop in a thread, a log directory made in
``DIR``, e.g. ``/dev/shm`` for fsyncs that cost nothing),
then sends one-at-a-time requests of 10 messages from a blocking socket in
the main thread: Kafka Produce v9 with acks 1 and -1, and 0.7 PRODUCE_ACKED
with acks 1 and -1.  For each it prints the loop's task steps per request
(a Trio instrument's ``before_task_step``, every task of the broker's loop
counted, system tasks too) and the loop thread's CPU µs per request, user
and system (``getrusage(RUSAGE_THREAD)`` read on the loop; fsyncs run in
worker threads and are not in it).  The client waits for each answer before sending the next,
so the loop is idle between requests and every step is the request's.
"""

from __future__ import annotations

import argparse
import socket
import struct
import resource
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic  # noqa: E402
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData  # noqa: E402
from kio.schema.types import TopicName  # noqa: E402
from kio.static.primitive import i16, i32, i32Timedelta  # noqa: E402

from trikafka.kafka.framing import encode_request  # noqa: E402
from trikafka.kafka.records import build_batch  # noqa: E402
from trikafka.spark.blocking_client import BrokerConnection  # noqa: E402
from trikafka.testing.kafka_broker import running_kafka_broker  # noqa: E402
from trikafka.wire import ProducePart  # noqa: E402
from trikafka.wire.messageset import build_message_set  # noqa: E402

MESSAGES_PER_REQUEST = 10
WARMUP_REQUESTS = 20
TRACE_STEPS = 40


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0
        self.names: list[str] = []  # with --trace: each step's task

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        if len(self.names) < TRACE_STEPS:
            self.names.append(task.name.rpartition(".")[2])


def _call(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    head = _exactly(sock, 4)
    return _exactly(sock, struct.unpack(">i", head)[0])


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        data += chunk
    return bytes(data)


def kafka_sender(port: int, acks: int):
    """A function that sends one Kafka Produce v9 of 10 messages with ``acks`` and reads its answer."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    topic = TopicName(f"steps-kafka-{acks}")
    # Metadata creates the topic (auto.create.topics.enable, §16.5).
    _call(sock, encode_request(3, 12, 1, "steps", MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False)))
    batch = build_batch([b"v" * 100] * MESSAGES_PER_REQUEST, timestamp_ms=1)
    frame = encode_request(0, 9, 2, "steps", ProduceRequest(
        transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=i32(0), records=batch),)),)))
    return lambda: _call(sock, frame)


def legacy_sender(port: int, acks: int):
    """A function that sends one 0.7 PRODUCE_ACKED of 10 messages with ``acks`` and reads its answer."""
    connection = BrokerConnection("127.0.0.1", port)
    part = ProducePart(f"steps-07-{acks}", 0, build_message_set([b"v" * 100] * MESSAGES_PER_REQUEST))
    return lambda: connection.produce_acked([part], acks=acks)


def _thread_cpu_s() -> tuple[float, float]:
    """The calling thread's (user, system) CPU seconds."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime, usage.ru_stime


def measure(token: trio.lowlevel.TrioToken, send, requests: int) -> tuple[float, tuple[float, float], list[str]]:
    """(task steps, (user, system) loop CPU µs) per request over ``requests`` requests after a
    warm-up, and the tasks of the first steps counted."""
    for _ in range(WARMUP_REQUESTS):
        send()
    steps = _Steps()
    trio.from_thread.run_sync(trio.lowlevel.add_instrument, steps, trio_token=token)
    cpu_before = trio.from_thread.run_sync(_thread_cpu_s, trio_token=token)
    start = steps.steps
    for _ in range(requests):
        send()
    counted = steps.steps - start
    cpu_after = trio.from_thread.run_sync(_thread_cpu_s, trio_token=token)
    trio.from_thread.run_sync(trio.lowlevel.remove_instrument, steps, trio_token=token)
    return counted / requests, tuple((after - before) / requests * 1e6  # type: ignore[return-value]
                                     for before, after in zip(cpu_before, cpu_after)), steps.names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--fsync", choices=("on", "off"), default="on", help="acks.all.fsync")
    parser.add_argument("--in-dir", help="make the broker's log directory in this directory (default: the system's temp)")
    parser.add_argument("--trace", action="store_true", help="print the tasks of the first steps counted")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ack-steps-", dir=args.in_dir) as log_dir, \
            running_kafka_broker(log_dir, acks_all_fsync=args.fsync == "on") as running:
        token = running.trio_token
        assert token is not None
        for name, sender, port in (("kafka", kafka_sender, running.kafka_port),
                                   ("0.7 PRODUCE_ACKED", legacy_sender, running.port)):
            for acks in (1, -1):
                per_request_steps, (user_us, system_us), names = measure(token, sender(port, acks), args.requests)
                print(f"{name:18} acks {acks:2}  fsync {args.fsync:3}: {per_request_steps:5.2f} task steps, "
                      f"{user_us + system_us:6.1f} µs loop CPU per request ({user_us:.1f} user, {system_us:.1f} system)")
                if args.trace:
                    print("   ", " ".join(names))


if __name__ == "__main__":
    main()
