"""``KafkaConnection`` against a scripted broker on an in-memory stream (docs/protocol.md §16.2, §16.3).

The broker side is ``trikafka.kafka.framing``'s: it parses each request and
answers with ``encode_response``, so the tests check what goes over the wire.
"""

from __future__ import annotations

import datetime
from typing import Awaitable, Callable

import pytest
import trio
import trio.testing
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from trikafka.client.errors import BrokerConnectionError, BrokerProtocolError
from trikafka.client.kafka.connection import ASKED_API_VERSIONS_VERSION, KafkaConnection, shared_versions, take
from trikafka.kafka.apis import KafkaApi, api_versions_entries
from trikafka.kafka.framing import FrameReader, Request, encode_response, parse_request

Answer = Callable[[Request], ResponsePayload | bytes | None]


class ScriptedBroker:
    """Reads requests off its end of the stream; ``answer`` makes each response (None: no answer)."""

    def __init__(self, stream: trio.abc.Stream, answer: Answer, *, hold_until: int = 1):
        self.stream = stream
        self.answer = answer
        self.hold_until = hold_until  # answer nothing until this many requests arrived
        self.requests: list[Request] = []

    async def run(self) -> None:
        reader = FrameReader(1 << 20)
        held: list[bytes] = []
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return
            reader.feed(data)
            while (frame := reader.next_frame()) is not None:
                request = parse_request(frame)
                self.requests.append(request)
                body = self.answer(request)
                if body is not None:
                    held.append(body if isinstance(body, bytes) else encode_response(request, body))
            if len(self.requests) >= self.hold_until and held:
                await self.stream.send_all(b"".join(held))
                held.clear()


def api_versions_answer(request: Request, **max_versions: int) -> ResponsePayload:
    """The table of §16.3, each api capped at ``max_versions[name]``."""
    entries = tuple(entry.__class__(api_key=entry.api_key, min_version=entry.min_version,
                                    max_version=min(entry.max_version, max_versions.get(KafkaApi(entry.api_key).name,
                                                                                        entry.max_version)))
                    for entry in api_versions_entries(request.api_version))
    throttle = {} if request.api_version == 0 else {"throttle_time": datetime.timedelta(0)}  # v0 has none
    return request.api.response_class(request.api_version)(error_code=ErrorCode.none, api_keys=entries, **throttle)


def metadata_answer(request: Request, controller_id: int) -> ResponsePayload:
    return request.api.response_class(request.api_version)(
        throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=controller_id, topics=())


async def with_broker(answer: Answer, test: Callable[[KafkaConnection, ScriptedBroker], Awaitable[None]],
                      *, hold_until: int = 1) -> None:
    client_end, broker_end = trio.testing.memory_stream_pair()
    broker = ScriptedBroker(broker_end, answer, hold_until=hold_until)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.run)
        connection = KafkaConnection(client_end, request_timeout_s=None)
        try:
            await test(connection, broker)
        finally:
            await connection.aclose()
            nursery.cancel_scope.cancel()


async def test_negotiation_keeps_the_highest_version_both_serve() -> None:
    def answer(request: Request) -> ResponsePayload:
        return api_versions_answer(request, PRODUCE=7, FETCH=11)

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        await connection.negotiate()
        assert connection.versions[KafkaApi.PRODUCE] == 7
        assert connection.versions[KafkaApi.FETCH] == 11
        assert connection.versions[KafkaApi.METADATA] == KafkaApi.METADATA.max_version
        assert broker.requests[0].api_version == ASKED_API_VERSIONS_VERSION == 3  # §16.2: not v4

    await with_broker(answer, test)


async def test_an_unsupported_api_versions_version_is_asked_again_at_the_brokers() -> None:
    def answer(request: Request) -> ResponsePayload | bytes:
        if request.api_version == 3:  # a broker whose ApiVersions stops at v2 answers as §16.2 says
            entries = tuple(ApiVersionV0(api_key=e.api_key, min_version=e.min_version,
                                         max_version=2 if e.api_key == KafkaApi.API_VERSIONS else e.max_version)
                            for e in api_versions_entries(0))
            return encode_response(Request(KafkaApi.API_VERSIONS, 0, request.correlation_id, None, request.body),
                                   ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=entries))
        return api_versions_answer(request)

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        await connection.negotiate()
        assert [r.api_version for r in broker.requests] == [3, 2]
        assert connection.versions[KafkaApi.PRODUCE] == KafkaApi.PRODUCE.max_version

    await with_broker(answer, test)



async def test_a_refusal_that_names_no_api_versions_range_is_asked_again_at_v0() -> None:
    """librdkafka's mock cluster (ApiVersions v0-2) refuses v3 with these bytes: error 35, one entry
    (ApiVersions 0-2) after a one-byte count, a throttle time; neither a whole v3 nor a v0 body (§16.2)."""
    def answer(request: Request) -> ResponsePayload | bytes:
        if request.api_version == 3:
            body = request.correlation_id.to_bytes(4, "big") + bytes.fromhex("0023 01 0012 0000 0002 00000000")
            return len(body).to_bytes(4, "big") + body
        return api_versions_answer(request)

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        await connection.negotiate()
        assert [r.api_version for r in broker.requests] == [3, 0]
        assert connection.versions[KafkaApi.PRODUCE] == KafkaApi.PRODUCE.max_version

    await with_broker(answer, test)


async def test_max_versions_caps_what_is_sent_and_drops_an_api_capped_below_its_range() -> None:
    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        await connection.negotiate(max_versions={KafkaApi.JOIN_GROUP: 5, KafkaApi.PRODUCE: 1})
        assert connection.versions[KafkaApi.JOIN_GROUP] == 5
        assert KafkaApi.PRODUCE not in connection.versions  # v1 is below the v3 this client speaks
        assert connection.versions[KafkaApi.FETCH] == KafkaApi.FETCH.max_version

    await with_broker(api_versions_answer, test)

async def test_pipelined_requests_get_their_own_answers_in_order() -> None:
    def answer(request: Request) -> ResponsePayload:  # echoes the number in the topic asked for
        (topic,) = request.body.topics  # type: ignore[attr-defined]
        return metadata_answer(request, controller_id=int(topic.name.removeprefix("t")))

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        connection.versions = {KafkaApi.METADATA: 12}
        answers: dict[int, int] = {}

        async def ask(index: int) -> None:
            body = await connection.request(KafkaApi.METADATA, topics=[{"name": f"t{index}", "topic_id": None}],
                                            allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False)
            answers[index] = body.controller_id  # type: ignore[attr-defined]

        async with trio.open_nursery() as nursery:
            for index in range(5):
                nursery.start_soon(ask, index)
        # The broker answered nothing until all five were sent: they were in flight together,
        # and each caller got the answer to its own request.
        assert sorted(r.correlation_id for r in broker.requests) == list(range(5))
        assert answers == {index: index for index in range(5)}

    await with_broker(answer, test, hold_until=5)


async def test_produce_with_acks_zero_waits_for_no_answer() -> None:
    def answer(request: Request) -> ResponsePayload | None:
        return None if request.api is KafkaApi.PRODUCE else metadata_answer(request, controller_id=7)

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        connection.versions = {KafkaApi.PRODUCE: 9, KafkaApi.METADATA: 12}
        body = KafkaApi.PRODUCE.request_class(9)(transactional_id=None, acks=0,  # type: ignore[call-arg]
                                                 timeout=datetime.timedelta(seconds=1), topic_data=())
        assert await connection.send(KafkaApi.PRODUCE, 9, body, expect_answer=False) is None
        after = await connection.request(KafkaApi.METADATA, topics=(), allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)
        assert after.controller_id == 7  # type: ignore[attr-defined]
        assert [r.api for r in broker.requests] == [KafkaApi.PRODUCE, KafkaApi.METADATA]

    await with_broker(answer, test)


async def test_a_broker_that_closes_fails_the_waiting_request_and_every_later_one() -> None:
    client_end, broker_end = trio.testing.memory_stream_pair()
    connection = KafkaConnection(client_end, request_timeout_s=None)
    connection.versions = {KafkaApi.METADATA: 12}

    async def ask() -> None:
        await connection.request(KafkaApi.METADATA, topics=(), allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)

    async def close_after_the_request() -> None:
        await broker_end.receive_some(65536)
        await broker_end.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_after_the_request)
        with pytest.raises(BrokerConnectionError):
            await ask()
    assert connection.closed
    with pytest.raises(BrokerConnectionError):
        await ask()


async def test_an_answer_that_does_not_decode_closes_the_connection() -> None:
    def answer(request: Request) -> bytes:
        return b"\x00\x00\x00\x06" + request.correlation_id.to_bytes(4, "big") + b"\xff\xff"

    async def test(connection: KafkaConnection, broker: ScriptedBroker) -> None:
        connection.versions = {KafkaApi.METADATA: 12}
        with pytest.raises(BrokerProtocolError):
            await connection.request(KafkaApi.METADATA, topics=(), allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        assert connection.closed

    await with_broker(answer, test)


def test_shared_versions_drop_apis_without_a_common_version() -> None:
    found = shared_versions([(0, 0, 2), (1, 4, 20), (3, 0, 5), (999, 0, 1)])
    assert found == {KafkaApi.FETCH: KafkaApi.FETCH.max_version, KafkaApi.METADATA: 5}


async def test_a_free_lock_is_taken_without_a_schedule_point_and_a_held_one_in_turn() -> None:
    lock = trio.Lock()
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await take(lock)
        assert ran == []  # no schedule point: the task started before it has not run yet
    order: list[str] = []

    async def waiter(name: str) -> None:
        await take(lock)
        order.append(name)
        lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "first")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "second")
        await trio.testing.wait_all_tasks_blocked()
        lock.release()
    assert order == ["first", "second"]


async def test_a_cancelled_task_takes_no_lock() -> None:
    lock = trio.Lock()
    with trio.CancelScope() as scope:
        scope.cancel()
        await take(lock)
    assert scope.cancelled_caught and not lock.locked()
