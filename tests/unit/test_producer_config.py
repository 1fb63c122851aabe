"""Producer settings: 0.7 property names, broker lists, codecs, validation (spec §14.2)."""

from __future__ import annotations

import pytest

from trikafka.producer import ProducerConfig, config_from_properties, parse_broker_list, parse_codec
from trikafka.wire import Codec


def test_broker_lists_in_every_accepted_form():
    assert parse_broker_list("1:h1:9092,2:h2:9093") == ((1, "h1", 9092), (2, "h2", 9093))
    assert parse_broker_list("h1:9092, h2:9093") == ((0, "h1", 9092), (1, "h2", 9093))
    assert parse_broker_list([(5, "a", 1), ("b", 2), "c:3"]) == ((5, "a", 1), (1, "b", 2), (2, "c", 3))


@pytest.mark.parametrize("bad", ["", "h1", "1:h:2:3", "h:0", "h:70000", "1:h:1,1:g:2", [("a", "b", "c", "d")]])
def test_bad_broker_lists_are_refused(bad):
    with pytest.raises(ValueError):
        parse_broker_list(bad)


def test_codecs_by_name_number_or_enum():
    assert [parse_codec(c) for c in ("none", "GZIP", "snappy", "2", 1, Codec.NONE)] == [
        Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.SNAPPY, Codec.GZIP, Codec.NONE]
    with pytest.raises(ValueError):
        parse_codec("lz4")


def test_0_7_properties_map_to_keywords_with_units():
    config = config_from_properties({
        "broker.list": "0:h:9092", "producer.type": "async", "batch.size": "50", "queue.time": "250",
        "queue.size": "1000", "queue.enqueueTimeout.ms": "-1", "compression.codec": "1",
        "compressed.topics": "a, b", "connect.timeout.ms": "1500", "socket.timeout.ms": "20000",
        "max.message.size": "4096", "num.retries": "0", "buffer.size": "102400",
        "serializer.class": "kafka.serializer.StringEncoder",
    }, acks=-1)
    assert config.brokers == ((0, "h", 9092),)
    assert (config.producer_type, config.batch_size, config.queue_time_s, config.queue_size) == ("async", 50, 0.25, 1000)
    assert config.enqueue_timeout_s is None  # negative: block (0.7's "wait forever")
    assert (config.compression_codec, config.compressed_topics) == (Codec.GZIP, frozenset({"a", "b"}))
    assert (config.connect_timeout_s, config.request_timeout_s, config.max_message_size) == (1.5, 20.0, 4096)
    assert (config.num_retries, config.acks) == (0, -1)
    assert config_from_properties({"queue.enqueueTimeout.ms": "0"}, brokers="h:1").enqueue_timeout_s == 0
    with pytest.raises(ValueError, match="unknown producer property"):
        config_from_properties({"no.such.key": "1"})


def test_codec_for_honours_compressed_topics():
    everything = ProducerConfig(brokers="h:1", compression_codec="snappy")
    some = ProducerConfig(brokers="h:1", compression_codec="gzip", compressed_topics=["x"])
    assert (everything.codec_for("any"), some.codec_for("x"), some.codec_for("y")) == (
        Codec.SNAPPY, Codec.GZIP, Codec.NONE)


def test_static_partition_counts_per_topic():
    config = ProducerConfig(brokers="h:1", partitions_per_broker={"a": 4, "*": 2})
    assert (config.static_partitions("a"), config.static_partitions("b")) == (4, 2)
    assert ProducerConfig(brokers="h:1").static_partitions("a") is None


@pytest.mark.parametrize("bad", [
    dict(producer_type="fast"), dict(acks=2), dict(batch_size=0), dict(queue_size=-1),
    dict(num_retries=-1), dict(queue_time_s=-1), dict(enqueue_timeout_s=-0.5), dict(partitions_per_broker=0),
])
def test_invalid_settings_are_refused(bad):
    with pytest.raises(ValueError):
        ProducerConfig(brokers="h:1", **bad)
