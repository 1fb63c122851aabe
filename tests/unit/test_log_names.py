"""Names on disk: topic validation (spec §9.7), partition directories and segment files (§7.1)."""

import pytest

from trikafka.log import InvalidTopicError, partition_dir_name, segment_file_name, validate_topic
from trikafka.log.errors import LogLoadError
from trikafka.log.names import is_temporary_file_name, parse_partition_dir_name, parse_segment_file_name


@pytest.mark.parametrize("name", ["t", "test", "my_topic", "a.b-c_D9", "-", "..a", "x" * 255, "___"])
def test_valid_topic_names(name):
    validate_topic(name)  # raises InvalidTopicError otherwise
    # a valid name is a directory name that parses back to itself
    assert parse_partition_dir_name(partition_dir_name(name, 3)) == (name, 3)


@pytest.mark.parametrize("name", [
    "", ".", "..", "a/b", "/", "a\x00b", "\x00", "x" * 256, "x" * 10240, "a b", "tést", "a\nb", "a\\b",
    "t\u00e9", "\u202e", "a:b", "a*", "top\tic", b"bytes", None, 5,
])
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopicError) as info:
        validate_topic(name)
    assert len(str(info.value)) < 200  # hostile names are shortened in the message


def test_invalid_topic_carries_error_code_7():
    with pytest.raises(InvalidTopicError) as info:
        validate_topic("..")
    assert info.value.error_code == 7


def test_partition_dir_round_trip_splits_at_last_hyphen():
    assert partition_dir_name("my-topic", 12) == "my-topic-12"
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir_name("t-0") == ("t", 0)
    assert parse_partition_dir_name("--3") == ("-", 3)
    assert parse_partition_dir_name("topic--1") == ("topic-", 1)


@pytest.mark.parametrize("name", ["topic", "topic-", "topic-x", "topic-01", "topic-1-", "-5", "a/b-1", "t-+1",
                                  "lost+found", "t-1 ", "t-99999999999"])
def test_bad_partition_dir_names(name):
    with pytest.raises(LogLoadError):
        parse_partition_dir_name(name)


def test_segment_names_are_twenty_digits():
    assert segment_file_name(0) == "00000000000000000000.kafka"
    assert segment_file_name(536870987) == "00000000000536870987.kafka"
    assert parse_segment_file_name("00000000000536870987.kafka") == 536870987


@pytest.mark.parametrize("name", ["0.kafka", "00000000000.kafka", "0000000000000000000x.kafka",
                                  "00000000000000000000.kafka.kafka", "-0000000000000000001.kafka"])
def test_bad_segment_names(name):
    with pytest.raises(LogLoadError):
        parse_segment_file_name(name)


def test_temporary_names():
    assert is_temporary_file_name("00000000000000000000.kafka.tmp")
    assert is_temporary_file_name("00000000000000000000.kafka.deleted")
    assert not is_temporary_file_name("00000000000000000000.kafka")
