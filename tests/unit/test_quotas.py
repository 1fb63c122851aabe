"""Client quotas' bookkeeping (docs/protocol.md §20.1, §20.2): entity paths, which quota applies,
the sampled rate and the throttle time a recording costs, on a fake clock."""

from __future__ import annotations

import pytest

from trikafka.broker.entity_configs import Component, EntityError, components, entity_path, sanitize
from trikafka.broker.quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, Charge, ClientQuotas,
                                    QuotaError, Rate, check_quota)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_entity_paths_are_kafkas_with_names_url_encoded_and_defaults_written_as_default() -> None:
    assert entity_path([Component("client-id", "a b/c*"), Component("user", "User 1")]) == \
        "users/User+1/clients/a+b%2Fc%2A"
    assert entity_path([Component("user", None)]) == "users/<default>"
    assert components("users/User+1/clients/a+b%2Fc%2A") == [Component("user", "User 1"),
                                                              Component("client-id", "a b/c*")]
    assert components("clients/<default>") == [Component("client-id", None)]
    assert entity_path([Component("ip", "::1")]) == "ips/::1"  # as given, as Kafka writes it
    assert components("ips/<default>") == [Component("ip", None)]
    assert sanitize("~x") == "%7Ex"  # Java's URLEncoder encodes what Python keeps


@pytest.mark.parametrize("parts, named", [
    ([Component("host", "1.2.3.4")], "'host' is not served"),
    ([Component("ip", "1.2.3.4"), Component("client-id", "c")], "'ip' cannot be combined"),
    ([Component("ip", "localhost")], "not a valid IP address"),
    ([Component("user", "a"), Component("user", "b")], "named twice"),
    ([], "needs a user, a client-id or an ip"),
])
def test_a_bad_entity_is_refused_naming_why(parts: list[Component], named: str) -> None:
    with pytest.raises(EntityError, match=named):
        entity_path(parts)


@pytest.mark.parametrize("key, value, stored", [
    (PRODUCER_BYTE_RATE, 1024.0, "1024"), (REQUEST_PERCENTAGE, 12.5, "12.5")])
def test_a_quota_is_stored_as_kafka_writes_it(key: str, value: float, stored: str) -> None:
    assert check_quota(key, value) == stored


@pytest.mark.parametrize("key, value", [
    ("controller_mutation_rate", 1.0), (PRODUCER_BYTE_RATE, 0.5), (CONSUMER_BYTE_RATE, 0.0),
    (REQUEST_PERCENTAGE, -1.0), (PRODUCER_BYTE_RATE, float("inf"))])
def test_an_unknown_key_or_a_value_out_of_range_is_refused(key: str, value: float) -> None:
    with pytest.raises(QuotaError, match=key):
        check_quota(key, value)


def test_the_most_specific_entity_with_the_key_applies_and_the_rate_is_shared_as_kip_55_says(
        caplog: pytest.LogCaptureFixture) -> None:
    quotas = ClientQuotas()
    quotas.replace({
        "users/alice/clients/app": {PRODUCER_BYTE_RATE: "100"},
        "users/alice": {PRODUCER_BYTE_RATE: "200", CONSUMER_BYTE_RATE: "300"},
        "users/<default>": {PRODUCER_BYTE_RATE: "400"},
        "clients/<default>": {CONSUMER_BYTE_RATE: "500"},
        "clients/bad": {PRODUCER_BYTE_RATE: "not a number"},
    })
    assert quotas.quota_of(PRODUCER_BYTE_RATE, "alice", "app") == (100.0, "alice", "app")
    assert quotas.quota_of(PRODUCER_BYTE_RATE, "alice", "other") == (200.0, "alice", "")
    assert quotas.quota_of(CONSUMER_BYTE_RATE, "alice", "app") == (300.0, "alice", "")
    assert quotas.quota_of(PRODUCER_BYTE_RATE, "bob", "app") == (400.0, "bob", "")
    assert quotas.quota_of(CONSUMER_BYTE_RATE, "bob", "app") == (500.0, "", "app")
    assert quotas.quota_of(REQUEST_PERCENTAGE, "bob", "app") is None
    assert [r.getMessage() for r in caplog.records] == [
        "entity clients/bad: quota producer_byte_rate='not a number' ignored: could not convert string to float: "
        "'not a number'"]


def test_the_rate_never_divides_by_less_than_the_windows_but_one() -> None:
    rate = Rate(samples=11, window_s=1.0)
    rate.record(1000.0, 0.0)
    assert rate.measure(0.5) == (100.0, 10.0)
    rate.record(1000.0, 30.0)  # the first window expired: only the second counts
    assert rate.measure(30.0) == (100.0, 10.0)


def test_a_recording_over_the_quota_throttles_for_the_excess_over_the_window() -> None:
    clock = Clock()
    quotas = ClientQuotas(clock_s=clock)
    quotas.replace({"clients/slow": {PRODUCER_BYTE_RATE: "1000"}})
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "slow", 10000) == 0  # exactly the quota over 10 s
    # 20000 bytes over 10 s is twice the quota: throttled for the whole window span, as Kafka's formula gives
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "slow", 10000) == 10000
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "fast", 10**9) == 0  # no quota of its own


def test_a_charge_keeps_the_longest_throttle_and_a_charge_without_quotas_records_nothing() -> None:
    clock = Clock()
    quotas = ClientQuotas(clock_s=clock)
    quotas.replace({"users/<default>": {CONSUMER_BYTE_RATE: "100", REQUEST_PERCENTAGE: "1"}})
    charge = Charge(quotas, "alice", "c", request_bytes=10)
    fetched = charge.fetched(1500)
    assert fetched == 5000 and charge.mute_ms == 5000
    assert charge.handled(0.12) == 2000 and charge.mute_ms == fetched  # 1.2% of a thread over 10 s
    assert Charge(None, "alice", "c", 10).produced() == 0


def test_a_throttled_fetch_takes_its_bytes_back_and_a_fetch_is_limited_to_the_quotas_window_bytes() -> None:
    clock = Clock()
    quotas = ClientQuotas(clock_s=clock)
    quotas.replace({"clients/c": {CONSUMER_BYTE_RATE: "100"}})
    charge = Charge(quotas, "alice", "c", request_bytes=10)
    assert charge.fetch_limit_bytes() == 1000  # 100 B/s over 10 windows of 1 s: unthrottled with nothing recorded
    assert Charge(quotas, "alice", "other", 10).fetch_limit_bytes() is None
    assert charge.fetched(1000) == 0
    assert charge.fetched(500) == 5000  # throttled: taken back, so the rate is the first answer's alone
    assert quotas.record(CONSUMER_BYTE_RATE, "alice", "c", 0) == 0


def test_an_ip_quota_throttles_its_address_and_not_another_and_does_not_count_a_refused_connection() -> None:
    clock = Clock()
    quotas = ClientQuotas(samples=2, window_s=1.0, clock_s=clock)
    quotas.replace({"ips/0:0::1": {"connection_creation_rate": "2"}, "ips/<default>": {"connection_creation_rate": "0"},
                    "ips/::2": {"producer_byte_rate": "5"}})  # not an ip's key: ignored
    assert [quotas.connection_created("::1") for _ in range(3)] == [0, 0, 500]  # (3 - 2) / 2 x 1 s
    assert quotas.connection_created("::1") == 500  # the refused one was taken back
    assert quotas.connection_created("10.0.0.1") == 1000  # the default: 0, at most one window
    assert quotas.connection_created("unix-socket") == 0
