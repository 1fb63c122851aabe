"""Sending file regions: sendfile for cached bytes, a worker thread's reads for cold ones.

The residency check is injected, so which path runs is decided by the test,
not by the state of the machine's page cache.
"""

from __future__ import annotations

import os
import threading

import pytest
import trio
import trio.testing

from trikafka.broker import sendfile
from trikafka.broker.sendfile import RegionTruncatedError, page_cache_resident, send_chunks, send_region
from trikafka.log.fs import OsSegmentFile
from trikafka.wire.responses import FileRegion

DATA = bytes(range(256)) * 1024  # 256 KiB


EVENTS: list[tuple[str, int, int]] = []  # ("read", position, n) / ("sendfile", position, n), in order


class SpyFile:
    """A segment file with a real descriptor that records the thread of every pread."""

    def __init__(self, path: str):
        self._file = OsSegmentFile(path, create=False)
        self.read_threads: list[int] = []

    def fileno(self) -> int:
        return self._file.fileno()

    def pread(self, position: int, n: int) -> bytes:
        self.read_threads.append(threading.get_ident())
        EVENTS.append(("read", position, n))
        return self._file.pread(position, n)


@pytest.fixture
def spy_file(tmp_path):
    EVENTS.clear()
    path = tmp_path / "00000000000000000000.kafka"
    path.write_bytes(DATA)
    spy = SpyFile(str(path))
    yield spy
    spy._file.close()


@pytest.fixture
def sendfile_calls(monkeypatch):
    calls = []
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        sent = real(out_fd, in_fd, offset, count)
        calls.append((offset, sent))
        EVENTS.append(("sendfile", offset, sent))
        return sent

    monkeypatch.setattr(os, "sendfile", counting)
    return calls


async def send_and_receive(region: FileRegion, resident, head: bytes = b"") -> bytes:
    left, right = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(left), trio.SocketStream(right)
    received = bytearray()
    expected = len(head) + region.length

    async def receive():
        while len(received) < expected:
            data = await receiver.receive_some(1 << 16)
            assert data, "the sender closed early"
            received.extend(data)

    async with sender, receiver, trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await send_chunks(sender, [head, region] if head else [region], resident=resident)
    return bytes(received)


async def test_a_cold_region_is_waited_for_in_a_worker_thread_then_sent(spy_file, sendfile_calls, monkeypatch):
    monkeypatch.setattr(sendfile, "COLD_READ_CHUNK_BYTES", 100_000)
    checked = []

    def cold(fd, position, length):
        checked.append((position, length))
        return False

    region = FileRegion(spy_file, 1000, 250_000)
    assert await send_and_receive(region, cold, head=b"hdr") == b"hdr" + DATA[1000:251_000]
    assert checked == [(1000, 250_000), (101_000, 100_000), (201_000, 50_000)]  # the region, then each chunk
    assert len(spy_file.read_threads) == 3
    assert threading.get_ident() not in spy_file.read_threads, "a cold read ran on the event loop"
    # Each chunk is read (in the thread) before sendfile sends any of it.
    reads = [e for e in EVENTS if e[0] == "read"]
    assert reads == [("read", 1000, 100_000), ("read", 101_000, 100_000), ("read", 201_000, 50_000)]
    for _, position, n in (e for e in EVENTS if e[0] == "sendfile"):
        assert any(r[1] <= position < r[1] + r[2] and EVENTS.index(r) < EVENTS.index(("sendfile", position, n))
                   for r in reads)
    assert sum(n for _, n in sendfile_calls) == 250_000


async def test_chunks_cached_by_the_read_ahead_go_out_without_another_thread(spy_file, sendfile_calls, monkeypatch):
    monkeypatch.setattr(sendfile, "COLD_READ_CHUNK_BYTES", 100_000)
    answers = iter([False, True, True])  # the region is cold; after the first wait, the rest is cached
    region = FileRegion(spy_file, 0, 250_000)
    assert await send_and_receive(region, lambda *args: next(answers)) == DATA[:250_000]
    assert [e for e in EVENTS if e[0] == "read"] == [("read", 0, 100_000)]
    assert sum(n for _, n in sendfile_calls) == 250_000


async def test_a_cold_region_on_a_stream_without_a_socket_is_sent_from_the_thread_reads(spy_file):
    sender, receiver = trio.testing.memory_stream_pair()
    region = FileRegion(spy_file, 10, 5000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_region, sender, region, lambda *args: False)
        received = await receiver.receive_some(10_000)
    assert received == DATA[10:5010]
    assert threading.get_ident() not in spy_file.read_threads and len(spy_file.read_threads) == 1


async def test_a_hot_region_goes_out_with_sendfile(spy_file, sendfile_calls):
    region = FileRegion(spy_file, 5, 200_000)
    assert await send_and_receive(region, lambda fd, position, length: True) == DATA[5:200_005]
    assert spy_file.read_threads == []
    assert sum(n for _, n in sendfile_calls) == 200_000


async def test_the_default_check_is_page_cache_resident(spy_file, sendfile_calls, monkeypatch):
    asked = []
    monkeypatch.setattr(sendfile, "page_cache_resident", lambda *args: asked.append(args) or False)
    assert await send_and_receive(FileRegion(spy_file, 0, 4096), None) == DATA[:4096]
    assert asked == [(spy_file.fileno(), 0, 4096)] and len(spy_file.read_threads) == 1


async def test_a_cold_region_past_the_end_of_the_file_fails_clearly(spy_file):
    left, right = trio.socket.socketpair()
    async with trio.SocketStream(left) as sender, trio.SocketStream(right):
        with pytest.raises(RegionTruncatedError, match="unread"):
            await send_region(sender, FileRegion(spy_file, len(DATA) - 10, 20), lambda *args: False)


async def test_files_without_a_descriptor_are_never_checked():
    class InMemory:
        def pread(self, position, n):
            return DATA[position:position + n]

        def fileno(self):
            raise OSError("no descriptor")

    def never(*args):
        raise AssertionError("checked a file without a descriptor")

    left, right = trio.socket.socketpair()
    async with trio.SocketStream(left) as sender, trio.SocketStream(right) as receiver:
        await send_region(sender, FileRegion(InMemory(), 0, 100), never)
        assert await receiver.receive_some(1000) == DATA[:100]


def test_page_cache_resident_sees_cached_and_missing_pages(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, len(DATA), 0)  # just read: in the page cache
        assert page_cache_resident(fd, 0, len(DATA))
        assert page_cache_resident(fd, 4095, 2)  # straddles a page boundary
        assert page_cache_resident(fd, 0, 0)
        # Pages past the end of the file are never cached.
        assert not page_cache_resident(fd, len(DATA) + 4096, 4096)
        assert not page_cache_resident(fd, len(DATA) - 10, 10_000)
    finally:
        os.close(fd)


async def test_the_regions_of_an_in_memory_file_go_out_in_one_send_with_the_bytes_around_them():
    class InMemory:
        def pread(self, position, n):
            return DATA[position:position + n]

    class Recording(trio.abc.SendStream):
        def __init__(self):
            self.sends: list[bytes] = []

        async def send_all(self, data):
            await trio.lowlevel.checkpoint()
            self.sends.append(bytes(data))

        async def wait_send_all_might_not_block(self):
            await trio.lowlevel.checkpoint()

        async def aclose(self):
            await trio.lowlevel.checkpoint()

    stream = Recording()
    source = InMemory()
    await send_chunks(stream, [b"head", FileRegion(source, 0, 100), b"mid", FileRegion(source, 100, 50)])
    assert stream.sends == [b"head" + DATA[:100] + b"mid" + DATA[100:150]]
