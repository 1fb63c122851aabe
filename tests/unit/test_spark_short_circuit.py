"""The client's half of FETCH_LOCAL (docs/protocol.md §9.8) against peers that break the rules.

A fake broker on a real Unix socket pair answers with crafted frames and
descriptors; the promise: a well-formed answer is read exactly, anything else
is a ``BrokerConnectionError`` naming the problem, and no descriptor the client
received stays open either way.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Callable

import pytest

from trikafka.client import BrokerConnectionError
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.spark.sockets import DescriptorError, read_range, receive_with_descriptors
from trikafka.wire import ErrorCode, FetchLocalRequest, FetchPart, FileRegion, encode_fetch_local_descriptor
from trikafka.wire import chunks_to_bytes, decode_request_body, encode_fetch_local_response

DATA = bytes(range(256)) * 16


def _fake_broker(path: Path, *answers: Callable[[socket.socket], None], requests: list | None = None) -> threading.Thread:
    """Listen at ``path``; read a request and answer it with the next of ``answers`` (the
    requests, decoded, go to ``requests``), then wait for the client to go."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                for answer in answers:
                    (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
                    body = conn.recv(size, socket.MSG_WAITALL)
                    if requests is not None:
                        requests.append(decode_request_body(body))
                    answer(conn)
                with contextlib.suppress(OSError):  # a client that gave up resets the connection
                    conn.recv(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _send_with(conn: socket.socket, frame: bytes, fds: list[int]) -> None:
    conn.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])


def _fetch(path: Path, answer: Callable[[socket.socket], None], max_bytes: int = 1000) -> tuple[ErrorCode, bytes]:
    thread = _fake_broker(path, answer)
    buffer = bytearray(max_bytes)
    try:
        with BrokerConnection("fake", 1, unix_path=str(path), short_circuit=True, timeout_s=5) as conn:
            code, size = conn.fetch_into("t", 0, 0, max_bytes, buffer)
            return code, bytes(buffer[:size])
    finally:
        thread.join(5)


@pytest.fixture
def segment(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A read-only descriptor of a file holding DATA, and a check that every descriptor the
    client received was closed (its number is free again once the test's own is closed)."""
    path = tmp_path / "segment"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    before = set(os.listdir("/proc/self/fd"))
    yield fd
    os.close(fd)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_descriptor_answer_is_read_from_the_file(tmp_path: Path, segment: int) -> None:
    frame = encode_fetch_local_descriptor(FileRegion(None, 100, 500))
    assert _fetch(tmp_path / "s", lambda c: _send_with(c, frame, [segment])) == (ErrorCode.NO_ERROR, DATA[100:600])


def test_a_granted_range_serves_the_fetches_inside_it(tmp_path: Path, segment: int) -> None:
    """One FETCH_LOCAL per range (docs §9.8): the client asks for the rest of the segment with its
    buffer as the inline bound, reads later fetches inside the range itself, and asks again for
    a fetch that runs past the range's end (1800 + 500 > 2000) or is of another partition."""
    requests: list = []
    granted = [encode_fetch_local_descriptor(FileRegion(None, 100, 2000)),  # log [0, 2000) at file 100
               encode_fetch_local_descriptor(FileRegion(None, 1900, 300)),  # log [1800, 2100)
               encode_fetch_local_descriptor(FileRegion(None, 0, 50))]  # another partition
    thread = _fake_broker(tmp_path / "s", *[lambda c, frame=frame: _send_with(c, frame, [segment]) for frame in granted],
                          requests=requests)
    buffer = bytearray(500)
    got = []
    try:
        with BrokerConnection("fake", 1, unix_path=str(tmp_path / "s"), short_circuit=True, timeout_s=5) as conn:
            for partition, offset, max_bytes in [(0, 0, 500), (0, 500, 500), (0, 1500, 500), (0, 1800, 500),
                                                 (0, 1900, 200), (1, 0, 500)]:
                code, size = conn.fetch_into("t", partition, offset, max_bytes, buffer)
                got.append((code, bytes(buffer[:size])))
                if offset == 1500:
                    assert len(requests) == 1  # three fetches, one request
    finally:
        thread.join(5)
    assert got == [(ErrorCode.NO_ERROR, DATA[100:600]), (ErrorCode.NO_ERROR, DATA[600:1100]),
                   (ErrorCode.NO_ERROR, DATA[1600:2100]), (ErrorCode.NO_ERROR, DATA[1900:2200]),
                   (ErrorCode.NO_ERROR, DATA[2000:2200]), (ErrorCode.NO_ERROR, DATA[0:50])]
    wide = (1 << 31) - 1
    assert requests == [FetchLocalRequest(FetchPart("t", 0, 0, wide), 500),
                        FetchLocalRequest(FetchPart("t", 0, 1800, wide), 500),
                        FetchLocalRequest(FetchPart("t", 1, 0, wide), 500)]


def test_an_empty_or_failed_descriptor_answer_grants_nothing(tmp_path: Path, segment: int) -> None:
    empty = encode_fetch_local_descriptor(FileRegion(None, 100, 0))
    assert _fetch(tmp_path / "s", lambda c: _send_with(c, empty, [segment])) == (ErrorCode.NO_ERROR, b"")
    failed = bytearray(encode_fetch_local_descriptor(FileRegion(None, 100, 500)))
    failed[4:6] = int(ErrorCode.OFFSET_OUT_OF_RANGE).to_bytes(2, "big")
    assert _fetch(tmp_path / "t", lambda c: _send_with(c, bytes(failed), [segment])) == (ErrorCode.OFFSET_OUT_OF_RANGE, b"")


def test_an_inline_answer_is_read_from_the_socket(tmp_path: Path) -> None:
    frame = chunks_to_bytes(encode_fetch_local_response(ErrorCode.NO_ERROR, DATA[:300]))
    assert _fetch(tmp_path / "s", lambda c: c.sendall(frame)) == (ErrorCode.NO_ERROR, DATA[:300])


def test_an_inline_answer_longer_than_the_fetch_grows_the_buffer(tmp_path: Path) -> None:
    """A compacted log's synthesized padding entry makes an answer longer than maxSize (§11.3.2)."""
    frame = chunks_to_bytes(encode_fetch_local_response(ErrorCode.NO_ERROR, DATA))
    assert _fetch(tmp_path / "s", lambda c: c.sendall(frame)) == (ErrorCode.NO_ERROR, DATA)


def test_a_file_shorter_than_the_range_gives_what_it_has(tmp_path: Path, segment: int) -> None:
    frame = encode_fetch_local_descriptor(FileRegion(None, len(DATA) - 10, 500))  # truncated meanwhile
    assert _fetch(tmp_path / "s", lambda c: _send_with(c, frame, [segment])) == (ErrorCode.NO_ERROR, DATA[-10:])


@pytest.mark.parametrize("case, message", [
    ("descriptor answer without a descriptor", "0 descriptors"),
    ("inline answer with a descriptor", "1 descriptors"),
    ("two descriptors", "2 descriptors"),
    ("inline length disagreeing with the size", "bad response framing"),
])
def test_answers_outside_the_protocol_fail_clearly_and_leak_nothing(tmp_path: Path, segment: int,
                                                                     case: str, message: str) -> None:
    descriptor = encode_fetch_local_descriptor(FileRegion(None, 0, 100))
    inline = chunks_to_bytes(encode_fetch_local_response(ErrorCode.NO_ERROR, DATA[:10]))
    answer = {
        "descriptor answer without a descriptor": lambda c: c.sendall(descriptor),
        "inline answer with a descriptor": lambda c: _send_with(c, inline, [segment]),
        "two descriptors": lambda c: _send_with(c, descriptor, [segment, segment]),
        "inline length disagreeing with the size": lambda c: c.sendall(inline[:4] + inline[4:14] + struct.pack(">i", 11)
                                                                       + inline[18:]),
    }[case]
    with pytest.raises(BrokerConnectionError, match=message):
        _fetch(tmp_path / "s", answer)


def test_receive_with_descriptors_refuses_more_than_it_has_room_for(segment: int) -> None:
    left, right = socket.socketpair()
    with left, right:
        _send_with(left, b"x" * 18, [segment] * 8)
        fds: list[int] = []
        try:
            with pytest.raises(DescriptorError, match="more descriptors"):
                receive_with_descriptors(right, memoryview(bytearray(18)), fds)
        finally:
            for fd in fds:
                os.close(fd)


def test_read_range_stops_at_the_end_of_the_file(segment: int) -> None:
    view = memoryview(bytearray(100))
    assert read_range(segment, view, len(DATA) - 40) == 40 and bytes(view[:40]) == DATA[-40:]
    assert read_range(segment, view, len(DATA) + 5) == 0
