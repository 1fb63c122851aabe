"""Dynamic broker settings' bookkeeping (docs/protocol.md §20.4): which keys may change, the levels'
precedence, what DescribeConfigs reports of them, and Kafka's names at start."""

from __future__ import annotations

import logging

import pytest

from trikafka.broker.config import BrokerConfig, ConfigError
from trikafka.broker.config_sources import from_mapping
from trikafka.broker.dynamic_config import BrokerSettings, broker_entity, check_dynamic_key
from trikafka.broker.kafka.entities import (CONFIG_SOURCE_BROKER, CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_DEFAULT_BROKER,
                                            CONFIG_SOURCE_STATIC)


def test_kafkas_names_of_the_dynamic_settings_are_accepted_at_start_too() -> None:
    config = from_mapping({"log.segment.bytes": "1048576", "log.retention.ms": "60000",
                           "log.flush.interval.messages": "9"})
    assert (config.log_file_size, config.retention_ms, config.log_flush_interval) == (1048576, 60000, 9)
    assert config.log_config().retention_ms == 60000


@pytest.mark.parametrize("name, entity", [("", "brokers/<default>"), ("3", "brokers/3")])
def test_a_broker_resource_names_its_entity(name: str, entity: str) -> None:
    assert broker_entity(name) == entity


def test_a_resource_that_is_no_broker_and_a_key_that_cannot_change_are_refused() -> None:
    with pytest.raises(ConfigError, match="a broker id"):
        broker_entity("x")
    with pytest.raises(ConfigError, match="'log.dir' cannot change at run time"):
        check_dynamic_key("log.dir")
    with pytest.raises(ConfigError, match="unknown broker config 'nope'"):
        check_dynamic_key("nope")


def test_this_brokers_level_wins_over_the_default_which_wins_over_the_static_settings() -> None:
    settings = BrokerSettings(BrokerConfig(broker_id=1, log_roll_hours=5))
    seen: list[BrokerConfig] = []
    settings.listeners.append(seen.append)
    settings.apply({"brokers/<default>": {"log.segment.bytes": "2048", "log.roll.hours": "7"},
                    "brokers/1": {"log.segment.bytes": "4096"}, "brokers/2": {"log.segment.bytes": "1"}})
    assert (settings.current.log_file_size, settings.current.log_roll_hours) == (4096, 7)
    assert seen == [settings.current]
    rows = {row.name: row for row in settings.describe("1", None)}
    assert rows["log.segment.bytes"].synonyms == (
        ("log.segment.bytes", "4096", CONFIG_SOURCE_BROKER),
        ("log.segment.bytes", "2048", CONFIG_SOURCE_DEFAULT_BROKER),
        ("log.segment.bytes", str(1 << 30), CONFIG_SOURCE_DEFAULT))
    assert rows["log.roll.hours"].source == CONFIG_SOURCE_DEFAULT_BROKER
    assert rows["log.roll.hours"].synonyms[-1] == ("log.roll.hours", "5", CONFIG_SOURCE_STATIC)
    assert rows["broker.id"].read_only and rows["broker.id"].source == CONFIG_SOURCE_STATIC
    assert {row.name: row.source for row in settings.describe("", ("log.segment.bytes",))} == {
        "log.segment.bytes": CONFIG_SOURCE_DEFAULT_BROKER}
    assert settings.level_source("log.roll.hours") == CONFIG_SOURCE_DEFAULT_BROKER
    settings.apply({})
    assert settings.current == settings.static and len(seen) == 2


def test_a_stored_value_that_does_not_check_is_skipped_with_a_line_and_the_rest_applies(
        caplog: pytest.LogCaptureFixture) -> None:
    settings = BrokerSettings(BrokerConfig())
    with caplog.at_level(logging.ERROR):
        settings.apply({"brokers/0": {"log.segment.bytes": "0", "log.retention.bytes": "100", "broker.id": "4"}})
    assert (settings.current.log_file_size, settings.current.log_retention_size) == (1 << 30, 100)
    assert len(caplog.records) == 2


def test_check_refuses_the_first_key_that_cannot_change_or_does_not_check() -> None:
    settings = BrokerSettings(BrokerConfig())
    settings.check({"brokers/0": {"log.retention.ms": "1000"}})
    with pytest.raises(ConfigError, match="num.partitions"):
        settings.check({"brokers/<default>": {"num.partitions": "3"}})
    with pytest.raises(ConfigError, match="min_insync_replicas above 1 needs replicas"):
        settings.check({"brokers/0": {"min.insync.replicas": "2"}})


def test_every_broker_key_described_has_kafkas_type() -> None:
    from trikafka.broker.kafka.topics import BROKER_CONFIG_TYPES

    assert {row.name for row in BrokerSettings(BrokerConfig()).describe("0", None)} == set(BROKER_CONFIG_TYPES)
