"""How the broker answers FETCH_LOCAL (docs/protocol.md §9.8): a descriptor only for one range of
one real file on a Unix socket; everything else inline, byte for byte what FETCH would send."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from trikafka.broker.short_circuit import answer_fetch_local, passes_descriptors
from trikafka.log.fs import OsSegmentFile
from trikafka.spark.sockets import receive_with_descriptors
from trikafka.wire import ErrorCode, FileRegion, chunks_to_bytes, encode_fetch_local_response
from trikafka.wire.responses import ChunkSequence

DATA = bytes(range(256)) * 64


class InMemorySegment:
    """A segment of the fake file system: bytes, and no descriptor."""

    def pread(self, position: int, n: int) -> bytes:
        return DATA[position:position + n]


async def _answer(code: ErrorCode, data: object) -> tuple[bytes, list[int]]:
    """Answer over a real Unix socket pair; (the bytes the client got, descriptors it got)."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    assert passes_descriptors(stream)
    async with stream:
        await answer_fetch_local(stream, code, data, descriptors=True)
    received, fds = bytearray(1 << 16), []  # more than any answer here: read to the close
    with right:
        got = receive_with_descriptors(right, memoryview(received), fds)  # the client's own receiver
    return bytes(received[:got]), fds


async def test_one_range_of_a_real_file_goes_as_a_read_only_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.kafka"
    path.write_bytes(DATA)
    segment = OsSegmentFile(str(path), create=False)
    try:
        received, fds = await _answer(ErrorCode.NO_ERROR, FileRegion(segment, 100, 1000))
    finally:
        segment.close()
    assert received == (14).to_bytes(4, "big") + bytes(2) + (100).to_bytes(8, "big") + (1000).to_bytes(4, "big")
    assert len(fds) == 1
    try:
        assert os.pread(fds[0], 1000, 100) == DATA[100:1100]
        assert fcntl.fcntl(fds[0], fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        with pytest.raises(OSError):
            os.pwrite(fds[0], b"x", 0)
    finally:
        os.close(fds[0])


async def test_everything_else_goes_inline() -> None:
    padding_then_region = ChunkSequence((b"synthesized padding", FileRegion(InMemorySegment(), 0, 50)))
    for code, data in [(ErrorCode.NO_ERROR, padding_then_region),  # a compacted log's padding (§11.3)
                       (ErrorCode.NO_ERROR, FileRegion(InMemorySegment(), 10, 300)),  # the fake file system
                       (ErrorCode.NO_ERROR, None), (ErrorCode.OFFSET_OUT_OF_RANGE, None)]:
        received, fds = await _answer(code, data)
        assert fds == [] and received == chunks_to_bytes(encode_fetch_local_response(code, data))


async def test_tcp_and_in_memory_streams_never_pass_descriptors() -> None:
    left, right = trio.testing.memory_stream_pair()
    assert not passes_descriptors(left)
    listener = trio.socket.socket()
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = await trio.open_tcp_stream("127.0.0.1", listener.getsockname()[1])
        async with client:
            assert not passes_descriptors(client)
