"""The Kafka-format mode's options (spark-sql-kafka's names) and its micro-batch limit."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from trikafka.spark.kafka_options import (EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, is_kafka_mode,
                                          parse_kafka_options)
from trikafka.spark.kafka_source import limit_offsets, offsets_from_json_document, offsets_to_json_document
from trikafka.spark.options import OptionError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9093"}


def parse(streaming: bool = False, **options: str):  # type: ignore[no-untyped-def]
    return parse_kafka_options({**BASE, **options}, streaming=streaming)


def test_the_bootstrap_option_selects_the_mode_and_defaults_follow_spark_and_read_committed() -> None:
    assert is_kafka_mode({"Kafka.Bootstrap.Servers": "h:1"}) and not is_kafka_mode({"brokers": "0:h:1"})
    batch = parse(subscribe="a, b")
    assert batch.topics == ("a", "b") and batch.isolation_level == READ_COMMITTED
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    assert parse(streaming=True, subscribe="a").starting.default == LATEST
    assert parse(subscribe="a", **{"kafka.isolation.level": "read_uncommitted"}).isolation_level == READ_UNCOMMITTED
    assert parse(assign='{"t":[1,0],"u":[2]}').assign == (("t", 0), ("t", 1), ("u", 2))
    explicit = parse(subscribe="t", startingOffsets='{"t":{"0":23,"1":-2}}').starting
    assert dict(explicit.explicit) == {("t", 0): 23, ("t", 1): EARLIEST}


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t", "kafka.group.id": "g"}, "unknown option.*kafka.group.id"),
    ({}, "exactly one of 'subscribe', 'subscribePattern' and 'assign'"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of"),
    ({"assign": '{"t":0}'}, "assign must be a JSON object of partition lists"),
    ({"subscribePattern": "("}, "subscribePattern"),
    ({"subscribe": "t", "startingOffsets": "latest"}, r"latest \(-1\) is not allowed in a batch read"),
    ({"subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, r"earliest \(-2\) is not allowed"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "t/x: 1 is not an offset"),
    ({"subscribe": "t", "startingOffsets": "soon"}, "must be earliest, latest or JSON"),
    ({"subscribe": "t", "kafka.isolation.level": "serializable"}, "read_committed or read_uncommitted"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxoffsetspertrigger must be >= 1"),
])
def test_bad_options_fail_with_one_line_naming_them(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message) as caught:
        parse(**options)
    assert "\n" not in str(caught.value)


def test_streaming_offsets_documents_are_canonical_and_round_trip() -> None:
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    doc = offsets_to_json_document(offsets)
    assert list(doc) == ["a", "b"] and list(doc["b"]) == ["2", "10"]
    assert offsets_from_json_document(doc) == offsets


def test_max_offsets_per_trigger_is_shared_by_lag_and_always_moves() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    ends = {("t", 0): 30, ("t", 1): 190, ("t", 2): 5}
    assert limit_offsets(start, ends, 200) == ends
    limited = limit_offsets(start, ends, 40)
    assert limited == {("t", 0): 10, ("t", 1): 130, ("t", 2): 5}
    assert limit_offsets({("t", 0): 0, ("t", 1): 0}, {("t", 0): 3, ("t", 1): 4}, 1) == {("t", 0): 0, ("t", 1): 1}
