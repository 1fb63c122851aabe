"""Helpers for the broker tests: a raw protocol client and a log-dir snapshot.

The raw client speaks frames, not APIs, so tests can send what no well-behaved
client would (hostile sizes, unknown types, pipelined requests) and watch for
the broker closing the connection.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import trio

from trikafka.broker import BrokerConfig
from trikafka.wire import (
    NEED_DATA,
    OffsetsRequest,
    ResponseFrame,
    ResponseReader,
    build_message_set,
    decode_offsets_payload,
    encode_request,
)

# Bounds how long a test waits for a response that should come at once; a
# failure shows up as TooSlowError instead of a hung test.  Never a sync tool.
RESPONSE_TIMEOUT_S = 10.0


def make_config(tmp_path: Any, **changes: Any) -> BrokerConfig:
    """A loopback broker on a free port, with data under ``tmp_path``."""
    settings: dict[str, Any] = dict(port=0, log_dir=str(tmp_path / "data"), num_threads=2,
                                    graceful_shutdown_timeout_s=5.0)
    settings.update(changes)
    return BrokerConfig(**settings)


def messages(*payloads: bytes, magic: int = 0) -> bytes:
    return build_message_set(list(payloads), magic=magic)


class RawClient:
    """A connection that sends raw bytes or requests and reads response frames."""

    def __init__(self, stream: trio.abc.Stream):
        self.stream = stream
        self._reader = ResponseReader(200 * 1024 * 1024)

    @classmethod
    async def connect(cls, port: int) -> "RawClient":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, request_or_bytes: Any) -> None:
        data = request_or_bytes if isinstance(request_or_bytes, (bytes, bytearray)) else encode_request(request_or_bytes)
        await self.stream.send_all(data)

    async def receive_frame(self) -> ResponseFrame:
        with trio.fail_after(RESPONSE_TIMEOUT_S):
            while True:
                frame = self._reader.next_frame()
                if frame is not NEED_DATA:
                    return frame
                data = await self.stream.receive_some(1 << 20)
                if not data:
                    raise EOFError("connection closed by the broker")
                self._reader.receive_data(data)

    async def call(self, request: Any) -> ResponseFrame:
        await self.send(request)
        return await self.receive_frame()

    async def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int = 10) -> list[int]:
        frame = await self.call(OffsetsRequest(topic, partition, time_ms, max_offsets))
        return decode_offsets_payload(frame.payload)

    async def assert_closed(self) -> None:
        """The broker closed this connection without writing a single byte."""
        with trio.fail_after(RESPONSE_TIMEOUT_S):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return  # reset by the broker
                assert data == b"", f"broker wrote {data[:40]!r} before closing"
                return

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def snapshot(log_dir: str) -> dict[str, bytes]:
    """Every file under ``log_dir`` with its bytes (the stored state)."""
    result: dict[str, bytes] = {}
    for root, _dirs, files in os.walk(log_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                result[os.path.relpath(path, log_dir)] = f.read()
    return result


def frame(size: int, body: bytes = b"") -> bytes:
    """A request frame with an arbitrary (possibly lying) size prefix."""
    return struct.pack(">i", size) + body
