"""The blocking Spark client checks a response's top-level error exactly as the Trio client does."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from trikafka.client import BrokerError
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.wire import ErrorCode, encode_offsets_response, top_level_error


def test_top_level_error_is_none_only_for_no_error():
    assert top_level_error(ErrorCode.NO_ERROR, "OFFSETS") is None
    assert top_level_error(ErrorCode.UNKNOWN, "OFFSETS") == "OFFSETS response carried a top-level error"


def _one_answer_server(error_code: int) -> tuple[socket.socket, threading.Thread]:
    """A listener that reads one request and answers an OFFSETS payload under ``error_code``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
            conn.recv(size, socket.MSG_WAITALL)
            payload = encode_offsets_response([7])[6:]  # the body, without size and error
            conn.sendall(struct.pack(">ih", 2 + len(payload), error_code) + payload)
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize("error_code", [ErrorCode.UNKNOWN, ErrorCode.WRONG_PARTITION])
def test_blocking_offsets_refuses_a_top_level_error(error_code):
    listener, thread = _one_answer_server(int(error_code))
    with listener:
        with BrokerConnection("127.0.0.1", listener.getsockname()[1]) as conn:
            with pytest.raises(BrokerError) as caught:
                conn.offsets("t", 0, -1)
        thread.join()
    assert caught.value.error_code == error_code
    assert "OFFSETS response carried a top-level error" in str(caught.value)


def test_blocking_offsets_reads_a_clean_answer():
    listener, thread = _one_answer_server(0)
    with listener:
        with BrokerConnection("127.0.0.1", listener.getsockname()[1]) as conn:
            assert conn.offsets("t", 0, -1) == [7]
        thread.join()

