"""Unit tests for the pure 0.7 rebalance assignment (spec §8.3)."""

import pytest

from trikafka.group.assign import (
    assign_group,
    assign_topic,
    consumer_assignment,
    java_string_key,
    partition_owners,
    topic_partitions,
)
from trikafka.group.registry import StaticTopicCount, WildcardTopicCount, whitelist


def test_partitions_sorted_as_strings_not_numbers():
    # "1-10" < "1-2" and "10-0" < "2-0": plain string order, as 0.7 sorts.
    assert topic_partitions({1: 11}) == ["1-0", "1-1", "1-10"] + [f"1-{p}" for p in range(2, 10)]
    assert topic_partitions({2: 1, 10: 1, 1: 1}) == ["1-0", "10-0", "2-0"]


def test_partitions_from_broker_child_names_and_zero_counts():
    assert topic_partitions({"3": 2, "0": 0}) == ["3-0", "3-1"]
    assert topic_partitions({}) == []


def test_java_string_order_uses_utf16_code_units():
    # Java (checked with OpenJDK 17 Collections.sort): U+1F600 < U+FFFD, because
    # its first UTF-16 unit is the surrogate 0xD83D; Python code points say otherwise.
    names = ["\ufffd", "\U0001f600", "b", "B", "a"]
    assert sorted(names, key=java_string_key) == ["B", "a", "b", "\U0001f600", "\ufffd"]
    assert sorted(names) != sorted(names, key=java_string_key)


def test_remainder_goes_to_the_first_threads():
    parts = ["0-0", "0-1", "1-0", "1-1", "1-2"]
    result = assign_topic(parts, ["g_b-0", "g_a-0"])
    assert result == {"g_a-0": ["0-0", "0-1", "1-0"], "g_b-0": ["1-1", "1-2"]}
    assert list(result) == ["g_a-0", "g_b-0"]


def test_seven_partitions_three_threads():
    parts = [f"0-{p}" for p in range(7)]
    result = assign_topic(parts, ["c-0", "c-1", "c-2"])
    assert result == {"c-0": ["0-0", "0-1", "0-2"], "c-1": ["0-3", "0-4"], "c-2": ["0-5", "0-6"]}


def test_thread_ids_sorted_as_strings():
    # A consumer with 11 streams: "c-10" sorts between "c-1" and "c-2".
    threads = [f"c-{i}" for i in range(11)]
    result = assign_topic([f"0-{p}" for p in range(11)], threads)
    assert list(result)[:3] == ["c-0", "c-1", "c-10"]
    # Third thread gets the third partition in string order (0-0, 0-1, 0-10, ...).
    assert result["c-10"] == ["0-10"]
    assert result["c-2"] == ["0-2"]


def test_more_threads_than_partitions_leaves_the_last_ones_empty():
    result = assign_topic(["0-0", "1-0"], ["x-0", "x-1", "x-2"])
    assert result == {"x-0": ["0-0"], "x-1": ["1-0"], "x-2": []}


def test_no_partitions_and_no_threads():
    assert assign_topic([], ["a-0", "b-0"]) == {"a-0": [], "b-0": []}
    assert assign_topic(["0-0"], []) == {}


def test_inputs_are_sorted_here_and_duplicates_rejected():
    assert assign_topic(["1-0", "0-0"], ["b-0", "a-0"]) == {"a-0": ["0-0"], "b-0": ["1-0"]}
    with pytest.raises(ValueError, match="duplicate consumer thread id"):
        assign_topic(["0-0"], ["a-0", "a-0"])
    with pytest.raises(ValueError, match="duplicate partition"):
        assign_topic(["0-0", "0-0"], ["a-0"])


GROUP = {
    "g_h1-1-aaaaaaaa": StaticTopicCount({"t1": 2, "t2": 1}),
    "g_h2-1-bbbbbbbb": StaticTopicCount({"t1": 1}),
    "g_h3-1-cccccccc": WildcardTopicCount(whitelist("t.*"), 1),
}
BROKER_TOPICS = {"t1": {0: 2, 1: 3}, "t2": {0: 1}, "x": {0: 4}, "t3": {}}


def test_assign_group_static_and_wildcard_members():
    result = assign_group(GROUP, BROKER_TOPICS)
    assert set(result) == {"t1", "t2", "t3"}
    assert result["t1"] == {
        "g_h1-1-aaaaaaaa-0": ["0-0", "0-1"],
        "g_h1-1-aaaaaaaa-1": ["1-0"],
        "g_h2-1-bbbbbbbb-0": ["1-1"],
        "g_h3-1-cccccccc-0": ["1-2"],
    }
    assert result["t2"] == {"g_h1-1-aaaaaaaa-0": ["0-0"], "g_h3-1-cccccccc-0": []}
    assert result["t3"] == {"g_h3-1-cccccccc-0": []}  # a topic node without brokers


def test_static_topic_without_broker_registration_gets_nothing():
    result = assign_group({"g_c": StaticTopicCount({"nowhere": 2})}, {})
    assert result == {"nowhere": {"g_c-0": [], "g_c-1": []}}


def test_consumer_assignment_is_its_slice_of_the_group():
    mine = consumer_assignment("g_h3-1-cccccccc", GROUP, BROKER_TOPICS)
    assert mine == {"t1": {"g_h3-1-cccccccc-0": ["1-2"]}, "t2": {"g_h3-1-cccccccc-0": []},
                    "t3": {"g_h3-1-cccccccc-0": []}}
    assert consumer_assignment("g_h2-1-bbbbbbbb", GROUP, BROKER_TOPICS) == {
        "t1": {"g_h2-1-bbbbbbbb-0": ["1-1"]}
    }


def test_consumer_assignment_requires_registration():
    with pytest.raises(KeyError, match="not registered"):
        consumer_assignment("g_gone", GROUP, BROKER_TOPICS)


def test_partition_owners_inverts_and_detects_conflicts():
    owners = partition_owners(assign_group(GROUP, BROKER_TOPICS))
    assert owners["t1"] == {
        "0-0": "g_h1-1-aaaaaaaa-0", "0-1": "g_h1-1-aaaaaaaa-0", "1-0": "g_h1-1-aaaaaaaa-1",
        "1-1": "g_h2-1-bbbbbbbb-0", "1-2": "g_h3-1-cccccccc-0",
    }
    assert owners["t3"] == {}
    with pytest.raises(ValueError, match="owned by"):
        partition_owners({"t": {"a-0": ["0-0"], "b-0": ["0-0"]}})
