"""GroupConfig: validation and the mapping from 0.7 ``consumer.properties`` names (spec §14.3)."""

import pytest

from trikafka.group import GroupConfig, group_config_from_properties
from trikafka.group.config import LARGEST, SMALLEST


def test_defaults_follow_0_7():
    config = GroupConfig()
    assert config.fetch_max_bytes == 1024 * 1024  # fetch.size
    assert config.autocommit_enable is True
    assert config.autocommit_interval_s == 10.0  # autocommit.interval.ms=10000
    assert config.autooffset_reset == SMALLEST
    assert config.consumer_timeout_s is None  # consumer.timeout.ms=-1
    assert config.rebalance_retries_max == 4
    assert config.queued_chunks_max == 10
    assert config.resets_offsets


def test_every_0_7_property_maps_to_its_keyword_and_unit():
    config = group_config_from_properties({
        "groupid": "g", "consumerid": "c", "zk.connect": "127.0.0.1:2181",
        "fetch.size": "65536",
        "fetcher.backoff.ms": "250",
        "queuedchunks.max": "3",
        "autocommit.enable": "False",
        "autocommit.interval.ms": "1500",
        "autooffset.reset": "largest",
        "consumer.timeout.ms": "750",
        "rebalance.retries.max": "9",
        "rebalance.backoff.ms": "1200",
        "socket.timeout.ms": "4000",
        "zk.sessiontimeout.ms": "8000",
    })
    assert config == GroupConfig(
        fetch_max_bytes=65536, fetcher_backoff_s=0.25, queued_chunks_max=3, autocommit_enable=False,
        autocommit_interval_s=1.5, autooffset_reset=LARGEST, consumer_timeout_s=0.75,
        rebalance_retries_max=9, rebalance_backoff_s=1.2, socket_timeout_s=4.0, zk_session_timeout_s=8.0,
    )


def test_negative_timeouts_mean_wait_forever():
    config = group_config_from_properties({"consumer.timeout.ms": "-1", "socket.timeout.ms": "-1"})
    assert config.consumer_timeout_s is None and config.socket_timeout_s is None


def test_zk_synctime_is_the_backoff_unless_rebalance_backoff_is_given():
    assert group_config_from_properties({"zk.synctime.ms": "300"}).rebalance_backoff_s == 0.3
    # Whatever the order of the keys, the explicit rebalance.backoff.ms wins.
    for properties in ({"zk.synctime.ms": "300", "rebalance.backoff.ms": "900"},
                       {"rebalance.backoff.ms": "900", "zk.synctime.ms": "300"}):
        assert group_config_from_properties(properties).rebalance_backoff_s == 0.9


def test_the_0_7_0_backoff_name_is_accepted():
    assert group_config_from_properties({"backoff.increment.ms": "40"}).fetcher_backoff_s == 0.04


def test_keyword_overrides_win_over_properties():
    config = group_config_from_properties({"fetch.size": "1000"}, fetch_max_bytes=2000, num_streams=3)
    assert (config.fetch_max_bytes, config.num_streams) == (2000, 3)


def test_values_are_trimmed():
    assert group_config_from_properties({"fetch.size": " 4096 \n"}).fetch_max_bytes == 4096


@pytest.mark.parametrize("properties", [
    {"fetch.sise": "1"},  # a typo must not pass silently
    {"autocommit.enable": "yes"},
    {"fetch.size": "lots"},
    {"fetch.size": "0"},
    {"queuedchunks.max": "0"},
    {"rebalance.retries.max": "0"},
    {"rebalance.backoff.ms": "-5"},
])
def test_bad_properties_are_refused(properties):
    with pytest.raises(ValueError):
        group_config_from_properties(properties)


def test_an_unknown_reset_policy_means_errors_instead_of_resets():
    config = GroupConfig(autooffset_reset="anything")
    assert not config.resets_offsets


@pytest.mark.parametrize("changes", [
    dict(fetch_max_bytes=0),
    dict(fetch_max_bytes=2048, max_fetch_bytes_limit=1024),
    dict(num_streams=0),
    dict(autocommit_interval_s=-1.0),
    dict(rebalance_coalesce_s=-0.1),
    dict(close_timeout_s=-1.0),
    dict(fetch_wait_max_ms=-1),
])
def test_invalid_settings_are_refused(changes):
    with pytest.raises(ValueError):
        GroupConfig(**changes)


def test_replace_validates_again():
    config = GroupConfig().replace(num_streams=2)
    assert config.num_streams == 2
    with pytest.raises(ValueError):
        config.replace(num_streams=0)
