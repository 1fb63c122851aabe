"""A Kafka connection keeps reading while deferred answers wait, and answers in request order (§16.2)."""

from __future__ import annotations

import contextlib
import struct
from typing import AsyncIterator, Callable

import pytest
import trio
import trio.testing
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from trikafka.broker.quotas import ClientQuotas
from trikafka.broker.kafka.connection import Deferred, ServedKafkaConnection
from trikafka.kafka.framing import Request, encode_request
from trikafka.wire.responses import Chunk

VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


class DeferringService:
    """Answers request n with the bytes ``n`` (int32), deferred until ``release(n)`` (``ready`` ones at
    once, ``slow`` ones handled only once released); ``fail`` ones raise."""

    max_request_bytes = 1 << 20
    quotas = ClientQuotas(samples=11, window_s=1.0)  # none set: no request is charged (§20.2)

    def __init__(self, fail: frozenset[int] = frozenset(), ready: frozenset[int] = frozenset(),
                 slow: frozenset[int] = frozenset()) -> None:
        self.handled: list[int] = []
        self._released: dict[int, trio.Event] = {}
        self._fail = fail
        self._ready = ready
        self._slow = slow

    def release(self, correlation_id: int) -> None:
        self._released.setdefault(correlation_id, trio.Event()).set()

    async def handle(self, request: Request) -> list[Chunk] | None | Deferred:
        n = request.correlation_id
        self.handled.append(n)
        released = self._released.setdefault(n, trio.Event())
        if n in self._ready:
            return [struct.pack(">ii", 4, n)]
        if n in self._slow:  # handled once released, then ready
            await released.wait()
            return [struct.pack(">ii", 4, n)]

        async def later() -> list[Chunk]:
            await released.wait()
            if n in self._fail:
                raise RuntimeError(f"request {n} failed")
            return [struct.pack(">ii", 4, n)]

        return later

    def observe(self, api_key: int, seconds: float) -> None:
        pass


def frame(correlation_id: int) -> bytes:
    return encode_request(18, 3, correlation_id, "t", VERSIONS)


async def answers(stream: trio.abc.Stream, count: int) -> list[int]:
    data = b""
    while len(data) < 8 * count:
        more = await stream.receive_some()
        if not more:
            break
        data += more
    return [struct.unpack_from(">i", data, i + 4)[0] for i in range(0, len(data), 8)]


async def test_requests_sent_while_earlier_answers_wait_are_handled_and_answered_in_order() -> None:
    service = DeferringService()
    client, server = trio.testing.memory_stream_pair()
    connection = ServedKafkaConnection(service, server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        for n in range(1, 21):  # one write each: the later ones arrive while the first waits
            await client.send_all(frame(n))
            await trio.testing.wait_all_tasks_blocked()
        assert service.handled == list(range(1, 21))  # all handled before any answer is ready
        for n in reversed(range(1, 21)):  # acknowledged newest first ...
            service.release(n)
        assert await answers(client, 20) == list(range(1, 21))  # ... answered oldest first
        await client.aclose()
    assert connection.close_reason is not None


async def test_a_failed_answer_mid_pipeline_closes_the_connection_after_the_answers_before_it() -> None:
    service = DeferringService(fail=frozenset({3}))
    client, server = trio.testing.memory_stream_pair()
    connection = ServedKafkaConnection(service, server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        for n in range(1, 6):
            await client.send_all(frame(n))
            await trio.testing.wait_all_tasks_blocked()
        for n in range(1, 6):
            service.release(n)
        assert await answers(client, 5) == [1, 2]  # then the stream ends: 4 and 5 are not answered
    assert service.handled == [1, 2, 3, 4, 5]
    assert connection.close_reason == "RuntimeError: request 3 failed"


async def test_ready_answers_wait_behind_deferred_ones_and_go_first_when_nothing_waits() -> None:
    service = DeferringService(ready=frozenset({1, 3, 5, 6}))
    client, server = trio.testing.memory_stream_pair()
    connection = ServedKafkaConnection(service, server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client.send_all(frame(1))
        assert await answers(client, 1) == [1]  # nothing waits: answered at once
        for n in (2, 3, 4, 5):
            await client.send_all(frame(n))
            await trio.testing.wait_all_tasks_blocked()
        service.release(4)
        await trio.testing.wait_all_tasks_blocked()
        service.release(2)
        assert await answers(client, 4) == [2, 3, 4, 5]
        await client.send_all(frame(6))
        assert await answers(client, 1) == [6]
        await client.aclose()


async def test_a_ready_answer_after_a_failed_one_is_never_sent() -> None:
    service = DeferringService(fail=frozenset({2}), slow=frozenset({3}))
    client, server = trio.testing.memory_stream_pair()
    connection = ServedKafkaConnection(service, server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        for n in (1, 2, 3):
            await client.send_all(frame(n))
            await trio.testing.wait_all_tasks_blocked()
        service.release(1)
        service.release(2)  # fails while 3 is being handled
        await trio.testing.wait_all_tasks_blocked()
        service.release(3)  # 3's answer is ready once 2 has failed: it must not go out
        assert await answers(client, 2) == [1]
    assert connection.close_reason == "RuntimeError: request 2 failed"


class _Later:
    """A deferred answer that says when it is ready (``ReadyLater``, as an acks -1 Produce's): awaiting it
    waits until ``ready()`` and answers ``n``, or until its deadline and answers ``-n`` (timed out)."""

    def __init__(self, n: int, deadline: float) -> None:
        self.n, self.deadline = n, deadline
        self.callback: Callable[[], None] | None = None
        self.awaited = 0
        self._ready = trio.Event()

    async def __call__(self) -> list[Chunk]:
        self.awaited += 1
        with trio.move_on_at(self.deadline):
            await self._ready.wait()
        return [struct.pack(">ii", 4, self.n if self._ready.is_set() else -self.n)]

    def when_ready(self, callback: Callable[[], None]) -> float | None:
        self.callback = callback
        return self.deadline

    def cancel(self) -> None:
        self.callback = None

    def ready(self) -> None:
        self._ready.set()
        callback, self.callback = self.callback, None
        if callback is not None:
            callback()


class LaterService(DeferringService):
    """Answers ``later`` requests with a ``_Later`` due ``timeout_s`` after it was handled."""

    def __init__(self, later: frozenset[int], timeout_s: float = 60.0, **kwargs: frozenset[int]) -> None:
        super().__init__(**kwargs)
        self.later: dict[int, _Later] = {}
        self._later_ids, self._timeout_s = later, timeout_s

    async def handle(self, request: Request) -> list[Chunk] | None | Deferred:
        n = request.correlation_id
        if n not in self._later_ids:
            return await super().handle(request)
        self.handled.append(n)
        answer = self.later[n] = _Later(n, trio.current_time() + self._timeout_s)
        return answer


@contextlib.asynccontextmanager
async def _served(service: DeferringService) -> AsyncIterator[tuple[trio.abc.Stream, ServedKafkaConnection]]:
    """A connection of ``service`` running until the block ends: (the client's stream, the connection)."""
    client, server = trio.testing.memory_stream_pair()
    connection = ServedKafkaConnection(service, server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        yield client, connection


async def test_an_answer_that_says_when_it_is_ready_stays_out_of_the_sender_until_then() -> None:
    """The sender is not woken to start waiting for it: it wakes once, to send it."""
    service = LaterService(later=frozenset({1}))
    async with _served(service) as (client, _):
        await client.send_all(frame(1))
        await trio.testing.wait_all_tasks_blocked()
        assert service.later[1].awaited == 0  # the sender has not taken it
        service.later[1].ready()
        assert await answers(client, 1) == [1]
        assert service.later[1].awaited == 1
        await client.aclose()


async def test_a_held_answer_goes_before_the_answers_after_it_and_at_its_deadline(autojump_clock) -> None:
    service = LaterService(later=frozenset({1, 3}), timeout_s=5.0, ready=frozenset({2}))
    async with _served(service) as (client, _):
        await client.send_all(frame(1) + frame(2))  # 2, ready, queues 1 before it: the sender awaits 1
        await trio.testing.wait_all_tasks_blocked()
        assert service.later[1].callback is None  # dropped when it was queued
        service.later[1].ready()
        assert await answers(client, 2) == [1, 2]
        await client.send_all(frame(3))  # never ready: answered at its deadline, as timed out
        started = trio.current_time()
        with trio.fail_after(60):
            assert await answers(client, 1) == [-3]
        assert trio.current_time() - started == pytest.approx(5.0, abs=0.01)
        await client.aclose()


async def test_a_graceful_stop_still_answers_a_held_answer() -> None:
    service = LaterService(later=frozenset({1}))
    async with _served(service) as (client, connection):
        await client.send_all(frame(1))
        await trio.testing.wait_all_tasks_blocked()
        connection.stop()
        await trio.testing.wait_all_tasks_blocked()
        service.later[1].ready()
        assert await answers(client, 1) == [1]
    assert connection.close_reason == "broker shutting down"
