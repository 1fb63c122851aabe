"""Zero-copy fetch: message bytes go from the segment file to the socket with
``os.sendfile`` and never through user space (design doc, "Maximizing Efficiency").

A real broker on loopback with the real file system; ``os.sendfile`` is
wrapped to count calls, bytes and EAGAINs, and the segment file's ``pread``
(the only user-space read path for message bytes) is wrapped to count reads
and the threads they ran in.  The page-cache residency check is injected
(hot unless a test says cold), so the path taken never depends on the
machine's memory.
"""

from __future__ import annotations

import os
import threading

import pytest
import trio
import trio.testing

from trikafka.broker import sendfile as sendfile_module
from trikafka.broker import serve
from trikafka.log.fs import Descriptor
from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchRequest,
    MultiFetchRequest,
    ProduceAckedRequest,
    ProducePart,
    decode_multifetch_payload,
    decode_produce_acked_payload,
)

from tests.helpers.broker_testing import RawClient, make_config, messages

PAYLOAD_BYTES = 2 * 1024 * 1024  # far more than the socket buffers hold: sendfile must park


class SendfileSpy:
    """Wraps ``os.sendfile`` and ``Descriptor.pread`` (what a segment's regions read through); counts
    what goes through them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, resident: bool = True):
        self.read_threads: list[int] = []
        self.calls = 0
        self.bytes_sent = 0
        self.would_block = 0
        self.preads = 0
        real_sendfile = os.sendfile
        real_pread = Descriptor.pread

        def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
            self.calls += 1
            try:
                sent = real_sendfile(out_fd, in_fd, offset, count)
            except BlockingIOError:
                self.would_block += 1
                raise
            self.bytes_sent += sent
            return sent

        def pread(descriptor: Descriptor, position: int, n: int) -> bytes:
            self.preads += 1
            self.read_threads.append(threading.get_ident())
            return real_pread(descriptor, position, n)

        monkeypatch.setattr(os, "sendfile", sendfile)
        monkeypatch.setattr(Descriptor, "pread", pread)
        monkeypatch.setattr(sendfile_module, "page_cache_resident", lambda fd, position, length: resident)

    def reset(self) -> None:
        self.calls = self.bytes_sent = self.would_block = self.preads = 0


@pytest.fixture
async def broker(nursery, tmp_path):
    config = make_config(tmp_path, max_message_size=PAYLOAD_BYTES + 1,
                         socket_send_buffer=16 * 1024, socket_receive_buffer=16 * 1024)
    running = await nursery.start(serve, config)
    yield running
    running.shutdown()


async def produce_flushed(client: RawClient, topic: str, data: bytes) -> None:
    response = await client.call(ProduceAckedRequest(-1, 10_000, (ProducePart(topic, 0, data),)))
    [result] = decode_produce_acked_payload(response.payload)
    assert result.error == ErrorCode.NO_ERROR


async def test_fetch_sends_the_segment_with_sendfile_and_parks_on_a_full_socket(broker, monkeypatch):
    client = await RawClient.connect(broker.port)
    data = messages(os.urandom(PAYLOAD_BYTES))
    await produce_flushed(client, "big", data)
    spy = SendfileSpy(monkeypatch)

    await client.send(FetchRequest(FetchPart("big", 0, 0, len(data))))
    # The client reads nothing yet: the broker fills the socket buffers and
    # must be parked in wait_writable, not spinning or blocking the loop.
    await trio.testing.wait_all_tasks_blocked()
    assert spy.would_block >= 1
    assert 0 < spy.bytes_sent < len(data)
    response = await client.receive_frame()

    assert (response.error_code, response.payload) == (ErrorCode.NO_ERROR, data)
    assert spy.bytes_sent == len(data)  # every message byte went through sendfile
    assert spy.preads == 0  # and none was read into user space
    assert spy.calls >= 2


async def test_multifetch_sends_each_region_with_sendfile_in_order(broker, monkeypatch):
    client = await RawClient.connect(broker.port)
    a, b = messages(b"a" * 3000), messages(b"b" * 5000, b"c")
    await produce_flushed(client, "x", a)
    await produce_flushed(client, "y", b)
    spy = SendfileSpy(monkeypatch)
    parts = (FetchPart("x", 0, 0, 10_000), FetchPart("nothing", 0, 0, 10), FetchPart("y", 0, 0, 10_000),
             FetchPart("x", 0, 0, 100))
    response = await client.call(MultiFetchRequest(parts))
    assert decode_multifetch_payload(response.payload) == [
        (ErrorCode.NO_ERROR, a), (ErrorCode.NO_ERROR, b""), (ErrorCode.NO_ERROR, b), (ErrorCode.NO_ERROR, a[:100]),
    ]
    assert spy.bytes_sent == len(a) + len(b) + 100
    assert spy.preads == 0


async def test_a_cold_fetch_is_read_in_worker_threads(broker, monkeypatch):
    client, other = await RawClient.connect(broker.port), await RawClient.connect(broker.port)
    data = messages(os.urandom(PAYLOAD_BYTES))
    await produce_flushed(client, "cold", data)
    small = messages(b"hot")
    await produce_flushed(other, "hot", small)
    spy = SendfileSpy(monkeypatch, resident=False)
    await client.send(FetchRequest(FetchPart("cold", 0, 0, len(data))))
    await trio.testing.wait_all_tasks_blocked()  # the cold sender waits on its thread or the full socket
    response = await other.call(FetchRequest(FetchPart("hot", 0, 0, 1000)))  # not stuck behind it
    assert response.payload == small
    response = await client.receive_frame()
    assert (response.error_code, response.payload) == (ErrorCode.NO_ERROR, data)
    chunks = PAYLOAD_BYTES // sendfile_module.COLD_READ_CHUNK_BYTES
    assert spy.preads >= chunks  # every chunk was waited for ...
    assert threading.get_ident() not in spy.read_threads, "a cold read ran on the event loop"
    assert spy.bytes_sent == len(data) + len(small)  # ... then sent with sendfile (the hot fetch too)


async def test_an_unlinked_segment_still_serves_a_fetch_in_flight(broker, monkeypatch):
    """The region holds the descriptor, so retention unlinking the file mid-send changes nothing."""
    client = await RawClient.connect(broker.port)
    data = messages(os.urandom(PAYLOAD_BYTES))
    await produce_flushed(client, "gone", data)
    spy = SendfileSpy(monkeypatch)
    await client.send(FetchRequest(FetchPart("gone", 0, 0, len(data))))
    await trio.testing.wait_all_tasks_blocked()
    assert spy.would_block >= 1
    segment_dir = os.path.join(broker.config.log_dir, "gone-0")
    for name in os.listdir(segment_dir):
        os.unlink(os.path.join(segment_dir, name))
    response = await client.receive_frame()
    assert response.payload == data
