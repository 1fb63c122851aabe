"""The metrics and health HTTP responder (trikafka/broker/http.py) on a loopback socket."""

from __future__ import annotations

import trio
import trio.testing

from trikafka.broker.http import MAX_REQUEST_HEAD_BYTES, HttpServer, Routes

TIMEOUT_S = 10.0  # a hang fails the test instead of stalling it


async def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` raw, half-close, and read until the server closes the connection."""
    with trio.fail_after(TIMEOUT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            await stream.send_eof()
            answer = bytearray()
            while data := await stream.receive_some(65536):
                answer += data
    return bytes(answer)


def status_and_body(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def start(nursery: trio.Nursery, ready: list[bool]) -> int:
    routes = Routes(metrics=lambda: b"# metrics text\n", is_ready=lambda: ready[0])
    _, port = await nursery.start(HttpServer("127.0.0.1", 0, routes).run)
    return port


async def test_routes_answer_and_readiness_follows_the_broker():
    ready = [False]
    async with trio.open_nursery() as nursery:
        port = await start(nursery, ready)
        assert status_and_body(await exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == \
            (200, b"# metrics text\n")
        assert status_and_body(await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200
        assert status_and_body(await exchange(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 503
        ready[0] = True
        assert status_and_body(await exchange(port, b"GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200
        assert status_and_body(await exchange(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 404
        answer = await exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert status_and_body(answer)[0] == 405 and b"allow: get, head" in answer.lower()
        head = await exchange(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_and_body(head) == (200, b"") and b"content-length: 15" in head.lower()
        assert status_and_body(await exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n"))[0] == 200
        nursery.cancel_scope.cancel()


async def test_junk_gets_400_an_oversized_head_431_and_the_server_goes_on():
    async with trio.open_nursery() as nursery:
        port = await start(nursery, [True])
        for junk in (b"\x00\x01\x02 not http at all\r\n\r\n", b"GET /metrics\r\n\r\n",
                     b"GET /metrics HTTP/1.1\r\n\r\n"):  # the last lacks the Host header 1.1 requires
            assert status_and_body(await exchange(port, junk))[0] == 400, junk
        huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (2 * MAX_REQUEST_HEAD_BYTES)
        assert status_and_body(await exchange(port, huge))[0] == 431
        assert status_and_body(await exchange(port, b"GET /metr"))[0] == 400  # cut short by the client's EOF
        assert status_and_body(await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200
        nursery.cancel_scope.cancel()


async def test_a_silent_client_is_dropped_after_the_request_timeout(autojump_clock):
    from trikafka.broker.http import REQUEST_TIMEOUT_S

    client, server_side = trio.testing.memory_stream_pair()
    server = HttpServer("127.0.0.1", 0, Routes(metrics=lambda: b"", is_ready=lambda: True))
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._serve_connection, server_side)
        await client.send_all(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        assert await client.receive_some(100) == b""  # closed without an answer
    assert trio.current_time() - started == REQUEST_TIMEOUT_S


async def test_a_taken_port_fails_the_start_with_a_message_that_names_the_endpoint():
    import pytest

    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HttpServer("127.0.0.1", port, Routes(metrics=lambda: b"", is_ready=lambda: True))
        with pytest.raises(ExceptionGroup) as caught:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.run)
    [error] = caught.value.exceptions
    assert isinstance(error, OSError) and f"metrics endpoint 127.0.0.1:{port}:" in str(error)
