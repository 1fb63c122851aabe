"""Hypothesis fuzz of the request stream against one live broker.

Each example opens a connection, sends random or mutated frames (valid
requests with bytes flipped, cut, spliced or size prefixes changed, and
plain noise), half-closes, and reads whatever comes back.  Afterwards:

* whatever the broker wrote is a whole number of well-formed response frames;
* a well-behaved client on a long-lived connection, and one on a new
  connection, are still served the control data byte for byte;
* every file stored before the example still begins with its old bytes
  (logs only grow), and the control partition is unchanged.

Hypothesis drives the examples from a worker thread and runs each one on the
broker's Trio loop with ``trio.from_thread.run``, so all examples share one
broker, as a real one would share its clients.
"""

from __future__ import annotations

import struct

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from trikafka.broker import serve
from trikafka.wire import (
    NEED_DATA,
    Codec,
    ErrorCode,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    ResponseReader,
    build_message_set,
    decode_produce_acked_payload,
    encode_request,
)

from tests.helpers.broker_testing import RawClient, make_config, messages, snapshot

CONTROL_TOPIC = "control-data"
CONTROL_DATA = messages(b"kept", b"safe", magic=1)
MAX_REQUEST_BYTES = 16 * 1024
# A fuzzed FETCH_WAIT may ask to wait long; the example stops listening after
# this and drops the connection (the broker answers the poll at its deadline).
DRAIN_LIMIT_S = 2.0

topics = st.sampled_from(["fz", "fz2", "..", "a/b", "", "x" * 300])
partitions = st.integers(-2, 3)
payloads = st.lists(st.binary(max_size=40), max_size=4)
message_sets = st.builds(
    lambda ps, magic, codec: build_message_set(ps, magic=magic, codec=codec if magic == 1 else Codec.NONE),
    payloads, st.sampled_from([0, 1]), st.sampled_from([Codec.NONE, Codec.GZIP]),
)
produce_parts = st.builds(ProducePart, topics, partitions, message_sets)
fetch_parts = st.builds(FetchPart, topics, partitions, st.integers(-5, 200), st.integers(-5, 500))
requests = st.one_of(
    st.builds(ProduceRequest, produce_parts),
    st.builds(FetchRequest, fetch_parts),
    st.builds(MultiFetchRequest, st.lists(fetch_parts, max_size=3).map(tuple)),
    st.builds(MultiProduceRequest, st.lists(produce_parts, max_size=3).map(tuple)),
    st.builds(OffsetsRequest, topics, partitions, st.sampled_from([-1, -2, -3, 0, 2**40]), st.integers(-2, 5)),
    st.builds(ProduceAckedRequest, st.sampled_from([1, -1, 0, 2]), st.integers(0, 50),
              st.lists(produce_parts, max_size=3).map(tuple)),
    st.builds(FetchWaitRequest, st.integers(0, 50), st.integers(0, 100), st.lists(fetch_parts, max_size=3).map(tuple)),
)


@st.composite
def mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    """``frame`` with one of: bytes flipped, a cut, an insertion, or a new size prefix."""
    data = bytearray(frame)
    kind = draw(st.sampled_from(["flip", "cut", "insert", "resize", "none"]))
    if kind == "flip" and data:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
    elif kind == "cut":
        del data[draw(st.integers(0, len(data))):]
    elif kind == "insert":
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "resize" and len(data) >= 4:
        data[:4] = struct.pack(">i", draw(st.one_of(st.integers(-3, 64), st.integers(-(2**31), 2**31 - 1))))
    return bytes(data)


frames = st.one_of(
    requests.map(encode_request).flatmap(mutated),
    st.binary(max_size=64),
    st.builds(lambda body: struct.pack(">i", len(body)) + body, st.binary(max_size=64)),
)
streams = st.lists(frames, min_size=1, max_size=4).map(b"".join)


async def send_and_drain(port: int, stream: bytes) -> bytes:
    """Send ``stream``, half-close, and return everything the broker wrote."""
    client = await trio.open_tcp_stream("127.0.0.1", port)
    received = bytearray()
    try:
        with trio.move_on_after(DRAIN_LIMIT_S):
            try:
                await client.send_all(stream)
                await client.send_eof()
            except trio.BrokenResourceError:
                pass  # closed by the broker mid-send: fine, read what it wrote
            while True:
                try:
                    data = await client.receive_some(65536)
                except trio.BrokenResourceError:
                    break  # reset: the broker closed with our bytes unread
                if not data:
                    break
                received += data
    finally:
        await trio.aclose_forcefully(client)
    return bytes(received)


def assert_whole_responses(data: bytes) -> None:
    reader = ResponseReader(1 << 20)
    reader.receive_data(data)
    while reader.next_frame() is not NEED_DATA:
        pass
    assert reader.buffered_bytes == 0, f"a partial response frame: {data[-40:]!r}"


def assert_only_grew(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    for name, old in before.items():
        assert name in after, f"{name} disappeared"
        assert after[name][:len(old)] == old, f"{name} was rewritten"
    control = [n for n in before if n.startswith(CONTROL_TOPIC + "-")]
    assert control and all(after[n] == before[n] for n in control)


async def test_fuzzed_request_streams_never_hurt_the_broker_or_its_data(nursery, tmp_path):
    config = make_config(tmp_path, num_partitions=2, max_socket_request_bytes=MAX_REQUEST_BYTES)
    broker = await nursery.start(serve, config)
    steady = await RawClient.connect(broker.port)
    response = await steady.call(ProduceAckedRequest(-1, 10_000, (ProducePart(CONTROL_TOPIC, 0, CONTROL_DATA),)))
    assert decode_produce_acked_payload(response.payload)[0].error == ErrorCode.NO_ERROR
    control_fetch = FetchRequest(FetchPart(CONTROL_TOPIC, 0, 0, 1000))

    async def one_example(stream: bytes) -> None:
        before = snapshot(config.log_dir)
        assert_whole_responses(await send_and_drain(broker.port, stream))
        assert (await steady.call(control_fetch)).payload == CONTROL_DATA
        fresh = await RawClient.connect(broker.port)
        assert (await fresh.call(control_fetch)).payload == CONTROL_DATA
        await fresh.aclose()
        assert_only_grew(before, snapshot(config.log_dir))

    examples_run = []

    @given(streams)
    def fuzz(stream: bytes) -> None:
        trio.from_thread.run(one_example, stream)
        examples_run.append(len(stream))

    await trio.to_thread.run_sync(fuzz)
    assert len(examples_run) >= settings().max_examples // 2  # the examples really ran
    broker.shutdown()
