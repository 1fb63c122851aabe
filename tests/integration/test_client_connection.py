"""The Trio client connection against the real broker in-process (trikafka.testing, over
in-memory streams or its loopback listener), plus raw servers that misbehave on purpose."""

import functools
import socket
import struct

import pytest
import trio

from trikafka.client import (
    ACKS_FLUSHED,
    BrokerConnectionError,
    BrokerProtocolError,
    BrokerTimeoutError,
    Connection,
    ExtensionNotSupported,
    FetchResult,
    ProduceAckedResult,
    connect,
)
from trikafka.testing import EXTENSION_REQUESTS, open_broker
from trikafka.wire import (
    Codec,
    ErrorCode,
    FetchRequest,
    ProduceRequest,
    build_message_set,
    iter_messages,
)

SET_A = build_message_set([b"a1", b"a2"])
SET_B = build_message_set([b"b1"], magic=0)
SET_Z = build_message_set([b"z1", b"z2", b"z3"], codec=Codec.GZIP)


async def test_produce_then_fetch_round_trip():
    async with open_broker(num_partitions=2) as broker:
        async with await broker.connect() as conn:
            await conn.produce("topic", 1, SET_A)
            await conn.produce("topic", 1, SET_Z)
            # A plain produce gets no answer.  Requests on one connection are handled in order, so
            # both sets are appended once OFFSETS answers; they become visible when flushed (§7.2),
            # which the count rule asks for but a flush task runs, so the test flushes now.
            await conn.offsets("topic", 1, -1, 1)
            await broker.broker.flush_all()
            result = await conn.fetch("topic", 1, 0, 1 << 20)
            assert result == FetchResult(ErrorCode.NO_ERROR, SET_A + SET_Z, 0)
            assert [m.payload for m in iter_messages(result.data)] == [b"a1", b"a2", b"z1", b"z2", b"z3"]
            # at the end, past the end, wrong partition, bad topic
            assert await conn.fetch("topic", 1, len(SET_A + SET_Z), 100) == FetchResult(
                ErrorCode.NO_ERROR, b"", len(SET_A + SET_Z))
            assert (await conn.fetch("topic", 1, 10_000, 100)).error == ErrorCode.OFFSET_OUT_OF_RANGE
            assert (await conn.fetch("topic", 5, 0, 100)).error == ErrorCode.WRONG_PARTITION
            assert (await conn.fetch("bad/topic", 0, 0, 100)).error == ErrorCode.UNKNOWN
        assert conn.closed
        assert broker.fs.read_file("/data/topic-1/00000000000000000000.kafka") == SET_A + SET_Z


async def test_multiproduce_multifetch_and_offsets():
    async with open_broker(num_partitions=3) as broker:
        async with Connection.open(broker.host, broker.port) as conn:  # over loopback TCP
            await conn.multiproduce([("x", 0, SET_A), ("y", 2, SET_B), ("x", 0, SET_B)])
            # Requests on one connection are handled in order: the sets are appended once this
            # answers.  They become visible when flushed (spec §7.2), which the test does now.
            await conn.offsets("x", 0, -2, 1)
            await broker.broker.flush_all()
            results = await conn.multifetch([("x", 0, 0, 1 << 20), ("y", 2, 0, 5), ("y", 9, 0, 5), ("none", 0, 0, 5)])
            assert results == [
                FetchResult(ErrorCode.NO_ERROR, SET_A + SET_B, 0),
                FetchResult(ErrorCode.NO_ERROR, SET_B[:5], 0),
                FetchResult(ErrorCode.WRONG_PARTITION, b"", 0),
                FetchResult(ErrorCode.NO_ERROR, b"", 0),
            ]
            assert await conn.multifetch([]) == []
            assert await conn.offsets("x", 0, -1, 10) == [len(SET_A + SET_B), 0]
            assert await conn.offsets("x", 0, -2, 10) == [0]
            assert await conn.offsets("never", 0, -1, 1) == [0]


async def test_produce_acked_results_per_part():
    bad_crc = bytearray(SET_A)
    bad_crc[-1] ^= 1
    async with open_broker(num_partitions=1) as broker:
        async with await broker.connect() as conn:
            results = await conn.produce_acked(
                [("t", 0, SET_A), ("t", 0, bytes(bad_crc)), ("bad topic", 0, SET_A), ("t", 4, SET_A), ("t", 0, SET_B)],
                acks=ACKS_FLUSHED, timeout_ms=1000,
            )
    assert results == [
        ProduceAckedResult("t", 0, ErrorCode.NO_ERROR, 0, len(SET_A)),
        ProduceAckedResult("t", 0, ErrorCode.INVALID_MESSAGE, -1, -1),
        ProduceAckedResult("bad topic", 0, ErrorCode.INVALID_TOPIC, -1, -1),
        ProduceAckedResult("t", 4, ErrorCode.WRONG_PARTITION, -1, -1),
        ProduceAckedResult("t", 0, ErrorCode.NO_ERROR, len(SET_A), len(SET_A + SET_B)),
    ]


async def test_fetch_wait_wakes_on_new_data(autojump_clock):
    async with open_broker() as broker:
        async with await broker.connect() as waiter, await broker.connect() as producer:
            # acknowledged once flushed, so the log exists with E = len(SET_B) before the fetch
            # (a plain produce has no answer: the fetch could overtake it on the other connection)
            await producer.produce_acked([("t", 0, SET_B)], acks=ACKS_FLUSHED, timeout_ms=1000)
            got = {}

            async def wait_for_data():
                start = trio.current_time()
                got["results"] = await waiter.fetch_wait([("t", 0, len(SET_B), 1024)], max_wait_ms=60_000)
                got["waited_s"] = trio.current_time() - start

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_data)
                await trio.sleep(5)
                await producer.produce("t", 0, SET_A)
    assert got["results"] == [FetchResult(ErrorCode.NO_ERROR, SET_A, len(SET_B))]
    assert 5 <= got["waited_s"] < 6  # woken by the append, long before max_wait


async def test_fetch_wait_times_out_empty(autojump_clock):
    async with open_broker() as broker:
        async with await broker.connect(request_timeout_s=1) as conn:
            start = trio.current_time()
            results = await conn.fetch_wait([("t", 0, 0, 1024)], max_wait_ms=3000, min_bytes=1)
            assert results == [FetchResult(ErrorCode.NO_ERROR, b"", 0)]
            # the request timeout is extended by max_wait, so this was not a timeout
            assert 3 <= trio.current_time() - start < 4


async def test_concurrent_requests_get_their_own_responses():
    topics = [f"topic{i}" for i in range(12)]
    async with open_broker(num_partitions=1) as broker:
        async with await broker.connect() as conn:
            for i, topic in enumerate(topics):
                await conn.produce(topic, 0, build_message_set([topic.encode()] * (i + 1)))
            answers = {}

            async def ask(topic):
                for _ in range(5):
                    result = await conn.fetch(topic, 0, 0, 1 << 16)
                    offsets = await conn.offsets(topic, 0, -1, 1)
                    answers.setdefault(topic, []).append(
                        ({m.payload for m in iter_messages(result.data)}, len(result.data), offsets))

            async with trio.open_nursery() as nursery:
                for topic in topics:
                    nursery.start_soon(ask, topic)
    for topic in topics:
        size = len(build_message_set([topic.encode()] * (topics.index(topic) + 1)))
        assert answers[topic] == [({topic.encode()}, size, [size])] * 5


async def test_plain_0_7_broker_gives_extension_not_supported():
    async with open_broker(refuse_requests=EXTENSION_REQUESTS) as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, SET_A)
            with pytest.raises(ExtensionNotSupported):
                await conn.produce_acked([("t", 0, SET_A)])
            assert conn.closed
            with pytest.raises(BrokerConnectionError, match="closed"):
                await conn.fetch("t", 0, 0, 100)
        async with await broker.connect() as conn:
            with pytest.raises(ExtensionNotSupported):
                await conn.fetch_wait([("t", 0, 0, 100)], max_wait_ms=10)
        async with await broker.connect() as conn:  # the fallback works
            assert (await conn.fetch("t", 0, 0, 1000)).data == SET_A


async def test_broker_closing_on_a_0_7_request_is_not_an_extension_problem():
    async with open_broker(num_partitions=1) as broker:
        async with await broker.connect() as conn:
            with pytest.raises(BrokerConnectionError, match="before answering OFFSETS") as info:
                await conn.offsets("t", 5, -1, 1)  # an invalid partition: 0.7 closes the connection
            assert not isinstance(info.value, ExtensionNotSupported)
            assert conn.closed


async def test_a_bad_produce_closes_and_the_next_request_fails():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, b"\x00\x00\x00\x05\x07junk")  # bad magic: broker closes
            with pytest.raises(BrokerConnectionError):
                await conn.fetch("t", 0, 0, 100)


@pytest.fixture
async def raw_server(nursery):
    """Start a TCP server whose per-connection behaviour the test supplies."""

    async def start(handler):
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        return "127.0.0.1", listeners[0].socket.getsockname()[1]

    return start


async def read_request(stream):
    header = b""
    while len(header) < 4:
        header += await stream.receive_some(4 - len(header))
    (size,) = struct.unpack(">i", header)
    body = b""
    while len(body) < size:
        body += await stream.receive_some(size - len(body))
    return body


async def test_malformed_response_size_is_a_protocol_error(raw_server):
    async def handler(stream):
        await read_request(stream)
        await stream.send_all(struct.pack(">i", 1) + b"\x00")  # size 1 cannot hold an error code
        await trio.sleep_forever()

    host, port = await raw_server(handler)
    async with await connect(host, port) as conn:
        with pytest.raises(BrokerProtocolError, match="malformed response"):
            await conn.fetch("t", 0, 0, 100)
        assert conn.closed


async def test_oversized_response_is_refused(raw_server):
    async def handler(stream):
        await read_request(stream)
        await stream.send_all(struct.pack(">ih", 1_000_000, 0))
        await trio.sleep_forever()

    host, port = await raw_server(handler)
    async with await connect(host, port, max_response_bytes=1000) as conn:
        with pytest.raises(ValueError, match="max_response_bytes"):
            await conn.fetch("t", 0, 0, 5000)  # refused locally, nothing sent
        with pytest.raises(ValueError, match="max_response_bytes"):
            await conn.multifetch([("t", 0, 0, 600), ("t", 1, 0, 600)])
        assert not conn.closed
        with pytest.raises(BrokerProtocolError, match="outside"):
            await conn.fetch("t", 0, 0, 500)


async def test_malformed_multifetch_payload(raw_server):
    async def handler(stream):
        await read_request(stream)
        payload = struct.pack(">ih", 50, 0)  # part claims 50 bytes, none follow
        await stream.send_all(struct.pack(">ih", 2 + len(payload), 0) + payload)
        await trio.sleep_forever()

    host, port = await raw_server(handler)
    async with await connect(host, port) as conn:
        with pytest.raises(BrokerProtocolError, match="malformed response payload"):
            await conn.multifetch([("t", 0, 0, 100)])
        assert conn.closed


async def test_wrong_number_of_parts_is_a_protocol_error(raw_server):
    async def handler(stream):
        await read_request(stream)
        payload = struct.pack(">ih", 2, 0) * 2
        await stream.send_all(struct.pack(">ih", 2 + len(payload), 0) + payload)
        await trio.sleep_forever()

    host, port = await raw_server(handler)
    async with await connect(host, port) as conn:
        with pytest.raises(BrokerProtocolError, match="2 parts in a response to 1"):
            await conn.multifetch([("t", 0, 0, 100)])


async def test_request_timeout_closes_the_connection(raw_server, autojump_clock):
    async def silent(stream):
        await read_request(stream)
        await trio.sleep_forever()

    host, port = await raw_server(silent)
    async with await connect(host, port, request_timeout_s=5) as conn:
        start = trio.current_time()
        with pytest.raises(BrokerTimeoutError):
            await conn.offsets("t", 0, -1, 1)
        assert trio.current_time() - start == pytest.approx(5)
        assert conn.closed
        with pytest.raises(BrokerConnectionError):
            await conn.offsets("t", 0, -1, 1)


async def test_cancelled_request_poisons_the_connection(raw_server, autojump_clock):
    async def slow(stream):
        await read_request(stream)
        await trio.sleep(10)
        await stream.send_all(struct.pack(">ihiq", 14, 0, 1, 77))  # the late OFFSETS answer
        await trio.sleep_forever()

    host, port = await raw_server(slow)
    async with await connect(host, port) as conn:
        with trio.move_on_after(1):
            await conn.offsets("t", 0, -1, 1)
        # The late answer must never be read as the response to a later request.
        assert conn.closed
        with pytest.raises(BrokerConnectionError, match="interrupted"):
            await conn.fetch("t", 0, 0, 100)


async def test_connect_failures():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connection refused
        with pytest.raises(BrokerConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
            await connect("127.0.0.1", port)


async def test_produce_after_broker_went_away(raw_server):
    async def hang_up(stream):
        await stream.aclose()

    host, port = await raw_server(hang_up)
    async with await connect(host, port) as conn:
        with pytest.raises(BrokerConnectionError):
            for _ in range(200):  # the first sends may land in the kernel buffer
                await conn.produce("t", 0, SET_A * 100)
                await trio.sleep(0.01)
        assert conn.closed


async def test_requests_are_the_exact_wire_requests():
    async with open_broker() as broker:
        async with await broker.connect() as conn:
            await conn.produce("t", 0, SET_A)
            await conn.fetch("t", 0, 0, 123)
    assert [type(r) for r in broker.requests] == [ProduceRequest, FetchRequest]
    assert broker.requests[1].part.max_bytes == 123
