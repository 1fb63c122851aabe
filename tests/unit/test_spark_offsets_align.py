"""Explicit offsets in the shape Spark's Kafka source documents (``{"t": {"0": 14}}``) name the
partition they mean, on 0.7 topics (per broker) and replicated ones (one set of partitions)."""

from __future__ import annotations

import pytest

from trikafka.spark.offsets import OffsetSpecError, PartitionKey, align_offsets, offsets_from_json

ONE_BROKER = [PartitionKey("pv", 3, 0), PartitionKey("pv", 3, 1)]
TWO_BROKERS = [PartitionKey("pv", 0, 0), PartitionKey("pv", 1, 0)]
REPLICATED = [PartitionKey("pv", None, 0), PartitionKey("pv", None, 1)]


def test_a_partition_number_names_the_one_brokers_partition():
    assert align_offsets(offsets_from_json('{"pv": {"1": 14}}', allow_special=True), ONE_BROKER) == \
        {PartitionKey("pv", 3, 1): 14}


def test_keys_as_known_and_other_topics_stay_as_written():
    offsets = offsets_from_json('{"pv": {"3-0": 5}, "other": {"2": 7}}')
    assert align_offsets(offsets, ONE_BROKER) == offsets
    assert align_offsets(offsets_from_json('{"pv": {"1": 9}}'), REPLICATED) == {PartitionKey("pv", None, 1): 9}


@pytest.mark.parametrize("text, known, message", [
    ('{"pv": {"0": 14}}', TWO_BROKERS, "partition 0 of topic 'pv' is on brokers 0, 1: name it '<broker>-<partition>'"),
    ('{"pv": {"7": 14}}', ONE_BROKER, "topic 'pv' has no partition 7 on any broker"),
    ('{"pv": {"0-1": 14}}', REPLICATED, "topic 'pv' is replicated: name its partitions by number"),
])
def test_a_key_that_names_no_single_partition_is_a_clear_error(text, known, message):
    with pytest.raises(OffsetSpecError, match=message.replace("(", r"\(")):
        align_offsets(offsets_from_json(text), known)


def test_planning_keys_mix_no_unordered_shapes():
    """The keys discovered and the explicit ones are sorted together: never a None broker beside an int."""
    keys = sorted(set(ONE_BROKER) | set(align_offsets(offsets_from_json('{"pv": {"0": 14}}'), ONE_BROKER)))
    assert keys == ONE_BROKER
