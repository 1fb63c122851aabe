"""One boolean rule for every settings table: broker, group consumer, topic replication, Spark options."""

from __future__ import annotations

import pytest

from trikafka.broker.config import ConfigError
from trikafka.broker.config_sources import load
from trikafka.group.config import group_config_from_properties
from trikafka.spark.options import OptionError, parse_options
from trikafka.util.settings import parse_bool
from trikafka.zk.replication_values import ReplicationValueError, TopicConfig


@pytest.mark.parametrize("text, expected", [("true", True), (" TRUE ", True), ("False", False), (True, True)])
def test_parse_bool_accepts_true_and_false(text, expected):
    assert parse_bool(text) is expected


@pytest.mark.parametrize("text", ["yes", "1", "on", "off", "", "truee", 1, None])
def test_parse_bool_refuses_other_spellings(text):
    with pytest.raises(ValueError, match="expected true or false"):
        parse_bool(text)


@pytest.mark.parametrize("text", ["yes", "1", "on"])
def test_every_table_refuses_the_same_spellings(text):
    with pytest.raises(ConfigError, match="true or false"):
        load(None, {"log.cleaner.enable": text})
    with pytest.raises(ValueError, match="true or false"):
        group_config_from_properties({"autocommit.enable": text})
    with pytest.raises(ReplicationValueError):
        TopicConfig.from_strings({"unclean.leader.election.enable": text})
    with pytest.raises(OptionError, match="true or false"):
        parse_options({"topics": "t", "brokers": "0:localhost:9092", "failOnDataLoss": text})


def test_every_table_accepts_the_same_spellings():
    assert load(None, {"log.cleaner.enable": " False "}).log_cleaner_enable is False
    assert group_config_from_properties({"autocommit.enable": "FALSE"}).autocommit_enable is False
    assert TopicConfig.from_strings({"unclean.leader.election.enable": "True"}).unclean_leader_election is True
    assert parse_options({"topics": "t", "brokers": "0:localhost:9092", "failOnDataLoss": "False"}).fail_on_data_loss is False
