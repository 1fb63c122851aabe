"""The api table of §16.3: what the contract lists, what Kafka 3.0 serves, what kio models, what clients infer."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS, infer_broker_version_from_api_versions

from trikafka.kafka.apis import KRAFT_ONLY, NOT_SERVED, KafkaApi, api_versions_entries, lookup
from trikafka.kafka.errors import UnsupportedRequest
from trikafka.kafka.framing import parse_request

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
# Metadata v12 (topic ids in the request) is Kafka 3.1's, DescribeCluster v1 (endpoint_type) 3.7's,
# ListGroups v5 (types_filter) 3.8's; §16.3's table lists them, and no client's version inference
# turns on them (kafka-python tells 3.1 by Fetch v13, 3.7 by Fetch v16, 3.8 by Produce v11):
# test_kafka_python_infers_a_3_0_broker_from_our_api_versions.
# OffsetCommit and OffsetFetch v9 (member epochs) are Kafka 4.0's, for its consumer protocol (§17.9);
# ApiVersions v4 is Kafka 3.9's (§16.3); DescribeLogDirs v3 (KIP-784) is Kafka 3.2's and v4 (KIP-827, the
# volume's sizes) 3.3's (§16.4).
BEYOND_KAFKA_3_0 = {KafkaApi.METADATA: 12, KafkaApi.DESCRIBE_CLUSTER: 1, KafkaApi.LIST_GROUPS: 5,
                    KafkaApi.OFFSET_COMMIT: 9, KafkaApi.OFFSET_FETCH: 9, KafkaApi.API_VERSIONS: 4,
                    KafkaApi.DESCRIBE_LOG_DIRS: 4}
# Accepted but not advertised: AddPartitionsToTxn v4 (Kafka 3.6's), which only brokers send (§19.5.7).
BROKERS_ONLY_UP_TO = {KafkaApi.ADD_PARTITIONS_TO_TXN: 4}


def _contract_rows() -> dict[int, tuple[str, int, int, int, int]]:
    text = PROTOCOL_MD.read_text()
    table = text[text.index("### 16.3"):text.index("### 16.4")]
    rows = {}
    for key, name, versions, flexible, brokers in re.findall(
            r"^\| (\d+) \| (\w+) \| ([\d–]+) \| (\d+) \| (\d*) ?\|$", table, re.M):
        low, _, high = versions.partition("–")
        rows[int(key)] = (name, int(low), int(high or low), int(flexible), int(brokers or high or low))
    return rows


def test_the_table_is_the_contracts():
    rows = _contract_rows()
    assert len(rows) == len(KafkaApi)  # every row of the table parsed
    assert {int(api): (api.label, api.min_version, api.max_version, api.flexible_from, api.broker_max_version)
            for api in KafkaApi} == rows


@pytest.mark.parametrize("api", list(KafkaApi), ids=lambda api: api.label)
def test_advertised_ranges_are_kafka_3_0s(api):
    """An api Kafka 3.0 lacks (KIP-848's, §17.9; DescribeTopicPartitions, §16.4) has Kafka 4.0's range."""
    kafka_min, kafka_max = BROKER_API_VERSIONS[(3, 0)].get(int(api)) or BROKER_API_VERSIONS[(4, 0)][int(api)]
    assert kafka_min <= api.min_version <= api.max_version <= api.broker_max_version
    assert api.max_version == BEYOND_KAFKA_3_0.get(api, kafka_max)
    assert api.broker_max_version == BROKERS_ONLY_UP_TO.get(api, api.max_version)


def test_advertising_brokers_own_versions_would_make_kafka_python_infer_kafka_3_6():
    """Why AddPartitionsToTxn v4 is accepted but not advertised (§16.3)."""
    served = {int(api): (api.min_version, api.broker_max_version) for api in KafkaApi}
    assert infer_broker_version_from_api_versions(served) >= (3, 6)


@pytest.mark.parametrize("api", list(KafkaApi), ids=lambda api: api.label)
def test_every_served_version_has_kio_classes_of_the_right_flexibility(api):
    for version in range(api.min_version, api.broker_max_version + 1):
        for cls in (api.request_class(version), api.response_class(version)):
            assert (cls.__api_key__, cls.__version__) == (int(api), version)
            assert cls.__flexible__ == api.flexible(version), (cls, version)
    assert api.request_class(api.max_version) is api.request_class(api.max_version)  # loaded once


def test_a_version_outside_the_range_has_no_class():
    with pytest.raises(ValueError, match="Produce v2 is not served"):
        KafkaApi.PRODUCE.request_class(2)
    with pytest.raises(ValueError):
        KafkaApi.FETCH.response_class(13)


def test_lookup():
    assert lookup(0) is KafkaApi.PRODUCE
    assert lookup(60) is KafkaApi.DESCRIBE_CLUSTER
    assert lookup(8) is KafkaApi.OFFSET_COMMIT
    assert lookup(4) is None  # LeaderAndIsr: not served on this listener
    assert lookup(-1) is None


@pytest.mark.parametrize("version", range(5))
def test_api_versions_entries(version):
    entries = api_versions_entries(version)
    assert [(e.api_key, e.min_version, e.max_version) for e in entries] == [
        (int(api), api.min_version, api.max_version) for api in KafkaApi]
    assert all(type(e).__version__ == version for e in entries)


def test_kafka_python_infers_a_3_0_broker_from_our_api_versions():
    answered = {e.api_key: (e.min_version, e.max_version) for e in api_versions_entries(3)}
    assert infer_broker_version_from_api_versions(answered) == (3, 0)


def test_aiokafka_finds_a_version_it_speaks_in_every_api_of_the_table_it_knows():
    """aiokafka sends, per api, the newest version it has that our ApiVersions range holds."""
    import importlib
    import pkgutil

    import aiokafka.protocol
    from aiokafka.protocol.api import Request

    for module in pkgutil.iter_modules(aiokafka.protocol.__path__):
        importlib.import_module(f"aiokafka.protocol.{module.name}")
    requests = {cls.API_KEY: cls for cls in Request.__subclasses__() if lookup(cls.API_KEY) is not None}
    assert {KafkaApi.PRODUCE, KafkaApi.FETCH, KafkaApi.METADATA, KafkaApi.LIST_OFFSETS} <= requests.keys()
    versions = {e.api_key: (e.min_version, e.max_version) for e in api_versions_entries(0)}
    for api_key, cls in requests.items():
        low, high = versions[api_key]
        assert any(low <= struct.API_VERSION <= high for struct in cls._CLASSES), cls.__name__


README_MD = PROTOCOL_MD.parents[1] / "README.md"


def _versions(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}–{high}"


def test_every_api_kio_knows_is_served_or_said_why_not():
    from kio.schema.index import api_key_map

    served = {int(api) for api in KafkaApi}
    assert served.isdisjoint(NOT_SERVED)
    assert served | NOT_SERVED.keys() == api_key_map.keys()
    for key, (name, why) in NOT_SERVED.items():
        assert name == "".join(word.capitalize() for word in api_key_map[key].split("_")), key
        assert why


def test_the_contracts_table_of_apis_not_served_is_the_codes():
    text = PROTOCOL_MD.read_text()
    section = text[text.index("### 16.3"):text.index("### 16.4")]
    table = section[section.index("| key | api | why not served |"):]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (.+) \|$", table, re.M)
    assert {int(key): (name, why) for key, name, why in rows} == NOT_SERVED


def test_the_readme_lists_every_api_a_client_may_send_with_its_versions_or_why_not():
    text = README_MD.read_text()
    section = text[text.index("### Every Kafka api, served or not"):]
    start = section.index("| key | api | trikafka |")
    table = section[start:section.index("\n\n", start)]
    rows = {int(key): (name, what) for key, name, what in re.findall(r"^\| (\d+) \| (\w+) \| (.+) \|$", table, re.M)}
    # The ranges ApiVersions answers (every version of it answers the same table).
    answered = {e.api_key: (e.min_version, e.max_version) for e in api_versions_entries(3)}
    assert answered.keys() == {int(api) for api in KafkaApi}
    expected = {int(api): (api.label, _versions(*answered[int(api)])) for api in KafkaApi}
    expected |= {key: (name, f"not served: {why}") for key, (name, why) in NOT_SERVED.items() if why != KRAFT_ONLY}
    assert rows == expected
    for key, (name, why) in NOT_SERVED.items():  # the apis only brokers send are named below the table's intro
        if why == KRAFT_ONLY:
            assert name in section[:section.index("| key |")], name


def test_an_api_not_served_is_refused_with_its_reason():
    frame = struct.pack(">hhi", 76, 0, 7) + struct.pack(">h", 3) + b"app"
    with pytest.raises(UnsupportedRequest, match=r"ShareGroupHeartbeat \(api key 76\) v0 is not served: "
                                                 r"share groups \(KIP-932\) are not built"):
        parse_request(frame)
    with pytest.raises(UnsupportedRequest, match=r"api key 999 \(api key 999\) v0 is not served"):
        parse_request(struct.pack(">hhi", 999, 0, 7) + struct.pack(">h", -1))
