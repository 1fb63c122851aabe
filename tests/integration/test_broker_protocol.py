"""The 0.7 protocol against the in-process broker on loopback (spec §2-§7, §9.6).

Every test starts a real broker with ``nursery.start(serve, config)`` on port
0.  Produces have no response, so a test that must know a produce was handled
sends an OFFSETS on the same connection and waits for its answer (responses
and handling are in request order, §2), then flushes explicitly.
"""

from __future__ import annotations

import os
import random

import pytest
import trio

from trikafka.broker import serve
from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProducePart,
    ProduceRequest,
    decode_multifetch_payload,
    decode_offsets_payload,
    encode_entry,
    encode_request,
)

from tests.helpers.broker_testing import RawClient, frame, make_config, messages, snapshot


@pytest.fixture
async def broker(nursery, tmp_path):
    running = await nursery.start(serve, make_config(tmp_path, num_partitions=2))
    yield running
    running.shutdown()


async def produce_and_flush(client: RawClient, broker, part: ProducePart) -> None:
    await client.send(ProduceRequest(part))
    await client.offsets(part.topic, 0, -1)  # the produce was handled before this answer
    await broker.flush_all()


async def fetch(client: RawClient, topic: str, partition: int, offset: int, max_bytes: int):
    frame_ = await client.call(FetchRequest(FetchPart(topic, partition, offset, max_bytes)))
    return frame_.error_code, frame_.payload


async def test_produce_has_no_response_and_data_is_fetched_back_byte_for_byte(broker):
    client = await RawClient.connect(broker.port)
    data = messages(b"hello", b"world") + messages(b"magic one", magic=1)
    await produce_and_flush(client, broker, ProducePart("t", 0, data))
    # The first frame on the wire after the produce is the fetch's: the produce wrote nothing.
    assert await fetch(client, "t", 0, 0, 1 << 20) == (ErrorCode.NO_ERROR, data)
    assert await fetch(client, "t", 0, len(data), 100) == (ErrorCode.NO_ERROR, b"")


async def test_responses_come_back_in_request_order_when_pipelined(broker):
    client = await RawClient.connect(broker.port)
    first, second = messages(b"a" * 10), messages(b"b" * 20)
    await produce_and_flush(client, broker, ProducePart("t", 0, first))
    await produce_and_flush(client, broker, ProducePart("t", 1, second))
    pipelined = [
        FetchRequest(FetchPart("t", 1, 0, 1000)),
        ProduceRequest(ProducePart("t", 0, messages(b"x"))),
        OffsetsRequest("t", 0, -2, 5),
        FetchRequest(FetchPart("t", 0, 0, 1000)),
        MultiFetchRequest((FetchPart("t", 0, 0, 1000), FetchPart("t", 1, 0, 1000))),
    ]
    await client.send(b"".join(encode_request(r) for r in pipelined))
    frames = [await client.receive_frame() for _ in range(4)]
    assert frames[0].payload == second
    assert frames[1].payload == b"\x00\x00\x00\x01" + (0).to_bytes(8, "big")
    assert frames[2].payload == first  # the pipelined produce is not visible yet (no flush)
    assert decode_multifetch_payload(frames[3].payload) == [(ErrorCode.NO_ERROR, first), (ErrorCode.NO_ERROR, second)]


async def test_data_is_invisible_until_flushed(broker):
    client = await RawClient.connect(broker.port)
    data = messages(b"pending")
    await client.send(ProduceRequest(ProducePart("t", 0, data)))
    assert await client.offsets("t", 0, -1) == [0]
    assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, b"")  # offset 0 == E
    assert (await fetch(client, "t", 0, 1, 1000))[0] == ErrorCode.OFFSET_OUT_OF_RANGE  # beyond E
    await broker.flush_all()
    assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, data)
    assert await client.offsets("t", 0, -1) == [len(data), 0]


async def test_fetch_error_table_of_section_5_2(broker):
    client = await RawClient.connect(broker.port)
    data = messages(b"0123456789")
    await produce_and_flush(client, broker, ProducePart("t", 0, data))
    cases = [
        (("bad/name", 0, 0, 100), ErrorCode.UNKNOWN),
        (("..", 0, 0, 100), ErrorCode.UNKNOWN),
        (("t", 2, 0, 100), ErrorCode.WRONG_PARTITION),
        (("t", -1, 0, 100), ErrorCode.WRONG_PARTITION),
        (("t", 1, 12345, 100), ErrorCode.NO_ERROR),  # valid partition, no log: 0 for any offset
        (("never", 0, -5, -5), ErrorCode.NO_ERROR),
        (("t", 0, len(data) + 1, 100), ErrorCode.OFFSET_OUT_OF_RANGE),
        (("t", 0, -1, 100), ErrorCode.OFFSET_OUT_OF_RANGE),
        (("t", 0, len(data) + 1, -1), ErrorCode.OFFSET_OUT_OF_RANGE),  # range is checked first
        (("t", 0, 0, -1), ErrorCode.INVALID_FETCH_SIZE),
        (("t", 0, len(data), 100), ErrorCode.NO_ERROR),  # at E: empty
        (("t", 0, 0, 0), ErrorCode.NO_ERROR),  # maxSize 0: empty
    ]
    for (topic, partition, offset, max_bytes), code in cases:
        assert await fetch(client, topic, partition, offset, max_bytes) == (code, b""), (topic, partition, offset)
    # A fetch may cut the last entry and may start mid-set; it never creates a log.
    assert await fetch(client, "t", 0, 0, 7) == (ErrorCode.NO_ERROR, data[:7])
    assert not os.path.exists(os.path.join(broker.config.log_dir, "t-1"))
    assert not os.path.exists(os.path.join(broker.config.log_dir, "never-0"))


async def test_multifetch_parts_answer_independently_and_count_zero(broker):
    client = await RawClient.connect(broker.port)
    data = messages(b"abc")
    await produce_and_flush(client, broker, ProducePart("t", 0, data))
    empty = await client.call(MultiFetchRequest(()))
    assert (empty.error_code, empty.payload) == (ErrorCode.NO_ERROR, b"")  # 00 00 00 02 00 00
    parts = (FetchPart("t", 0, 0, 100), FetchPart("t", 0, 0, 100), FetchPart("x/y", 0, 0, 10),
             FetchPart("t", 9, 0, 10), FetchPart("t", 0, 999, 10), FetchPart("t", 0, 0, -3))
    response = await client.call(MultiFetchRequest(parts))
    assert response.error_code == ErrorCode.NO_ERROR
    assert decode_multifetch_payload(response.payload) == [
        (ErrorCode.NO_ERROR, data), (ErrorCode.NO_ERROR, data), (ErrorCode.UNKNOWN, b""),
        (ErrorCode.WRONG_PARTITION, b""), (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
        (ErrorCode.INVALID_FETCH_SIZE, b""),
    ]


async def test_multifetch_negative_count_closes(broker):
    client = await RawClient.connect(broker.port)
    await client.send(frame(4, b"\x00\x02\xff\xff"))
    await client.assert_closed()


async def test_offsets_rules_of_section_5_5(broker):
    client = await RawClient.connect(broker.port)
    assert await client.offsets("fresh", 0, -1, 0) == [0]  # no log: [0] whatever maxNumOffsets
    assert await client.offsets("fresh", 1, -2, -7) == [0]
    assert await client.offsets("fresh", 0, 1234, 10) == []
    data = messages(b"12345")
    await produce_and_flush(client, broker, ProducePart("t", 0, data))
    assert await client.offsets("t", 0, -1, 1) == [len(data)]
    assert await client.offsets("t", 0, -1, 10) == [len(data), 0]
    assert await client.offsets("t", 0, -2, 10) == [0]
    assert await client.offsets("t", 0, -3, 10) == []  # only -1 and -2 are special
    assert not os.path.exists(os.path.join(broker.config.log_dir, "fresh-0"))


@pytest.mark.parametrize("request_", [
    OffsetsRequest("bad/topic", 0, -1, 1),
    OffsetsRequest("t", 2, -1, 1),
    OffsetsRequest("t", -1, -1, 1),
    OffsetsRequest("t", 0, -1, -1),  # maxNumOffsets < 0 on an existing log
])
async def test_offsets_that_close_the_connection(broker, request_):
    setup = await RawClient.connect(broker.port)
    await produce_and_flush(setup, broker, ProducePart("t", 0, messages(b"x")))
    client = await RawClient.connect(broker.port)
    await client.send(request_)
    await client.assert_closed()
    assert await setup.offsets("t", 0, -1) == [len(messages(b"x")), 0]  # others keep being served


@pytest.mark.parametrize("part", [
    ProducePart("bad/topic", 0, messages(b"x")),
    ProducePart("..", 0, messages(b"x")),
    ProducePart("a" * 256, 0, messages(b"x")),
    ProducePart("t", 2, messages(b"x")),
    ProducePart("t", -2, messages(b"x")),
])
async def test_produce_with_bad_topic_or_partition_closes_and_creates_nothing(broker, part):
    before = snapshot(broker.config.log_dir)
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(part))
    await client.assert_closed()
    assert snapshot(broker.config.log_dir) == before
    assert sorted(os.listdir(broker.config.log_dir)) == []


async def test_invalid_message_closes_but_the_log_is_created_first(broker):
    bad = bytearray(messages(b"payload"))
    bad[-1] ^= 0xFF  # CRC mismatch
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(ProducePart("t", 1, bytes(bad))))
    await client.assert_closed()
    # §5.1 step 3: the log exists (empty) even though the set was rejected.
    assert snapshot(broker.config.log_dir) == {os.path.join("t-1", "0" * 20 + ".kafka"): b""}


async def test_empty_produce_creates_the_log(broker):
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(ProducePart("empty", 0, b"")))
    assert await client.offsets("empty", 0, -1) == [0]
    assert os.path.isdir(os.path.join(broker.config.log_dir, "empty-0"))


async def test_oversized_message_drops_the_whole_set_and_keeps_the_connection(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, max_message_size=100))
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(ProducePart("t", 0, messages(b"ok", b"z" * 101))))
    await produce_and_flush(client, broker, ProducePart("t", 0, messages(b"z" * 100)))
    assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, messages(b"z" * 100))
    broker.shutdown()


async def test_truncated_tail_is_dropped_silently(broker):
    client = await RawClient.connect(broker.port)
    whole = messages(b"first", b"second")
    await produce_and_flush(client, broker, ProducePart("t", 0, whole + encode_entry(b"third", magic=0)[:-2]))
    assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, whole)


async def test_truncated_first_entry_closes(broker):
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(ProducePart("t", 0, encode_entry(b"cut", magic=0)[:-1])))
    await client.assert_closed()


async def test_multiproduce_closing_part_aborts_later_parts_only(broker):
    bad = bytearray(messages(b"bad"))
    bad[-1] ^= 1
    client = await RawClient.connect(broker.port)
    await client.send(MultiProduceRequest((
        ProducePart("t", 0, messages(b"kept")),
        ProducePart("t", 1, bytes(bad)),
        ProducePart("later", 0, messages(b"lost")),
    )))
    await client.assert_closed()
    await broker.flush_all()
    other = await RawClient.connect(broker.port)
    assert await fetch(other, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, messages(b"kept"))
    assert not os.path.exists(os.path.join(broker.config.log_dir, "later-0"))


async def test_multiproduce_oversized_part_does_not_affect_the_others(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, max_message_size=10))
    client = await RawClient.connect(broker.port)
    await client.send(MultiProduceRequest((
        ProducePart("t", 0, messages(b"small")),
        ProducePart("t", 0, messages(b"far too large")),
        ProducePart("t", 0, messages(b"after")),
    )))
    assert await client.offsets("t", 0, -2) == [0]
    await broker.flush_all()
    assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, messages(b"small") + messages(b"after"))
    broker.shutdown()


async def test_partition_minus_one_picks_a_random_partition_once_per_request(nursery, tmp_path):
    rng = random.Random(7)
    expected = random.Random(7)
    broker = await nursery.start(lambda **kw: serve(make_config(tmp_path, num_partitions=5), rng=rng, **kw))
    client = await RawClient.connect(broker.port)
    chosen = [expected.randrange(5) for _ in range(6)]
    for i in range(6):
        await client.send(ProduceRequest(ProducePart("r", -1, messages(b"m%d" % i))))
    await client.offsets("r", 0, -1)
    await broker.flush_all()
    for partition in range(5):
        code, data = await fetch(client, "r", partition, 0, 1000)
        want = b"".join(messages(b"m%d" % i) for i, p in enumerate(chosen) if p == partition)
        assert (code, data) == (ErrorCode.NO_ERROR, want)
    broker.shutdown()


async def test_topic_partition_count_map_overrides_num_partitions(nursery, tmp_path):
    config = make_config(tmp_path, num_partitions=1, topic_partition_count_map={"wide": 4})
    broker = await nursery.start(serve, config)
    client = await RawClient.connect(broker.port)
    assert await fetch(client, "wide", 3, 0, 10) == (ErrorCode.NO_ERROR, b"")
    assert await fetch(client, "wide", 4, 0, 10) == (ErrorCode.WRONG_PARTITION, b"")
    assert await fetch(client, "narrow", 1, 0, 10) == (ErrorCode.WRONG_PARTITION, b"")
    await client.send(ProduceRequest(ProducePart("wide", 3, messages(b"x"))))
    assert await client.offsets("wide", 3, -1) == [0]
    broker.shutdown()


async def test_message_count_triggers_a_flush(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path, log_flush_interval=3,
                                                    log_default_flush_scheduler_interval_ms=3_600_000))
    client = await RawClient.connect(broker.port)
    await client.send(ProduceRequest(ProducePart("t", 0, messages(b"1", b"2"))))
    assert await client.offsets("t", 0, -1) == [0]
    log = broker.log_manager.get("t", 0)
    await broker.flusher.wait_idle(log)
    assert log.visible_end == 0  # two messages: below log.flush.interval
    await client.send(ProduceRequest(ProducePart("t", 0, messages(b"3"))))
    await client.offsets("t", 0, -1)
    await broker.flusher.wait_idle(log)  # the count rule asked for a flush; no explicit one here
    assert log.visible_end == len(messages(b"1", b"2", b"3"))
    broker.shutdown()


async def test_clean_shutdown_writes_the_marker_and_restart_serves_the_data(tmp_path):
    config = make_config(tmp_path)
    data = messages(b"durable")
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        client = await RawClient.connect(broker.port)
        await client.send(ProduceRequest(ProducePart("t", 0, data)))
        await client.offsets("t", 0, -1)
        broker.shutdown()  # no explicit flush: shutdown flushes
    assert broker.clean_shutdown is True
    assert os.path.exists(os.path.join(config.log_dir, ".kafka_cleanshutdown"))
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        assert broker.log_manager.recovered is False
        client = await RawClient.connect(broker.port)
        assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, data)
        broker.shutdown()


async def test_shutdown_finishes_received_requests_closes_idle_ones_and_stops_accepting(tmp_path):
    config = make_config(tmp_path)
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        client = await RawClient.connect(broker.port)
        idle = await RawClient.connect(broker.port)
        await idle.offsets("t", 0, -1)
        # Pipelined: a produce and a fetch already received when shutdown begins.
        data = messages(b"in flight")
        await client.send(encode_request(ProduceRequest(ProducePart("t", 0, data)))
                          + encode_request(OffsetsRequest("t", 0, -1, 1)))
        assert decode_offsets_payload((await client.receive_frame()).payload) == [0]
        broker.shutdown()
        await idle.assert_closed()  # an idle connection is closed at once
        await client.assert_closed()
    assert broker.clean_shutdown is True
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", broker.port)
    async with trio.open_nursery() as nursery:  # the produce received before shutdown was kept
        broker = await nursery.start(serve, config)
        client = await RawClient.connect(broker.port)
        assert await fetch(client, "t", 0, 0, 1000) == (ErrorCode.NO_ERROR, data)
        broker.shutdown()
