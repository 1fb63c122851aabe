"""FETCH_LOCAL (docs/protocol.md §9.8): the answer of a FETCH, as a segment file's descriptor.

The promise checked here: over the broker's Unix socket, a short-circuit read
returns exactly FETCH's answer (same error, same bytes) for every offset and
size, including ones that end at a segment boundary or fall outside the log;
the descriptor it passes can read but never write; nothing leaks on either
side; and a broker without the request is read with FETCH instead.  A real
in-process broker, the blocking client in a worker thread (as a Spark task).
"""

from __future__ import annotations

import os
import random
import socket
import struct
from pathlib import Path

import pytest
import trio

from trikafka.log.fs import OsFileSystem
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.spark.sockets import receive_with_descriptors
from trikafka.testing.broker import open_broker
from trikafka.wire import (
    ErrorCode,
    FetchLocalRequest,
    FetchPart,
    ProducePart,
    RequestType,
    build_message_set,
    decode_fetch_local_tail,
    encode_request,
)

PAYLOADS = [bytes([i % 251]) * (20 + i % 50) for i in range(3000)]  # about 135 kB of varied entries


def real_broker(tmp_path: Path, **settings):  # type: ignore[no-untyped-def]
    """An in-process broker on the real file system (descriptors need real files), listening
    on a Unix socket at ``tmp_path / "broker.sock"``."""
    return open_broker(fs=OsFileSystem(), log_dir=str(tmp_path / "data"),
                       unix_socket_path=str(tmp_path / "broker.sock"), **settings)


def _fetch_both(broker, path: Path, cases: list[tuple[int, int]]) -> list[tuple]:
    """Each case read with FETCH over TCP and with FETCH_LOCAL over the socket."""
    out = []
    with BrokerConnection(broker.host, broker.port) as tcp, \
            BrokerConnection(broker.host, broker.port, unix_path=str(path), short_circuit=True) as local:
        for offset, max_bytes in cases:
            a, b = bytearray(max_bytes), bytearray(max_bytes)
            (code_a, size_a), (code_b, size_b) = tcp.fetch_into("t", 0, offset, max_bytes, a), \
                local.fetch_into("t", 0, offset, max_bytes, b)
            out.append(((code_a, bytes(a[:size_a])), (code_b, bytes(b[:size_b]))))
        assert local.short_circuit  # never fell back
    return out


async def test_a_short_circuit_read_is_exactly_a_fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trikafka.spark.granted as granted

    preads: list[int] = []  # every answer with bytes is read through a passed descriptor
    read_range = granted.read_range
    monkeypatch.setattr(granted, "read_range", lambda fd, view, at: preads.append(at) or read_range(fd, view, at))
    path = tmp_path / "broker.sock"
    async with real_broker(tmp_path, log_file_size=50_000) as broker:
        def produce_and_read() -> list[tuple]:
            with BrokerConnection(broker.host, broker.port) as conn:
                for i in range(0, len(PAYLOADS), 500):
                    (r,) = conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[i:i + 500]))])
                    assert r.error == ErrorCode.NO_ERROR
                end = conn.visible_end("t", 0)
            rng = random.Random(20)  # and 200 random ones, replayable from this seed
            swept = [(rng.randrange(end + 2), rng.choice([1, 9, 100, 4096, 60_000])) for _ in range(200)]
            cases = [(end + 1, 100), (end, 100), (0, 1 << 20), (0, 7), (0, 4096), (end // 3, 10_000),
                     (end - 30, 1000), (49_990, 4096), *swept]
            return _fetch_both(broker, path, cases)

        results = await trio.to_thread.run_sync(produce_and_read)
    for by_fetch, by_fetch_local in results:
        assert by_fetch_local == by_fetch
    assert results[0][1][0] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert len(preads) == sum(1 for _, (_, data) in results if data)
    assert len(results[2][0][1]) < 1 << 20  # the answer stopped at the first segment's end


def _raw_fetch_local(sock: socket.socket, part: FetchPart) -> tuple[ErrorCode, int, int, list[int], bytes]:
    """FETCH_LOCAL by hand: (error, position, length, descriptors received, inline bytes)."""
    sock.sendall(encode_request(FetchLocalRequest(part)))
    head, fds = bytearray(18), []
    assert receive_with_descriptors(sock, memoryview(head), fds) == 18, "the broker closed the connection"
    size, code = struct.unpack_from(">ih", head)
    position, length = decode_fetch_local_tail(size - 2, head[6:])
    inline = bytearray(length if position == -1 else 0)
    assert receive_with_descriptors(sock, memoryview(inline), fds) == len(inline)
    return ErrorCode(code), position, length, fds, bytes(inline)


async def test_the_descriptor_reads_the_segment_and_cannot_write_it(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    async with real_broker(tmp_path) as broker:
        def check() -> None:
            with BrokerConnection(broker.host, broker.port) as conn:
                conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[:100]))])
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(path))
                code, position, length, fds, inline = _raw_fetch_local(sock, FetchPart("t", 0, 0, 1000))
                assert (code, position, length, len(fds), inline) == (ErrorCode.NO_ERROR, 0, 1000, 1, b"")
                try:
                    assert os.pread(fds[0], 1000, 0) == build_message_set(PAYLOADS[:100])[:1000]
                    with pytest.raises(OSError):
                        os.pwrite(fds[0], b"x", 0)  # read-only: the log cannot be changed through it
                finally:
                    os.close(fds[0])
                # Errors and answers without bytes come inline, with no descriptor.
                assert _raw_fetch_local(sock, FetchPart("t", 0, 10**9, 100))[:4] == (
                    ErrorCode.OFFSET_OUT_OF_RANGE, -1, 0, [])
                assert _raw_fetch_local(sock, FetchPart("t", 7, 0, 100))[:4] == (ErrorCode.WRONG_PARTITION, -1, 0, [])

        await trio.to_thread.run_sync(check)


async def test_over_tcp_the_answer_comes_inline(tmp_path: Path) -> None:
    async with open_broker() as broker:
        def check() -> tuple:
            with BrokerConnection(broker.host, broker.port) as conn:
                conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[:10]))])
            with socket.create_connection((broker.host, broker.port)) as sock:
                return _raw_fetch_local(sock, FetchPart("t", 0, 0, 1 << 16))

        code, position, length, fds, inline = await trio.to_thread.run_sync(check)
    assert (code, position, fds) == (ErrorCode.NO_ERROR, -1, [])
    assert inline == build_message_set(PAYLOADS[:10]) and length == len(inline)


def _segment_descriptors() -> int:
    """Open descriptors of this process that point at a segment file (broker's and client's)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").endswith(".kafka")
        except OSError:
            pass  # closed meanwhile
    return found


async def test_no_descriptor_leaks_on_either_side(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    async with real_broker(tmp_path) as broker:
        def read_many() -> tuple[int, int]:
            with BrokerConnection(broker.host, broker.port) as conn:
                conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[:200]))])
            buffer = bytearray(4096)
            with BrokerConnection(broker.host, broker.port, unix_path=str(path), short_circuit=True) as local:
                local.fetch_into("t", 0, 0, 4096, buffer)
                before = _segment_descriptors()
                for _ in range(200):
                    assert local.fetch_into("t", 0, 0, 4096, buffer) == (ErrorCode.NO_ERROR, 4096)
                return before, _segment_descriptors()

        before, after = await trio.to_thread.run_sync(read_many)
    # One process holds the broker and the client: the count covers both sides.
    assert after == before  # the broker's own descriptors of its segment, no more


async def test_a_broker_without_fetch_local_is_read_with_fetch(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    async with real_broker(tmp_path, refuse_requests=[RequestType.FETCH_LOCAL]) as broker:
        def read() -> tuple[bool, ErrorCode, bytes]:
            with BrokerConnection(broker.host, broker.port) as conn:
                conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[:50]))])
            buffer = bytearray(1 << 16)
            with BrokerConnection(broker.host, broker.port, unix_path=str(path), short_circuit=True) as local:
                code, size = local.fetch_into("t", 0, 0, 1 << 16, buffer)
                code2, size2 = local.fetch_into("t", 0, 0, 1 << 16, buffer)  # FETCH again, no new refusal
                assert (code2, size2) == (code, size)
                return local.short_circuit, code, bytes(buffer[:size])

        short_circuit, code, data = await trio.to_thread.run_sync(read)
    assert (short_circuit, code, data) == (False, ErrorCode.NO_ERROR, build_message_set(PAYLOADS[:50]))


async def test_the_spark_source_reads_the_same_rows_with_and_without_short_circuits(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from trikafka.spark.offsets import PartitionKey
    from trikafka.spark.options import parse_options
    from trikafka.spark.planning import PartitionRange
    from trikafka.spark.tasks import RangePartition, read_partition

    async with real_broker(tmp_path, log_file_size=50_000) as broker:
        def read(short_circuit: str) -> list[tuple[int, bytes]]:
            options = parse_options({"brokers": f"0:{broker.host}:{broker.port}", "topics": "t",
                                     "brokerSockets": f"0={tmp_path / 'broker.sock'}", "fetchSize": "7000",
                                     "shortCircuit": short_circuit})
            with BrokerConnection(broker.host, broker.port) as conn:
                end = conn.visible_end("t", 0)
            planned = PartitionRange(PartitionKey("t", 0, 0), broker.host, broker.port, 0, end)
            return [row for batch in read_partition(options, RangePartition(planned))
                    for row in zip(batch.column("offset").to_pylist(), batch.column("payload").to_pylist())]

        def produce() -> None:
            with BrokerConnection(broker.host, broker.port) as conn:
                for i in range(0, len(PAYLOADS), 500):
                    conn.produce_acked([ProducePart("t", 0, build_message_set(PAYLOADS[i:i + 500]))])

        await trio.to_thread.run_sync(produce)
        short, plain = await trio.to_thread.run_sync(read, "true"), await trio.to_thread.run_sync(read, "false")
    assert short == plain and [payload for _, payload in short] == PAYLOADS
