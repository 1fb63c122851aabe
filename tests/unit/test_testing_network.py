"""The in-memory network's stream pair (``trikafka.testing.network.stream_pair``) keeps Trio's
contract for a half-closeable stream, as ``trio.testing.memory_stream_pair`` did before it."""

from __future__ import annotations

import trio
import trio.testing

from trikafka.testing.network import stream_pair


async def test_the_stream_pair_keeps_trios_half_closeable_stream_contract():
    async def make() -> tuple[trio.abc.HalfCloseableStream, trio.abc.HalfCloseableStream]:
        return stream_pair()

    await trio.testing.check_half_closeable_stream(make, None)


async def test_an_empty_send_is_no_eof():
    a, b = stream_pair()
    await a.send_all(b"")
    await a.send_all(b"x")
    assert await b.receive_some() == b"x"


async def test_a_send_to_a_closed_end_breaks():
    a, b = stream_pair()
    await b.aclose()
    try:
        await a.send_all(b"x")
    except trio.BrokenResourceError:
        return
    raise AssertionError("a send to a closed end went through")
