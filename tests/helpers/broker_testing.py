"""Helpers for the broker tests: a raw protocol client and a log-dir snapshot.

The raw client speaks frames, not APIs, so tests can send what no well-behaved
client would (hostile sizes, unknown types, pipelined requests) and watch for
the broker closing the connection.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import trio

from trikafka.broker import BrokerConfig
from trikafka.cli.serve import read_ready_file
from trikafka.client import ClientError, connect
from trikafka.wire import (
    NEED_DATA,
    ErrorCode,
    FetchPart,
    FetchRequest,
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


async def produce_acked(port: int, topic: str, partition: int, *payloads: bytes) -> None:
    """PRODUCE_ACKED ``payloads`` (one magic-1 set) with acks=1; fails unless the broker appended them."""
    async with await connect("127.0.0.1", port) as conn:
        [result] = await conn.produce_acked([(topic, partition, build_message_set(list(payloads), magic=1))],
                                            acks=1, timeout_ms=5000)
        assert result.error == ErrorCode.NO_ERROR, result


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


async def memory_client(broker: Any) -> RawClient:
    """A client connected to ``broker`` through an in-memory stream pair."""
    import trio.testing

    client_stream, server_stream = trio.testing.memory_stream_pair()
    await broker.connect_stream(server_stream)
    return RawClient(client_stream)


def snapshot(log_dir: str) -> dict[str, bytes]:
    """Every file under ``log_dir`` with its bytes (the stored state)."""
    result: dict[str, bytes] = {}
    for root, _dirs, files in os.walk(log_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                result[os.path.relpath(path, log_dir)] = f.read()
    return result


async def assert_serves(port: int, topic: str, expected: bytes) -> None:
    """A new, well-behaved connection is accepted and fetches ``topic``-0 byte for byte."""
    client = await RawClient.connect(port)
    try:
        response = await client.call(FetchRequest(FetchPart(topic, 0, 0, len(expected) + 1000)))
        assert (response.error_code, response.payload) == (ErrorCode.NO_ERROR, expected)
        assert await client.offsets(topic, 0, -1, 1) == [len(expected)]
    finally:
        await client.aclose()


def frame(size: int, body: bytes = b"") -> bytes:
    """A request frame with an arbitrary (possibly lying) size prefix."""
    return struct.pack(">i", size) + body


# --------------------------------------------------------------------------- subprocesses

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_MARKER = b"trikafka: serving on "
# Bounds for waiting on a child process (start-up, exit); a hang fails, never stalls.
PROCESS_TIMEOUT_S = 30.0


def trikafka_command(*args: str) -> list[str]:
    """``python -m trikafka ARGS`` with this interpreter."""
    return [sys.executable, "-m", "trikafka", *args]


def child_env() -> dict[str, str]:
    """The environment for a child: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ChildProcess:
    """A child with its stderr collected in the background (so it never blocks on a full pipe)."""

    def __init__(self, process: trio.Process):
        self.process = process
        self.stderr = bytearray()
        self.stderr_closed = False
        self._stderr_changed = trio.Event()
        self.stdout = bytearray()
        self._stdout_changed = trio.Event()

    @property
    def pid(self) -> int:
        return self.process.pid

    async def collect_stderr(self) -> None:
        assert self.process.stderr is not None
        async with self.process.stderr:
            while data := await self.process.stderr.receive_some(65536):
                self.stderr += data
                self._stderr_changed.set()
                self._stderr_changed = trio.Event()
        self.stderr_closed = True
        self._stderr_changed.set()

    async def collect_stdout(self) -> None:
        assert self.process.stdout is not None
        async with self.process.stdout:
            while data := await self.process.stdout.receive_some(65536):
                self.stdout += data
                self._stdout_changed.set()
                self._stdout_changed = trio.Event()

    async def wait_for_lines(self, count: int) -> list[bytes]:
        """Wait until stdout holds ``count`` complete lines; return them."""
        with trio.fail_after(PROCESS_TIMEOUT_S):
            while self.stdout.count(b"\n") < count:
                await self._stdout_changed.wait()
        return bytes(self.stdout).split(b"\n")[:count]

    async def send_stdin(self, data: bytes, *, close: bool = True) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(data)
        if close:
            await self.process.stdin.aclose()

    async def wait_for_stderr(self, marker: bytes) -> None:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            while marker not in self.stderr:
                if self.stderr_closed:
                    raise AssertionError(f"the child ended its stderr without {marker!r}: "
                                         f"{self.stderr.decode(errors='replace')}")
                await self._stderr_changed.wait()

    async def wait(self) -> int:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            return await self.process.wait()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)


@asynccontextmanager
async def child_process(*args: str, stdin: int | None = None, stdout: int | None = None,
                        cwd: Any = None, program: list[str] | None = None,
                        env: dict[str, str] | None = None) -> AsyncIterator[ChildProcess]:
    """Run ``trikafka ARGS`` in a child; it is killed (by PID) and reaped on exit, whatever happens.

    ``program`` replaces ``python -m trikafka`` (an installed script), ``env`` the
    environment (default: this checkout first on the import path).
    """
    argv = [*program, *args] if program is not None else trikafka_command(*args)
    process = await trio.lowlevel.open_process(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                                               env=env if env is not None else child_env(), cwd=cwd)
    child = ChildProcess(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child.collect_stderr)
            if process.stdout is not None:
                nursery.start_soon(child.collect_stdout)
            try:
                yield child
            finally:
                if process.returncode is None:
                    process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
                    if process.stdin is not None:
                        await trio.aclose_forcefully(process.stdin)
    finally:
        if process.returncode is None:  # never orphan a child, even on a failure above
            process.kill()


@asynccontextmanager
async def serve_process(log_dir: Any, *flags: str, cwd: Any = None) -> AsyncIterator[tuple[ChildProcess, int]]:
    """``trikafka serve`` on a free port; yields (child, port) once it serves."""
    ready_file = os.path.join(str(log_dir) + ".port")
    async with child_process("serve", "--standalone", "--port", "0", "--log-dir", str(log_dir),
                             "--ready-file", ready_file, *flags, cwd=cwd) as child:
        await child.wait_for_stderr(READY_MARKER)
        port, _ = read_ready_file(ready_file)
        yield child, port


async def until_killed(killed: trio.Event, task: Any, *args: Any) -> None:
    """Run a load task; connection failures are expected only once the kill was sent."""
    try:
        await task(*args)
    except (ClientError, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        if not killed.is_set():
            raise


async def http_exchange(port: int, request: bytes) -> tuple[int, bytes]:
    """Send a raw HTTP request to ``127.0.0.1:port``; (status, body) of the answer."""
    with trio.fail_after(RESPONSE_TIMEOUT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            answer = bytearray()
            while data := await stream.receive_some(65536):
                answer += data
    head, _, body = bytes(answer).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    """``GET path`` on the metrics endpoint: (status, body)."""
    return await http_exchange(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by (name, sorted labels), parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = await http_get(port, "/metrics")
    assert status == 200, body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}
