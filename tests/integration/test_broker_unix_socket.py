"""The broker's local Unix-domain listener (docs/protocol.md §2) and the clients that use it.

A real in-process broker listens on a real socket file; the blocking client
(the Spark source's) talks to it from a worker thread, as a Spark task would.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from trikafka.spark.blocking_client import BrokerConnection
from trikafka.testing.broker import open_broker
from trikafka.wire import ErrorCode, ProducePart, build_message_set


def _stale_socket_file(path: Path) -> None:
    """What a broker killed with SIGKILL leaves: a socket file nobody listens on."""
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()


async def test_the_broker_serves_the_same_protocol_on_its_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    _stale_socket_file(path)  # replaced at start
    async with open_broker(unix_socket_path=str(path)) as broker:
        def over_the_socket() -> tuple:
            with BrokerConnection(broker.host, broker.port, unix_path=str(path)) as conn:
                (result,) = conn.produce_acked([ProducePart("local", 0, build_message_set([b"hello", b"world"]))])
                end = conn.visible_end("local", 0)
                buffer = bytearray(1000)
                error, size = conn.fetch_into("local", 0, 0, 1000, buffer)
                return result.error, end, error, bytes(buffer[:size])

        produced, end, error, data = await trio.to_thread.run_sync(over_the_socket)
        assert (produced, error, end) == (ErrorCode.NO_ERROR, ErrorCode.NO_ERROR, len(data))
        assert data == build_message_set([b"hello", b"world"])
    assert not path.exists()  # removed at shutdown


async def test_a_file_that_is_not_a_socket_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    path.write_text("someone's data")
    with pytest.raises(BaseException) as caught:
        async with open_broker(unix_socket_path=str(path)):
            pass
    assert "exists and is not a socket" in repr(caught.value)
    assert path.read_text() == "someone's data"


async def test_the_spark_source_uses_a_brokers_socket_where_it_exists_and_tcp_elsewhere(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from trikafka.spark.options import OptionError, parse_options
    from trikafka.spark.planning import PartitionRange, open_connection, open_for_range
    from trikafka.wire.metadata import BrokerAddress
    from trikafka.spark.offsets import PartitionKey
    from trikafka.spark.tasks import RangePartition, read_partition

    path = tmp_path / "broker.sock"
    payloads = [bytes([i % 256]) * 40 for i in range(500)]
    async with open_broker(unix_socket_path=str(path)) as broker:
        def read(sockets: str) -> tuple[str | None, list[bytes]]:
            options = parse_options({"brokers": f"0:{broker.host}:{broker.port}", "topics": "local",
                                     "brokerSockets": sockets, "fetchSize": "4000"})
            with open_connection(BrokerAddress(0, broker.host, broker.port), options) as conn:
                conn.produce_acked([ProducePart("local", 0, build_message_set(payloads))])
                used, end = conn.unix_path, conn.visible_end("local", 0)
            planned = PartitionRange(PartitionKey("local", 0, 0), broker.host, broker.port, 0, end)
            rows = [p for batch in read_partition(options, RangePartition(planned))
                    for p in batch.column("payload").to_pylist()]
            return used, rows

        used, rows = await trio.to_thread.run_sync(read, f"0={path}")
        assert used == str(path) and rows == payloads

        def replicated_task_connection() -> str | None:
            # A replicated partition's key names no broker; its range names the leader it was planned on.
            options = parse_options({"brokers": f"0:{broker.host}:{broker.port}", "topics": "local",
                                     "brokerSockets": f"0={path}"})
            planned = PartitionRange(PartitionKey("local", None, 0), broker.host, broker.port, 0, 1, broker_id=0)
            with open_for_range(planned, options) as conn:
                return conn.unix_path

        assert await trio.to_thread.run_sync(replicated_task_connection) == str(path)
        used, rows = await trio.to_thread.run_sync(read, f"0={tmp_path / 'elsewhere.sock'}")
        assert used is None and rows == payloads * 2  # no such socket here: TCP
    for bad in ("x=/a", "0=", "0", "0=/a,0=/b"):
        with pytest.raises(OptionError, match="brokerSockets"):
            parse_options({"brokers": "0:h:1", "topics": "t", "brokerSockets": bad})


async def test_the_unix_socket_stays_plaintext_when_the_tcp_port_speaks_tls(tmp_path: Path) -> None:
    """docs/protocol.md §18.1: TLS is for the network; the local socket passes descriptors (§9.8)."""
    from tests.helpers.certificates import make_certificates

    files = make_certificates(str(tmp_path))
    path = tmp_path / "broker.sock"
    async with open_broker(unix_socket_path=str(path), port_security_protocol="SSL", **files.broker_settings()) as broker:
        def over_the_socket() -> ErrorCode:
            with BrokerConnection(broker.host, broker.port, unix_path=str(path)) as conn:
                (result,) = conn.produce_acked([ProducePart("local", 0, build_message_set([b"hello"]))])
                return result.error

        assert await trio.to_thread.run_sync(over_the_socket) == ErrorCode.NO_ERROR
