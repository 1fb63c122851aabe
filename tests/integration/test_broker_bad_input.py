"""Hostile and broken input against a live broker on loopback (spec §2, §9.7).

Every test ends by checking that the broker still serves a well-behaved
client and that the data stored before the bad input is unchanged: bad input
costs the sender its connection, never anyone else anything.
"""

from __future__ import annotations

import os
import struct

import pytest
import trio
import trio.testing

from trikafka.broker import serve
from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    decode_multifetch_payload,
    decode_produce_acked_payload,
    encode_request,
)

from tests.helpers.broker_testing import RawClient, assert_serves, frame, make_config, messages, snapshot

MAX_REQUEST_BYTES = 64 * 1024
CONTROL_TOPIC = "control"
CONTROL_DATA = messages(b"stored before the attack", b"and must survive it")


@pytest.fixture
async def broker(nursery, tmp_path):
    config = make_config(tmp_path, num_partitions=2, max_socket_request_bytes=MAX_REQUEST_BYTES)
    running = await nursery.start(serve, config)
    client = await RawClient.connect(running.port)
    response = await client.call(ProduceAckedRequest(-1, 10_000, (ProducePart(CONTROL_TOPIC, 0, CONTROL_DATA),)))
    assert decode_produce_acked_payload(response.payload)[0].error == ErrorCode.NO_ERROR
    await client.aclose()
    yield running
    running.shutdown()


@pytest.fixture
async def unharmed(broker):
    """After the test: the broker serves a new client and the control data is intact."""
    before = snapshot(broker.config.log_dir)
    yield
    await assert_serves(broker.port, CONTROL_TOPIC, CONTROL_DATA)
    after = snapshot(broker.config.log_dir)
    control_files = {name for name in before if name.startswith(CONTROL_TOPIC + "-")}
    assert {name: after.get(name) for name in control_files} == {name: before[name] for name in control_files}


def bad_crc(data: bytes) -> bytes:
    corrupted = bytearray(data)
    corrupted[-1] ^= 0x01
    return bytes(corrupted)


def string16(raw: bytes) -> bytes:
    return struct.pack(">h", len(raw)) + raw


# --------------------------------------------------------------------------- framing


@pytest.mark.parametrize("size", [0, -1, -(2**31), MAX_REQUEST_BYTES + 1, 2**31 - 1])
async def test_a_bad_size_prefix_closes_before_any_body_byte_is_sent(broker, unharmed, size):
    """Refused on the 4 prefix bytes alone: the broker never waits for (or holds) the body."""
    client = await RawClient.connect(broker.port)
    await client.send(struct.pack(">i", size))
    await client.assert_closed()


async def test_a_frame_of_exactly_the_maximum_size_is_read(broker, unharmed):
    client = await RawClient.connect(broker.port)
    body = encode_request(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000)))[4:]
    padded = body + b"\x00" * (MAX_REQUEST_BYTES - len(body))  # trailing bytes are ignored (§2)
    response = await client.call(frame(len(padded), padded))
    assert response.payload == CONTROL_DATA


@pytest.mark.parametrize("body", [
    b"\x00",  # size 1: no room for the request type
    b"\x00\x01",  # FETCH with no body
    b"\x00\x01" + string16(b"t")[:2],  # topic length but no topic
    b"\x00\x01" + string16(b"t") + b"\x00\x00\x00\x00" + b"\x00" * 8 + b"\x00\x00",  # maxSize cut short
    b"\x00\x01" + struct.pack(">h", -1) + b"\x00" * 16,  # null topic
    b"\x00\x01" + struct.pack(">h", 500) + b"t" * 20,  # topic runs past the frame
    b"\x00\x00" + string16(b"t") + struct.pack(">ii", 0, 1000) + b"\x00" * 10,  # messageSetSize too big
    b"\x00\x00" + string16(b"t") + struct.pack(">ii", 0, -5),  # negative messageSetSize
    b"\x00\x02" + struct.pack(">h", 3) + b"\x00" * 10,  # MULTIFETCH: fewer parts than counted
    b"\x00\x03" + struct.pack(">h", -1),  # MULTIPRODUCE count < 0
    b"\x00\x04" + string16(b"t") + b"\x00" * 5,  # OFFSETS cut short
    b"\x00\x64" + struct.pack(">hih", 1, 1000, 1),  # PRODUCE_ACKED: the counted part is missing
    b"\x00\x65" + struct.pack(">ii", 100, 1),  # FETCH_WAIT without its count
], ids=lambda b: b[:2].hex() + "-" + str(len(b)))
async def test_a_body_too_short_for_its_fields_closes(broker, unharmed, body):
    client = await RawClient.connect(broker.port)
    await client.send(frame(len(body), body))
    await client.assert_closed()


@pytest.mark.parametrize("request_type", [5, 6, 99, 105, 255, 1000, 32767, -1, -32768])
async def test_an_unknown_request_type_closes(broker, unharmed, request_type):
    client = await RawClient.connect(broker.port)
    body = struct.pack(">h", request_type) + b"\x00" * 30
    await client.send(frame(len(body), body))
    await client.assert_closed()


async def test_the_answers_before_a_bad_frame_are_sent_then_the_connection_closes(broker, unharmed):
    client = await RawClient.connect(broker.port)
    good = encode_request(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000)))
    await client.send(good + good + struct.pack(">ih", 6, 77) + b"\x00" * 4 + good)
    assert (await client.receive_frame()).payload == CONTROL_DATA
    assert (await client.receive_frame()).payload == CONTROL_DATA
    await client.assert_closed()  # nothing for the unknown type, nothing for the request after it


async def test_a_frame_cut_short_by_the_peer_is_dropped(broker, unharmed):
    client = await RawClient.connect(broker.port)
    whole = encode_request(ProduceRequest(ProducePart(CONTROL_TOPIC, 0, messages(b"never appended"))))
    await client.send(whole[:-3])
    await client.stream.send_eof()
    await client.assert_closed()
    assert broker.log_manager.get(CONTROL_TOPIC, 0).end_offset == len(CONTROL_DATA)


# --------------------------------------------------------------------------- messages


async def test_bad_crc_in_every_produce_form(broker, unharmed):
    bad = bad_crc(messages(b"corrupt"))
    for request in (ProduceRequest(ProducePart(CONTROL_TOPIC, 0, bad)),
                    MultiProduceRequest((ProducePart(CONTROL_TOPIC, 0, bad),)),
                    ProduceRequest(ProducePart(CONTROL_TOPIC, 0, messages(b"ok") + bad))):
        client = await RawClient.connect(broker.port)
        await client.send(request)
        await client.assert_closed()
    client = await RawClient.connect(broker.port)
    response = await client.call(ProduceAckedRequest(1, 1000, (ProducePart(CONTROL_TOPIC, 0, bad),)))
    assert decode_produce_acked_payload(response.payload)[0].error == ErrorCode.INVALID_MESSAGE
    assert broker.log_manager.get(CONTROL_TOPIC, 0).end_offset == len(CONTROL_DATA)


# --------------------------------------------------------------------------- topic names

HOSTILE_TOPICS = [
    b"..", b".", b"", b"/", b"../../etc", b"a/b", b"a\x00b", b"\x00", b"x" * 10_240, b"x" * 256,
    "caf\u00e9".encode(), b"\xff\xfe", b"a b", b"a\\b", b"t\n",
]


def produce_frame(topic: bytes, partition: int, message_set: bytes) -> bytes:
    body = b"\x00\x00" + string16(topic) + struct.pack(">ii", partition, len(message_set)) + message_set
    return frame(len(body), body)


def fetch_body(topic: bytes) -> bytes:
    return string16(topic) + struct.pack(">iqi", 0, 0, 1000)


@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=lambda t: repr(t[:12]) + f"/{len(t)}")
async def test_a_hostile_topic_name_creates_nothing_anywhere(broker, unharmed, tmp_path, topic):
    outside_before = sorted(os.listdir(tmp_path))
    stored_before = snapshot(broker.config.log_dir)

    producer = await RawClient.connect(broker.port)
    await producer.send(produce_frame(topic, 0, messages(b"evil")))
    await producer.assert_closed()  # §2: a produce to an invalid name closes

    offsets = await RawClient.connect(broker.port)
    body = b"\x00\x04" + string16(topic) + struct.pack(">iqi", 0, -1, 1)
    await offsets.send(frame(len(body), body))
    await offsets.assert_closed()

    client = await RawClient.connect(broker.port)
    body = b"\x00\x01" + fetch_body(topic)
    response = await client.call(frame(len(body), body))
    assert (response.error_code, response.payload) == (ErrorCode.UNKNOWN, b"")  # §5.2 first row

    body = b"\x00\x02" + struct.pack(">h", 2) + fetch_body(topic) + fetch_body(CONTROL_TOPIC.encode())
    response = await client.call(frame(len(body), body))
    assert decode_multifetch_payload(response.payload) == [(ErrorCode.UNKNOWN, b""), (ErrorCode.NO_ERROR, CONTROL_DATA)]

    body = b"\x00\x65" + struct.pack(">iih", 60_000, 1, 1) + fetch_body(topic)
    response = await client.call(frame(len(body), body))  # an error part answers at once
    assert decode_multifetch_payload(response.payload) == [(ErrorCode.UNKNOWN, b"")]

    part = string16(topic) + struct.pack(">ii", 0, len(messages(b"e"))) + messages(b"e")
    body = b"\x00\x64" + struct.pack(">hih", 1, 1000, 1) + part
    response = await client.call(frame(len(body), body))
    [result] = decode_produce_acked_payload(response.payload)
    assert (result.error, result.base_offset, result.next_offset) == (ErrorCode.INVALID_TOPIC, -1, -1)

    assert snapshot(broker.config.log_dir) == stored_before
    assert sorted(os.listdir(tmp_path)) == outside_before


# --------------------------------------------------------------------------- slow and idle clients


async def test_idle_half_sent_and_non_reading_clients_do_not_hold_up_others(broker, unharmed):
    idle = [await RawClient.connect(broker.port) for _ in range(50)]
    half = await RawClient.connect(broker.port)
    await half.send(encode_request(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000)))[:9])
    # A client that pipelines fetches and never reads: its socket buffers fill
    # and its connection parks in a send; nobody else notices.
    hog = await RawClient.connect(broker.port)
    big = messages(os.urandom(50_000))  # one request stays under MAX_REQUEST_BYTES
    setup = await RawClient.connect(broker.port)
    await setup.call(ProduceAckedRequest(-1, 10_000, (ProducePart("big", 0, big),)))
    with trio.move_on_after(1):  # bounded: stop once the hog's own buffers refuse more
        for _ in range(200):
            await hog.send(FetchRequest(FetchPart("big", 0, 0, len(big))))
    await trio.testing.wait_all_tasks_blocked()
    handled = [c.requests_handled for p in broker.processors for c in p.connections]
    assert any(0 < n < 200 for n in handled), handled  # the hog's connection is parked mid-way

    well_behaved = await RawClient.connect(broker.port)
    for _ in range(20):
        response = await well_behaved.call(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000)))
        assert response.payload == CONTROL_DATA

    # Byte by byte, interleaved with the good client's requests, still parses.
    drip = await RawClient.connect(broker.port)
    request = encode_request(MultiFetchRequest((FetchPart(CONTROL_TOPIC, 0, 0, 1000),)))
    for i in range(len(request)):
        await drip.send(request[i:i + 1])
        assert (await well_behaved.call(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 10)))).payload == CONTROL_DATA[:10]
    assert decode_multifetch_payload((await drip.receive_frame()).payload) == [(ErrorCode.NO_ERROR, CONTROL_DATA)]

    # The half-sent request completes whenever its sender gets round to it.
    await half.send(encode_request(FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000)))[9:])
    assert (await half.receive_frame()).payload == CONTROL_DATA
    assert broker.connection_count() >= len(idle) + 4
    for client in idle + [hog]:
        await client.aclose()


async def test_a_long_poll_does_not_block_other_connections(broker, unharmed):
    poller = await RawClient.connect(broker.port)
    await poller.send(FetchWaitRequest(60_000, 1, (FetchPart("quiet", 0, 0, 100),)))
    await trio.testing.wait_all_tasks_blocked()
    await assert_serves(broker.port, CONTROL_TOPIC, CONTROL_DATA)
    producer = await RawClient.connect(broker.port)
    await producer.call(ProduceAckedRequest(-1, 10_000, (ProducePart("quiet", 0, messages(b"wake")),)))
    response = await poller.receive_frame()
    assert decode_multifetch_payload(response.payload) == [(ErrorCode.NO_ERROR, messages(b"wake"))]
