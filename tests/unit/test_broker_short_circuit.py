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
from trikafka.wire import ErrorCode, FetchLocalRequest, FetchPart, FileRegion, chunks_to_bytes, encode_fetch_local_response
from trikafka.wire.responses import ChunkSequence

DATA = bytes(range(256)) * 64


class InMemorySegment:
    """A segment of the fake file system: bytes, and no descriptor."""

    def pread(self, position: int, n: int) -> bytes:
        return DATA[position:position + n]


class Answers:
    """The handler's part: one outcome per fetch size asked, and what was counted as sent."""

    def __init__(self, outcomes: dict[int, tuple[ErrorCode, object]]):
        self.outcomes = outcomes
        self.asked: list[int] = []
        self.counted: list[tuple[FetchPart, tuple[ErrorCode, object]]] = []

    def fetch_part(self, part: FetchPart) -> tuple[ErrorCode, object]:
        self.asked.append(part.max_bytes)
        return self.outcomes[part.max_bytes]

    def count_fetched(self, part: FetchPart, outcome: tuple[ErrorCode, object]) -> None:
        self.counted.append((part, outcome))


async def _answer(code: ErrorCode, data: object, answers: Answers | None = None,
                  request: FetchLocalRequest = FetchLocalRequest(FetchPart("t", 0, 0, 1000))) -> tuple[bytes, list[int]]:
    """Answer over a real Unix socket pair; (the bytes the client got, descriptors it got)."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    assert passes_descriptors(stream)
    async with stream:
        await answer_fetch_local(stream, request, answers or Answers({request.part.max_bytes: (code, data)}),
                                 descriptors=True)
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


async def test_a_range_larger_than_the_inline_bound_goes_inline_only_at_that_bound(tmp_path: Path) -> None:
    """docs §9.8: maxSize bounds a descriptor, inlineMaxSize the bytes that come inline."""
    path = tmp_path / "00000000000000000000.kafka"
    path.write_bytes(DATA)
    segment = OsSegmentFile(str(path), create=False)
    request = FetchLocalRequest(FetchPart("t", 0, 0, len(DATA)), 300)
    try:
        granted = Answers({len(DATA): (ErrorCode.NO_ERROR, FileRegion(segment, 0, len(DATA)))})
        _received, fds = await _answer(ErrorCode.NO_ERROR, None, granted, request)
        for fd in fds:
            os.close(fd)
        assert len(fds) == 1 and granted.asked == [len(DATA)]  # a descriptor: the whole range, asked once
        assert granted.counted == [(request.part, (ErrorCode.NO_ERROR, FileRegion(segment, 0, len(DATA))))]
    finally:
        segment.close()
    padded = ChunkSequence((b"synthesized padding", FileRegion(InMemorySegment(), 0, 5000)))
    small = FileRegion(InMemorySegment(), 0, 300)
    inline = Answers({len(DATA): (ErrorCode.NO_ERROR, padded), 300: (ErrorCode.NO_ERROR, small)})
    received, fds = await _answer(ErrorCode.NO_ERROR, None, inline, request)
    assert fds == [] and inline.asked == [len(DATA), 300]
    assert received == chunks_to_bytes(encode_fetch_local_response(ErrorCode.NO_ERROR, small))
    assert inline.counted == [(request.inline_part, (ErrorCode.NO_ERROR, small))]  # only what was sent
    failed = Answers({len(DATA): (ErrorCode.OFFSET_OUT_OF_RANGE, None)})
    received, _fds = await _answer(ErrorCode.NO_ERROR, None, failed, request)
    assert failed.asked == [len(DATA)]  # an error is the answer, whatever the size
    assert received == chunks_to_bytes(encode_fetch_local_response(ErrorCode.OFFSET_OUT_OF_RANGE, None))


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
