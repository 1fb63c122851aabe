"""Driver-side logic without a JVM: options, offset documents, batch plans, stream offsets."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from trikafka.spark.cluster import ClusterConfigError, parse_broker_list
from trikafka.spark.offsets import (
    OffsetSpecError,
    PartitionKey,
    offsets_from_json,
    offsets_to_json,
)
from trikafka.spark.options import OptionError, parse_options
from trikafka.spark.planning import PlanningError, plan_batch
from trikafka.spark.stream import TrikafkaStreamReader

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]


def test_offset_documents_are_canonical_and_round_trip():
    offsets = {
        PartitionKey("b", 10, 0): 5, PartitionKey("a", 2, 1): 7, PartitionKey("a", 2, 0): 1 << 62,
        PartitionKey("b", 9, 3): 0,
    }
    text = offsets_to_json(offsets)
    assert text == '{"a":{"2-0":4611686018427387904,"2-1":7},"b":{"9-3":0,"10-0":5}}'
    assert offsets_from_json(text) == offsets
    assert offsets_to_json(dict(reversed(list(offsets.items())))) == text


@pytest.mark.parametrize("text, message", [
    ("[1]", "JSON object"),
    ('{"t": {"0-0": -1}}', "must be >= 0"),
    ('{"t": {"zero": 1}}', "<broker>-<partition>"),
    ('{"bad/topic": {"0-0": 1}}', "invalid topic"),
    ('{"t": {"0-0": 1.5}}', "integer"),
    ("{", "not valid JSON"),
])
def test_bad_offset_documents_are_rejected(text, message):
    with pytest.raises(OffsetSpecError, match=message):
        offsets_from_json(text)


def test_broker_lists_parse_and_reject_garbage():
    brokers = parse_broker_list(" 0:127.0.0.1:9092, 1:localhost:9093 ")
    assert [(b.broker_id, b.host, b.port) for b in brokers.values()] == [(0, "127.0.0.1", 9092), (1, "localhost", 9093)]
    for bad in ("", "0:h", "0:h:99999", "0:h:1,0:h:2", "x:h:1"):
        with pytest.raises(ClusterConfigError):
            parse_broker_list(bad)


def test_options_defaults_and_case_insensitivity():
    opts = parse_options({"BROKERS": "0:127.0.0.1:1", "Topics": "a, b,a", "MAXBYTESPERTRIGGER": "100"})
    assert opts.topics == ("a", "b")
    assert opts.starting.kind == "earliest" and opts.ending.kind == "latest"
    assert (opts.fetch_bytes, opts.max_bytes_per_trigger, opts.fail_on_data_loss) == (1 << 20, 100, True)
    explicit = parse_options({"brokers": "0:h:1", "topics": "a", "startingOffsets": '{"a": {"0-0": 42}}'})
    assert explicit.starting.explicit_offsets == {PartitionKey("a", 0, 0): 42}


@pytest.mark.parametrize("options, message", [
    ({"topics": "a"}, "'brokers'"),
    ({"brokers": "0:h:1", "zookeeper": "h:2181", "topics": "a"}, "only one"),
    ({"brokers": "0:h:1", "topicPattern": "a.*"}, "needs the registry"),
    ({"zookeeper": "h:2181", "topicPattern": "("}, "topicPattern"),
    ({"brokers": "0:h:1", "topics": "a", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"brokers": "0:h:1", "topics": "a", "endingOffsets": "group:g"}, "does not accept a consumer group"),
    ({"brokers": "0:h:1", "topics": "a", "fetchSize": "3"}, "fetchsize must be >= 10"),
    ({"brokers": "0:h:1", "topics": "a", "maxFetchSize": "10", "fetchSize": "100"}, "maxfetchsize"),
    ({"brokers": "0:h:1", "topics": "a", "failOnDataLoss": "maybe"}, "true or false"),
    ({"brokers": "0:h:1", "topics": "a", "commitToGroup": "g"}, "zookeeper"),
])
def test_bad_options_are_rejected(options, message):
    with pytest.raises(OptionError, match=message):
        parse_options(options)


def _options(broker_cluster, topic, **extra):
    raw = {"brokers": broker_cluster.broker_list, "topics": topic, "partitionsPerBroker": "2"}
    raw.update({k: str(v) for k, v in extra.items()})
    return parse_options(raw)


def test_batch_plan_has_one_range_per_partition_with_data(broker_cluster, unique_topic):
    _, end_a = broker_cluster.produce_payloads(unique_topic, 0, 1, [b"x"] * 3)
    _, end_b = broker_cluster.produce_payloads(unique_topic, 1, 0, [b"y"] * 4)
    ranges = plan_batch(_options(broker_cluster, unique_topic))
    assert [(r.key.broker, r.key.partition, r.start, r.end) for r in ranges] == [(0, 1, 0, end_a), (1, 0, 0, end_b)]
    with pytest.raises(PlanningError, match="beyond the visible end"):
        plan_batch(_options(broker_cluster, unique_topic, endingOffsets=json.dumps({unique_topic: {"0-1": end_a + 9}})))


def test_starting_offsets_in_the_shape_of_sparks_kafka_source(broker_cluster, unique_topic):
    """``{"t": {"1": N}}`` names partition 1 where one broker has it; where two do, the error says how."""
    with broker_cluster.connect(0) as conn:
        assert conn.create_topic(unique_topic, 3).partitions == 3
    _, end_a = broker_cluster.produce_payloads(unique_topic, 0, 2, [b"x"] * 3)
    first, _ = broker_cluster.produce_payloads(unique_topic, 0, 2, [b"z"])
    raw = {"brokers": broker_cluster.broker_list, "topics": unique_topic}
    ranges = plan_batch(parse_options({**raw, "startingOffsets": json.dumps({unique_topic: {"2": first}})}))
    assert [(r.key.broker, r.key.partition, r.start) for r in ranges] == [(0, 2, first)]
    with broker_cluster.connect(1) as conn:
        assert conn.create_topic(unique_topic, 2).partitions == 2
    with pytest.raises(OffsetSpecError, match=r"partition 0 of topic .* is on brokers 0, 1: name it"):
        plan_batch(parse_options({**raw, "startingOffsets": json.dumps({unique_topic: {"0": 0}})}))


def test_without_partitions_per_broker_every_partition_each_broker_reports_is_read(broker_cluster, unique_topic):
    # One broker gets the topic with more partitions than its num.partitions (2): a
    # fixed default would silently read only part of the topic.
    with broker_cluster.connect(0) as conn:
        assert conn.create_topic(unique_topic, 5).partitions == 5
    _, end_a = broker_cluster.produce_payloads(unique_topic, 0, 4, [b"x"] * 3)
    _, end_b = broker_cluster.produce_payloads(unique_topic, 1, 1, [b"y"] * 2)
    raw = {"brokers": broker_cluster.broker_list, "topics": unique_topic}
    ranges = plan_batch(parse_options(raw))
    assert [(r.key.broker, r.key.partition, r.start, r.end) for r in ranges] == [(0, 4, 0, end_a), (1, 1, 0, end_b)]
    with pytest.raises(ClusterConfigError, match="does not exist on any of the brokers"):
        plan_batch(parse_options({**raw, "topics": unique_topic + "-missing"}))


def test_stream_offsets_respect_the_byte_budget_and_available_now(tk, broker_cluster, unique_topic):
    expected = tk.produce_mixed(broker_cluster, unique_topic, seed=31)
    boundaries = expected.boundaries()
    reader = TrikafkaStreamReader(_options(broker_cluster, unique_topic, maxBytesPerTrigger=3000))
    assert reader.getDefaultReadLimit() == ReadMaxBytes(3000)
    start = reader.initialOffset()
    assert start == {unique_topic: {"0-0": 0, "0-1": 0, "1-0": 0, "1-1": 0}}

    reader.prepareForTriggerAvailableNow()
    tk.produce_mixed(broker_cluster, unique_topic, seed=32)  # after the trigger: must not be read
    ends = {key: max(b) for key, b in boundaries.items()}
    batches = 0
    while True:
        end = reader.latestOffset(start, ReadMaxBytes(3000))
        if end == start:
            break
        batches += 1
        moved = {}
        for name, offset in end[unique_topic].items():
            key = tuple(int(x) for x in name.split("-"))
            assert offset in boundaries[key] and offset <= ends[key]
            if offset != start[unique_topic][name]:
                moved[key] = (start[unique_topic][name], offset)
        total = sum(b - a for a, b in moved.values())
        if total > 3000:  # allowed only as one whole entry that alone exceeds the budget
            ((key, (a, b)),) = moved.items()
            assert b == min(x for x in boundaries[key] if x > a)
        assert total > 0
        start = end
    assert batches > 3
    assert {tuple(int(x) for x in n.split("-")): o for n, o in start[unique_topic].items()} == ends
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # still capped at the trigger's snapshot


def test_stream_keeps_partitions_of_an_unreachable_broker(broker_cluster, unique_topic):
    broker_cluster.produce_payloads(unique_topic, 0, 0, [b"m"] * 5)
    options = _options(broker_cluster, unique_topic)
    dead = parse_options({
        "brokers": f"0:127.0.0.1:{broker_cluster.addresses[0].port},7:127.0.0.1:1",
        "topics": unique_topic,
    })
    reader = TrikafkaStreamReader(dead)
    start = {unique_topic: {"0-0": 0, "7-0": 123}}
    end = reader.latestOffset(start, ReadAllAvailable())
    # Broker 0 reports both its partitions (METADATA); broker 7's known partition waits.
    assert end == {unique_topic: {"0-0": broker_cluster.visible_end(unique_topic, 0, 0), "0-1": 0, "7-0": 123}}
    # A partition new to the offsets enters at its earliest offset, with nothing to read yet.
    fresh = TrikafkaStreamReader(options).latestOffset({unique_topic: {}}, ReadAllAvailable())
    assert fresh == {unique_topic: {"0-0": 0, "0-1": 0, "1-0": 0, "1-1": 0}}
