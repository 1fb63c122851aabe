"""A Fetch answer in flight while its log is deleted or closed (docs/protocol.md §16.4).

The answer holds ``FileRegion``s over the segment files; it is built on the
loop and sent afterwards, across waits.  DeleteTopics closing the log in
between must not close the files under the answer: the send would fail
(``pread`` on a closed descriptor), or, once another open reuses the
descriptor's number, send that file's bytes.
"""

from __future__ import annotations

import os
import socket
from types import ModuleType
from typing import Iterable

import pytest
import trio
import trio.testing

from tests.helpers.broker_testing import make_config, memory_client, messages
from trikafka.broker import connection as connection_07
from trikafka.broker.kafka import connection as connection_kafka
from trikafka.broker.server import Broker
from trikafka.broker.sendfile import send_region
from trikafka.client.kafka import EARLIEST, KafkaAdmin, KafkaProducer, NewTopic, PartitionConsumer
from trikafka.log import LogConfig, LogManager, OsFileSystem
from trikafka.testing import open_cluster, start_in_memory
from trikafka.wire import FetchPart, FetchRequest, ProducePart, ProduceRequest
from trikafka.wire.messageset import build_message_set
from trikafka.wire.responses import Chunk, FileRegion


class DeleteBeforeSending:
    """Patches a listener's ``send_chunks``: once armed, the next answer holding a file region
    first deletes ``topic`` (DeleteTopics' work on this broker), then goes out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, listener: ModuleType, topic: str):
        self.topic = topic
        self.armed: list[Broker] = []
        self.deleted: list[int] = []
        self._send_chunks = listener.send_chunks
        monkeypatch.setattr(listener, "send_chunks", self._delete_then_send)

    def arm(self, broker: Broker) -> None:
        self.armed.append(broker)

    async def _delete_then_send(self, stream: trio.abc.Stream, chunks: Iterable[Chunk]) -> None:
        chunks = list(chunks)
        if self.armed and any(isinstance(c, FileRegion) for c in chunks):
            self.deleted.append(await self.armed.pop().engine.directory.delete_topic_logs(self.topic))
        await self._send_chunks(stream, chunks)


async def test_a_fetch_answer_built_before_delete_topics_is_sent_whole(nursery, tmp_path, monkeypatch):
    # Real files: the region is read through its descriptor, after the delete closed the log.
    hook = DeleteBeforeSending(monkeypatch, connection_07, "t")
    config = make_config(tmp_path, num_partitions=1, log_flush_interval=1)
    broker = await start_in_memory(nursery, config, OsFileSystem())
    client = await memory_client(broker)
    payload = messages(b"x" * 16_000, b"y" * 300)
    await client.send(ProduceRequest(ProducePart("t", 0, payload)))
    await client.offsets("t", 0, -1)  # handled in order: appended now
    await broker.flush_all()
    assert await client.offsets("t", 0, -1) == [len(payload), 0]

    hook.arm(broker)
    frame = await client.call(FetchRequest(FetchPart("t", 0, 0, 1 << 20)))
    assert hook.deleted == [1] and not os.path.exists(tmp_path / "data" / "t-0")
    assert bytes(frame.payload) == payload
    assert await client.offsets("t", 0, -1) == [0]  # the connection lives on; the topic is gone


async def test_a_kafka_fetch_answer_built_before_delete_topics_is_sent_whole(autojump_clock, monkeypatch):
    # The Kafka listener, a Kafka-format topic on the fake file system.
    hook = DeleteBeforeSending(monkeypatch, connection_kafka, "t")
    with trio.fail_after(60):
        async with open_cluster(1, loopback=False) as cluster, cluster.kafka_client() as client:
            assert await KafkaAdmin(client).create_topics([NewTopic("t", 1, 1)]) == {"t": None}
            async with KafkaProducer.open(client, acks=-1) as producer:
                acked = [await producer.send("t", b"v%d" % n, partition=0) for n in range(3)]
            assert acked == [(0, 0), (0, 1), (0, 2)]
            hook.arm(cluster.brokers[0].broker)
            async with PartitionConsumer(client, "t", 0, EARLIEST) as consumer:
                records = await consumer.fetch()
            assert hook.deleted == [1]
            assert [(r.offset, r.value) for r in records] == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


async def test_a_region_being_sent_keeps_its_file_when_its_log_is_deleted(tmp_path):
    # A region whose sendfile waits for the socket to drain, its log deleted meanwhile (closed, its
    # directory removed, as DeleteTopics does): the rest of the region is still its file's bytes,
    # even after another open takes a free descriptor number.
    manager = LogManager(str(tmp_path / "logs"), LogConfig(), OsFileSystem())
    manager.open()
    log = manager.get_or_create("t", 0)
    data = build_message_set([os.urandom(900_000) for _ in range(4)])
    log.append(data)
    log.flush()
    region = log.read(0, len(data))
    assert isinstance(region, FileRegion) and region.length == len(data)
    fd = region.source.fileno()
    other = tmp_path / "other"
    other.write_bytes(b"\xee" * len(data))
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    sender = trio.SocketStream(trio.socket.from_stdlib_socket(a))
    receiver = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_region, sender, region, lambda *_: True)
        del region  # the send holds it now
        await trio.testing.wait_all_tasks_blocked()  # sendfile parked: the socket is full
        manager.delete_log(*manager.remove_topic("t"))
        reused = os.open(other, os.O_RDONLY)
        try:
            if not _open(fd):  # closed under the send: an open takes its number, as any may
                os.dup2(reused, fd)
            while len(received) < len(data):
                chunk = await receiver.receive_some(1 << 20)
                if not chunk:
                    break
                received += chunk
        finally:
            os.close(reused)
    await sender.aclose()
    await receiver.aclose()
    assert received == data
    assert log.closed and not _open(fd, "t-0")  # the answer's end closed the descriptor


def _open(fd: int, path_part: str = "") -> bool:
    """Whether ``fd`` is open (and names a file whose path contains ``path_part``)."""
    try:
        return path_part in os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False

