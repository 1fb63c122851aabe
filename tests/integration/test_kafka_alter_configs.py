"""IncrementalAlterConfigs and AlterConfigs from real clients (docs/protocol.md §16.4).

A standalone broker keeps a topic's settings in its log directory's settings
file (§9.5); a ZooKeeper cluster in the topic's znode (§12.12.1), which every
broker's watch applies.  DescribeConfigs shows the new values with source
DYNAMIC_TOPIC_CONFIG and Kafka's synonyms.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Iterator

import pytest
import trio
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.helpers.kafka_processes import kafka_cluster
from trikafka.client.kafka.admin import KafkaAdmin
from trikafka.client.kafka.client import KafkaClient
from trikafka.log.names import TOPIC_SETTINGS_FILE
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

WAIT_S = 30.0


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


def make_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=replication_factor,
                                              config=config or {})]).values()
    future.result(timeout=WAIT_S)


def incremental(bootstrap: str, topic: str, *entries: tuple[str, AlterConfigOpType, str | None],
                validate_only: bool = False) -> None:
    """IncrementalAlterConfigs of ``topic`` through confluent-kafka; raises KafkaException on a refusal."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in entries])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its answer: a dropped one cancels
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    future.result(timeout=WAIT_S)


def described(bootstrap: str, topic: str) -> dict[str, Any]:
    """confluent-kafka's DescribeConfigs of ``topic``: name -> ConfigEntry (librdkafka asks for synonyms)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return future.result(timeout=WAIT_S)


def refusal(call: Any) -> KafkaException:
    with pytest.raises(KafkaException) as caught:
        call()
    return caught.value


def test_confluent_incremental_alter_sets_deletes_and_appends_and_describe_reports_the_source(
        kafka: RunningKafkaBroker) -> None:
    topic = "alter-incremental"
    make_topic(kafka.bootstrap, topic, {"segment.bytes": "1048576"})
    incremental(kafka.bootstrap, topic, ("retention.ms", AlterConfigOpType.SET, "3600000"),
                ("segment.bytes", AlterConfigOpType.DELETE, None),
                ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    entries = described(kafka.bootstrap, topic)
    retention = entries["retention.ms"]
    assert retention.value == "3600000" and retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.ms", str(7 * 24 * 3600 * 1000), ConfigSource.DEFAULT_CONFIG.value)]
    assert entries["cleanup.policy"].value == "delete,compact"
    segment = entries["segment.bytes"]
    assert segment.is_default and segment.source == ConfigSource.DEFAULT_CONFIG.value
    assert segment.value != "1048576"
    # In force on the broker, and kept in the log directory's settings file (§9.5).
    assert kafka.broker.log_manager.config_for(topic).retention_ms == 3600000
    with open(os.path.join(kafka.log_dir, TOPIC_SETTINGS_FILE)) as f:
        kept = json.load(f)["topics"][topic]
    assert kept == {"retention.ms": "3600000", "cleanup.policy": "delete,compact", "record.format": "v2"}
    incremental(kafka.bootstrap, topic, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
    assert described(kafka.bootstrap, topic)["cleanup.policy"].value == "compact"


def test_validate_only_changes_nothing(kafka: RunningKafkaBroker) -> None:
    topic = "alter-validate"
    make_topic(kafka.bootstrap, topic)
    incremental(kafka.bootstrap, topic, ("retention.ms", AlterConfigOpType.SET, "1000"), validate_only=True)
    assert described(kafka.bootstrap, topic)["retention.ms"].is_default
    bad = refusal(lambda: incremental(kafka.bootstrap, topic, ("retention.ms", AlterConfigOpType.SET, "soon"),
                                      validate_only=True))
    assert bad.args[0].name() == "INVALID_CONFIG" and "retention.ms" in bad.args[0].str()


@pytest.mark.parametrize("entry, named", [
    (("no.such.key", AlterConfigOpType.SET, "1"), "no.such.key"),
    (("retention.ms", AlterConfigOpType.SET, "-5"), "retention.ms"),
    (("message.timestamp.type", AlterConfigOpType.SET, "WallClock"), "message.timestamp.type"),
    (("max.message.bytes", AlterConfigOpType.SET, "-1"), "max.message.bytes"),
    (("record.format", AlterConfigOpType.SET, "0.7"), "record.format"),
    (("min.insync.replicas", AlterConfigOpType.SET, "2"), "min.insync.replicas"),
    (("retention.ms", AlterConfigOpType.APPEND, "5"), "retention.ms"),
])
def test_a_bad_or_read_only_setting_is_invalid_config_naming_it(kafka: RunningKafkaBroker, entry: Any,
                                                                 named: str) -> None:
    topic = "alter-refused"
    if topic not in AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10).topics:
        make_topic(kafka.bootstrap, topic)
    error = refusal(lambda: incremental(kafka.bootstrap, topic, entry)).args[0]
    assert error.name() == "INVALID_CONFIG" and named in error.str()
    assert all(e.is_default for e in described(kafka.bootstrap, topic).values())


def test_max_message_bytes_is_a_topic_setting_that_bounds_its_batches(kafka: RunningKafkaBroker) -> None:
    """§16.4: CreateTopics and the alters take max.message.bytes (librdkafka's 0129_fetch_aborted_msgs sets it);
    a batch above it is MESSAGE_TOO_LARGE, and DescribeConfigs reports the topic's own value."""
    from confluent_kafka import Producer

    topic = "max-message-bytes"
    make_topic(kafka.bootstrap, topic, {"max.message.bytes": "2000"})
    assert described(kafka.bootstrap, topic)["max.message.bytes"].value == "2000"
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "retries": 0})
    errors: list[Any] = []
    for size in (5000, 100):  # one batch each
        producer.produce(topic, value=b"x" * size, on_delivery=lambda err, _: errors.append(err and err.name()))
        assert producer.flush(WAIT_S) == 0
    assert errors == ["MSG_SIZE_TOO_LARGE", None]
    incremental(kafka.bootstrap, topic, ("max.message.bytes", AlterConfigOpType.SET, "10000"))
    producer.produce(topic, value=b"x" * 5000, on_delivery=lambda err, _: errors.append(err and err.name()))
    assert producer.flush(WAIT_S) == 0
    assert errors[2:] == [None]


def test_a_broker_setting_read_at_start_is_refused_as_not_changeable_at_run_time(kafka: RunningKafkaBroker) -> None:
    """Dynamic broker settings are §20.4's (tests/integration/test_kafka_broker_configs.py); others are refused."""
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    (future,) = admin.incremental_alter_configs([resource]).values()
    error = refusal(lambda: future.result(timeout=WAIT_S)).args[0]
    assert error.name() == "INVALID_CONFIG" and "'num.partitions' cannot change at run time" in error.str()


def test_an_unknown_topic_is_unknown_topic_or_partition(kafka: RunningKafkaBroker) -> None:
    error = refusal(lambda: incremental(kafka.bootstrap, "alter-nowhere",
                                        ("retention.ms", AlterConfigOpType.SET, "1"))).args[0]
    assert error.name() == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name of UNKNOWN_TOPIC_OR_PARTITION


def test_confluent_alter_configs_replaces_the_whole_set(kafka: RunningKafkaBroker) -> None:
    topic = "alter-replace"
    make_topic(kafka.bootstrap, topic, {"retention.ms": "60000"})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    (future,) = admin.alter_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.bytes": "2097152"})]).values()
    future.result(timeout=WAIT_S)
    entries = described(kafka.bootstrap, topic)
    assert entries["segment.bytes"].value == "2097152" and not entries["segment.bytes"].is_default
    assert entries["retention.ms"].is_default  # not named: back to the broker's


@pytest.mark.parametrize("incremental_api", [True, False])
def test_kafka_python_alter_configs(kafka: RunningKafkaBroker, incremental_api: bool) -> None:
    topic = f"alter-kp-{'incremental' if incremental_api else 'replace'}"
    make_topic(kafka.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        answered = admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                         configs={"retention.bytes": "1048576"})],
                                       incremental=incremental_api)
        entries = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    finally:
        admin.close()
    assert answered == {"topic": {topic: "OK"}}
    assert entries["retention.bytes"]["value"] == "1048576"
    assert entries["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert kafka.broker.log_manager.config_for(topic).retention_bytes == 1048576


def test_altered_settings_survive_a_restart(tmp_path: Any) -> None:
    topic = "alter-kept"
    with running_kafka_broker(str(tmp_path)) as first:
        make_topic(first.bootstrap, topic)
        incremental(first.bootstrap, topic, ("retention.ms", AlterConfigOpType.SET, "120000"))
    with running_kafka_broker(str(tmp_path)) as second:
        entry = described(second.bootstrap, topic)["retention.ms"]
        assert entry.value == "120000" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert second.broker.log_manager.config_for(topic).retention_ms == 120000


async def test_an_alter_on_one_broker_is_stored_in_zookeeper_and_seen_by_another(zk_chroot, tmp_path) -> None:
    topic = "alter-replicated"
    async with kafka_cluster(tmp_path, zk_chroot, 2) as cluster:
        first, second = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
        await trio.to_thread.run_sync(functools.partial(make_topic, first, topic, replication_factor=2))
        await trio.to_thread.run_sync(functools.partial(
            incremental, first, topic, ("retention.bytes", AlterConfigOpType.SET, "4096"), validate_only=True))
        await trio.to_thread.run_sync(functools.partial(
            incremental, first, topic, ("min.insync.replicas", AlterConfigOpType.SET, "2"),
            ("retention.ms", AlterConfigOpType.SET, "600000")))
        async with KafkaClient(first) as client:  # the answering broker's own view has it already
            entry = (await KafkaAdmin(client).describe_configs(topic))["min.insync.replicas"]
        assert entry.value == "2" and not entry.is_default
        with trio.fail_after(WAIT_S):  # the second broker's topic watch applies the znode's change
            while True:
                async with KafkaClient(second) as client:  # no metadata asked: it talks to `second` only
                    seen = await KafkaAdmin(client).describe_configs(topic)
                if seen["min.insync.replicas"].value == "2":
                    break
                await trio.sleep(0.05)
        assert seen["retention.ms"].value == "600000" and not seen["retention.ms"].is_default
        assert seen["retention.bytes"].is_default  # the validate_only change was not stored


def test_concurrent_alters_of_one_topic_each_keep_their_change(kafka: RunningKafkaBroker) -> None:
    """Two clients change different keys at once: neither read-modify-write may undo the other's."""
    import concurrent.futures

    topic = "alter-concurrent"
    make_topic(kafka.bootstrap, topic)
    keys = ["retention.ms", "delete.retention.ms", "min.compaction.lag.ms", "retention.bytes"]
    with concurrent.futures.ThreadPoolExecutor(len(keys)) as pool:
        for round_ in range(5):
            value = str(100000 + round_)
            list(pool.map(lambda key: incremental(kafka.bootstrap, topic, (key, AlterConfigOpType.SET, value)), keys))
            entries = described(kafka.bootstrap, topic)
            assert {key: entries[key].value for key in keys} == dict.fromkeys(keys, value)


def test_a_broker_setting_of_its_own_is_reported_as_static_broker_config(tmp_path: Any) -> None:
    topic = "described-static"
    with running_kafka_broker(str(tmp_path), log_retention_hours=2) as kafka:
        make_topic(kafka.bootstrap, topic)
        entries = described(kafka.bootstrap, topic)
        retention = entries["retention.ms"]
        assert retention.value == str(2 * 3600 * 1000) and not retention.is_default
        assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert [(s.name, s.source) for s in retention.synonyms.values()] == [
            ("log.retention.ms", ConfigSource.STATIC_BROKER_CONFIG.value)]
        assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        incremental(kafka.bootstrap, topic, ("retention.ms", AlterConfigOpType.SET, "1000"))
        retention = described(kafka.bootstrap, topic)["retention.ms"]
        assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
            ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
            ("log.retention.ms", str(2 * 3600 * 1000), ConfigSource.STATIC_BROKER_CONFIG.value)]


@pytest.mark.parametrize("api, version", [("INCREMENTAL_ALTER_CONFIGS", 0), ("INCREMENTAL_ALTER_CONFIGS", 1),
                                          ("ALTER_CONFIGS", 0), ("ALTER_CONFIGS", 1), ("ALTER_CONFIGS", 2)])
async def test_every_version_answers_and_a_key_named_twice_or_an_unknown_operation_is_refused(
        kafka: RunningKafkaBroker, api: str, version: int) -> None:
    from kio.schema.errors import ErrorCode

    from trikafka.client.kafka import schema
    from trikafka.kafka.apis import KafkaApi

    topic = f"alter-raw-{api.lower()}-{version}"
    await trio.to_thread.run_sync(make_topic, kafka.bootstrap, topic)
    which = KafkaApi[api]
    incremental_api = which is KafkaApi.INCREMENTAL_ALTER_CONFIGS

    def entry(name: str, value: str, operation: int = 0) -> dict[str, Any]:
        return {"name": name, "value": value, **({"config_operation": operation} if incremental_api else {})}

    resources = [{"resource_type": 2, "resource_name": topic, "configs": [entry("retention.ms", "5000")]},
                 {"resource_type": 2, "resource_name": topic,
                  "configs": [entry("retention.ms", "1"), entry("retention.ms", "2")]}]
    if incremental_api:
        resources.append({"resource_type": 2, "resource_name": topic, "configs": [entry("retention.ms", "1", 9)]})
    async with KafkaClient(kafka.bootstrap) as client:
        connection = await client.any_connection()
        body = schema.build(which, version, resources=resources, validate_only=False)
        answer: Any = await connection.send(which, version, body)
        codes = [(r.error_code, r.resource_name) for r in answer.responses]
        settings = await KafkaAdmin(client).describe_configs(topic)
    assert codes == [(ErrorCode.none, topic)] + [(ErrorCode.invalid_request, topic)] * (len(resources) - 1)
    assert settings["retention.ms"].value == "5000"


def test_kafka_python_describes_types_and_synonyms_and_documentation_when_asked(kafka: RunningKafkaBroker) -> None:
    topic = "described-types"
    make_topic(kafka.bootstrap, topic, {"cleanup.policy": "compact"})
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        entries = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True,
                                         config_filter="all")["topic"][topic]
    finally:
        admin.close()
    policy = entries["cleanup.policy"]
    assert policy["config_type"] == "LIST" and entries["retention.ms"]["config_type"] == "LONG"
    assert entries["unclean.leader.election.enable"]["config_type"] == "BOOLEAN"
    assert [(s["name"], s["value"], s["source"]) for s in policy["synonyms"]] == [
        ("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"), ("log.cleanup.policy", "delete", "DEFAULT_CONFIG")]


async def test_documentation_is_answered_only_when_asked(kafka: RunningKafkaBroker) -> None:
    from trikafka.kafka.apis import KafkaApi

    topic = "described-docs"
    await trio.to_thread.run_sync(make_topic, kafka.bootstrap, topic)
    async with KafkaClient(kafka.bootstrap) as client:
        connection = await client.any_connection()
        documented = {}
        for asked in (False, True):
            answer: Any = await connection.request(
                KafkaApi.DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=asked,
                resources=[{"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.ms"]}])
            (entry,) = answer.results[0].configs
            documented[asked] = entry.documentation
    assert documented[False] is None and "retention" in documented[True]
