"""METADATA and CREATE_TOPIC on the real broker (docs/protocol.md §9.4-§9.6), through the
Trio client, the blocking Spark client, and the raw protocol; and the FETCH probe
against a broker that refuses METADATA the way a plain 0.7 broker does."""

from __future__ import annotations

import os

import pytest
import trio

from trikafka.broker import serve
from trikafka.client import (
    BrokerAddress,
    ExtensionNotSupported,
    connect,
    partition_counts,
    probe_partition_count,
)
from trikafka.spark import blocking_client
from trikafka.wire import (
    CreateTopicRequest,
    ErrorCode,
    FetchPart,
    MetadataRequest,
    PartitionMetadata,
    ProducePart,
    RequestType,
    decode_create_topic_payload,
    decode_metadata_payload,
)

from tests.helpers.broker_testing import RawClient, make_config, messages

EXTENSIONS_OF_07_ONLY = (RequestType.METADATA, RequestType.CREATE_TOPIC)


async def start(nursery, tmp_path, **changes):
    settings = dict(num_partitions=2, topic_partition_count_map={"wide": 5}, max_message_size=4321)
    settings.update(changes)
    refuse = settings.pop("refuse_requests", ())
    config = make_config(tmp_path, **settings)
    return await nursery.start(lambda **kw: serve(config, refuse_requests=refuse, **kw))


async def produce(broker, topic, partition, *payloads):
    async with await connect("127.0.0.1", broker.port) as conn:
        [result] = await conn.produce_acked([ProducePart(topic, partition, messages(*payloads))])
        assert result.error == ErrorCode.NO_ERROR


async def test_metadata_lists_every_topic_with_its_partitions_and_the_broker(nursery, tmp_path):
    broker = await start(nursery, tmp_path, broker_id=3)
    await produce(broker, "b-topic", 1, b"x")
    await produce(broker, "wide", 0, b"y")
    async with await connect("127.0.0.1", broker.port) as conn:
        md = await conn.metadata()
    assert md.max_message_size == 4321
    assert md.brokers == (BrokerAddress(3, "127.0.0.1", broker.port),)
    assert [(t.topic, t.partition_count, t.error) for t in md.topics] == [
        ("b-topic", 2, ErrorCode.NO_ERROR), ("wide", 5, ErrorCode.NO_ERROR)]
    assert md.topic("wide").partitions[4] == PartitionMetadata(4, leader=3, leader_epoch=0, replicas=(3,), isr=(3,))


async def test_metadata_of_named_topics_reports_unknown_and_invalid_names(nursery, tmp_path):
    broker = await start(nursery, tmp_path)
    await produce(broker, "known", 0, b"x")
    client = await RawClient.connect(broker.port)
    frame = await client.call(MetadataRequest(("nosuch", "known", "a/b", "known")))
    md = decode_metadata_payload(frame.payload)
    assert [(t.topic, t.error, t.partition_count) for t in md.topics] == [
        ("nosuch", ErrorCode.UNKNOWN_TOPIC, 0), ("known", ErrorCode.NO_ERROR, 2),
        ("a/b", ErrorCode.INVALID_TOPIC, 0), ("known", ErrorCode.NO_ERROR, 2)]
    # Nothing was created for the names asked about.
    assert sorted(os.listdir(broker.config.log_dir)) == ["known-0"]
    await client.aclose()


async def test_create_topic_creates_every_partition_durably_and_survives_a_restart(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        async with await connect("127.0.0.1", broker.port) as conn:
            created = await conn.create_topic("events", 8)
            again = await conn.create_topic("events", 8)
            other = await conn.create_topic("events", 3)
            md = await conn.metadata(["events"])
            # FETCH and PRODUCE accept the new partitions right away (0.7 clients too).
            [past] = await conn.multifetch([FetchPart("events", 8, 0, 0)])
            await conn.produce("events", 7, messages(b"seven"))
        assert (created.error, created.partitions) == (ErrorCode.NO_ERROR, 8)
        assert (again.error, again.partitions) == (ErrorCode.NO_ERROR, 8)
        assert (other.error, other.partitions) == (ErrorCode.TOPIC_ALREADY_EXISTS, 8)
        assert md.topic("events").partition_count == 8 and past.error == ErrorCode.WRONG_PARTITION
        expected = sorted(f"events-{p}" for p in range(8))
        assert sorted(os.listdir(broker.config.log_dir)) == expected
        for p in range(8):
            assert os.listdir(os.path.join(broker.config.log_dir, f"events-{p}")) == ["0" * 20 + ".kafka"]
        broker.shutdown()
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        counts = await partition_counts("127.0.0.1", broker.port, ["events"])
        assert counts.topics["events"].count == 8
        broker.shutdown()


@pytest.mark.parametrize("topic,partitions,error", [
    ("a/b", 3, ErrorCode.INVALID_TOPIC),
    ("fine", 0, ErrorCode.INVALID_PARTITIONS),
    ("fine", 1025, ErrorCode.INVALID_PARTITIONS),
    ("wide", 4, ErrorCode.INVALID_PARTITIONS),  # below its topic.partition.count.map entry (5)
])
async def test_create_topic_refusals_create_nothing(nursery, tmp_path, topic, partitions, error):
    broker = await start(nursery, tmp_path)
    client = await RawClient.connect(broker.port)
    result = decode_create_topic_payload((await client.call(CreateTopicRequest(topic, partitions))).payload)
    assert (result.error, result.partitions) == (error, -1)
    assert os.listdir(broker.config.log_dir) == []
    # The connection stays usable.
    assert await client.offsets("fine", 0, -1) == [0]
    await client.aclose()


async def test_the_blocking_client_shares_the_answers(nursery, tmp_path):
    broker = await start(nursery, tmp_path)
    await produce(broker, "wide", 2, b"z")

    def blocking():
        with blocking_client.BrokerConnection("127.0.0.1", broker.port) as conn:
            md = conn.metadata()
            probed = blocking_client.probe_partition_count(conn, "wide")
        return md, probed, blocking_client.partition_counts("127.0.0.1", broker.port, ["wide", "gone"])

    md, probed, counts = await trio.to_thread.run_sync(blocking)
    assert [(t.topic, t.partition_count) for t in md.topics] == [("wide", 5)]
    assert (probed.count, probed.exists) == (5, None)
    assert counts.max_message_size == 4321
    assert (counts.topics["wide"].count, counts.topics["gone"].error) == (5, ErrorCode.UNKNOWN_TOPIC)


async def test_against_a_broker_without_metadata_the_probe_finds_the_counts(nursery, tmp_path):
    broker = await start(nursery, tmp_path, refuse_requests=EXTENSIONS_OF_07_ONLY,
                         topic_partition_count_map={"wide": 70})
    async with await connect("127.0.0.1", broker.port) as conn:
        with pytest.raises(ExtensionNotSupported):
            await conn.metadata()
    counts = await partition_counts("127.0.0.1", broker.port, ["wide", "plain", "a/b"])
    assert counts.metadata is None and counts.max_message_size is None
    assert {t: (r.count, r.error, r.exists) for t, r in counts.topics.items()} == {
        "wide": (70, ErrorCode.NO_ERROR, None),  # spans two probe batches
        "plain": (2, ErrorCode.NO_ERROR, None),
        "a/b": (0, ErrorCode.INVALID_TOPIC, False),
    }
    assert os.listdir(broker.config.log_dir) == []  # the probe created nothing

    def blocking():
        return blocking_client.partition_counts("127.0.0.1", broker.port, ["wide"])

    assert (await trio.to_thread.run_sync(blocking)).topics["wide"].count == 70
    async with await connect("127.0.0.1", broker.port) as conn:
        assert (await probe_partition_count(conn, "plain")).count == 2


async def test_a_raw_snappy_wrapper_is_accepted_and_served_byte_for_byte(nursery, tmp_path):
    """Kafka 0.7.2 accepts a snappy wrapper whose payload is one raw block; so does trikafka."""
    import cramjam

    from trikafka.wire import Codec, encode_entry, iter_messages

    broker = await start(nursery, tmp_path)
    inner = messages(b"from a third-party producer", b"second", magic=1)
    wrapper = encode_entry(bytes(cramjam.snappy.compress_raw(inner)), magic=1, codec=Codec.SNAPPY)
    async with await connect("127.0.0.1", broker.port) as conn:
        [result] = await conn.produce_acked([ProducePart("raw", 0, wrapper)])
        assert (result.error, result.next_offset) == (ErrorCode.NO_ERROR, len(wrapper))
        fetched = await conn.fetch("raw", 0, 0, 1 << 16)
    assert fetched.data == wrapper
    assert [m.payload for m in iter_messages(fetched.data)] == [b"from a third-party producer", b"second"]


async def test_a_broker_closing_on_metadata_is_probed_instead(nursery):
    from trikafka.testing import open_broker

    # A plain 0.7 broker closes the connection on METADATA; the probe then asks OFFSETS.
    async with open_broker(num_partitions=3, refuse_requests=[RequestType.METADATA]) as broker:
        counts = await partition_counts(broker.host, broker.port, ["t"])
    assert counts.metadata is None and counts.topics["t"].count == 3  # None: METADATA was refused
