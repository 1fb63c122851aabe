"""The fault proxy itself: each named mode does what the fault tests rely on."""

from __future__ import annotations

import contextlib
import functools

import trio

from tests.helpers.fault_proxy import FaultMode, open_fault_proxy

WAIT_S = 5.0
QUIET_S = 0.2  # how long "nothing arrives" is watched for


@contextlib.asynccontextmanager
async def echo_server():
    async def echo(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async for data in stream:
                await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    with trio.fail_after(WAIT_S):
        while len(data) < size:
            chunk = await stream.receive_some(size - len(data))
            if not chunk:
                break
            data += chunk
    return data


async def test_forward_then_stall_holds_bytes_and_releases_them_in_order() -> None:
    async with echo_server() as port, open_fault_proxy("127.0.0.1", port) as proxy:
        client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await client.send_all(b"ping")
        assert await receive_exactly(client, 4) == b"ping"
        proxy.set_mode(FaultMode.STALL)
        await client.send_all(b"held")
        with trio.move_on_after(QUIET_S):
            await client.receive_some(100)
            raise AssertionError("a stalled link delivered bytes")
        proxy.set_mode(FaultMode.FORWARD)
        assert await receive_exactly(client, 4) == b"held"
        assert proxy.bytes_forwarded >= 12  # the last leg may not be counted yet
        await client.aclose()


async def test_sever_cuts_live_connections_and_refuse_turns_new_ones_away() -> None:
    async with echo_server() as port, open_fault_proxy("127.0.0.1", port) as proxy:
        client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await client.send_all(b"x")
        assert await receive_exactly(client, 1) == b"x"
        assert proxy.sever() == 1
        assert await receive_exactly(client, 1) == b""  # EOF: the link is gone
        proxy.set_mode(FaultMode.REFUSE)
        refused = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        with trio.fail_after(WAIT_S):
            try:
                assert await refused.receive_some(1) == b""
            except trio.BrokenResourceError:
                pass  # a reset is a refusal too
        assert proxy.refused == 1
        proxy.set_mode(FaultMode.FORWARD)
        again = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await again.send_all(b"back")
        assert await receive_exactly(again, 4) == b"back"
        for stream in (client, refused, again):
            await stream.aclose()
