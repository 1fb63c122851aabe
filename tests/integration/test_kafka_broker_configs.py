"""Dynamic broker settings from real clients (docs/protocol.md §20.4): IncrementalAlterConfigs and
AlterConfigs on a broker resource (its id, or "" for every broker's default) from confluent-kafka and
kafka-python, applied by the running broker without a restart, kept in the log directory's entity file
(standalone) or Kafka's ``/config/brokers`` znodes (ZooKeeper), and described with their source.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Iterator

import pytest
import trio
from kio.schema.errors import ErrorCode
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.helpers.cli import cli
from tests.helpers.kafka_processes import kafka_cluster, kafka_serve
from trikafka.broker.entity_configs import ENTITY_CONFIGS_FILE
from trikafka.client.kafka.admin import RESOURCE_BROKER, KafkaAdmin
from trikafka.client.kafka.client import KafkaClient
from trikafka.client.kafka.errors import KafkaResponseError
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

WAIT_S = 30.0


@pytest.fixture
def kafka(tmp_path: Any) -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(str(tmp_path), num_partitions=1) as running:
        yield running


def alter_broker(bootstrap: str, name: str, *entries: tuple[str, AlterConfigOpType, str | None],
                 validate_only: bool = False) -> None:
    """IncrementalAlterConfigs of broker resource ``name`` through confluent-kafka; raises on a refusal."""
    resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, op, value in entries])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    future.result(timeout=WAIT_S)


async def alter_default(bootstrap: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs of the default broker resource ("") through the Trio admin client:
    confluent-kafka and kafka-python refuse an empty broker resource name."""
    async with KafkaClient(bootstrap) as client:
        await KafkaAdmin(client).incremental_alter_configs("", changes, resource_type=RESOURCE_BROKER)


def described_broker(bootstrap: str, name: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, name)]).values()
    return future.result(timeout=WAIT_S)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (created,) = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values()
    created.result(timeout=WAIT_S)


def produce_acks_all(bootstrap: str, topic: str) -> str | None:
    """One acks -1 record through confluent-kafka, not retried: None, or the error's name."""
    outcome: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, "message.timeout.ms": int(WAIT_S * 1000)})
    producer.produce(topic, b"value", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(WAIT_S)
    return None if outcome[0] is None else outcome[0].name()


def refused(call: Any) -> Any:
    with pytest.raises(KafkaException) as caught:
        call()
    return caught.value.args[0]


def test_confluent_changes_this_brokers_and_the_default_settings_and_the_logs_follow_at_once(
        kafka: RunningKafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    (created,) = admin.create_topics([NewTopic("dyn", num_partitions=1, replication_factor=1)]).values()
    created.result(timeout=WAIT_S)
    manager = kafka.broker.log_manager
    assert manager.config_for("dyn").retention_ms == 168 * 3600 * 1000
    trio.run(alter_default, kafka.bootstrap, {"log.retention.ms": "7200000", "log.segment.bytes": "2097152"})
    alter_broker(kafka.bootstrap, "0", ("log.retention.ms", AlterConfigOpType.SET, "3600000"),
                 ("log.flush.interval.messages", AlterConfigOpType.SET, "7"))
    config = manager.config_for("dyn")
    assert (config.retention_ms, config.segment_bytes, config.flush_interval_messages) == (3600000, 2097152, 7)
    assert manager.get("dyn", 0).config is config  # the partition's log has it: its next look reads it
    entries = described_broker(kafka.bootstrap, "0")
    retention = entries["log.retention.ms"]
    assert (retention.value, retention.source, retention.is_read_only) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    admin_kp = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)  # confluent keys synonyms by name: one left
    try:
        kp_entries = admin_kp.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")],
                                               include_synonyms=True, config_filter="all")["broker"]["0"]
    finally:
        admin_kp.close()
    assert [(s["name"], s["value"], s["source"]) for s in kp_entries["log.retention.ms"]["synonyms"]] == [
        ("log.retention.ms", "3600000", "DYNAMIC_BROKER_CONFIG"),
        ("log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.ms", str(168 * 3600 * 1000), "DEFAULT_CONFIG")]
    assert entries["log.segment.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert entries["log.cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["broker.id"].is_read_only and entries["broker.id"].value == "0"
    (topic_configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "dyn")]).values()
    topic_retention = topic_configs.result(timeout=WAIT_S)["retention.ms"]  # the broker's, in force
    assert (topic_retention.value, topic_retention.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    alter_broker(kafka.bootstrap, "0", ("log.retention.ms", AlterConfigOpType.DELETE, None))
    assert manager.config_for("dyn").retention_ms == 7200000  # the default's value applies again
    with open(os.path.join(kafka.log_dir, ENTITY_CONFIGS_FILE)) as f:
        assert json.load(f)["entities"] == {
            "brokers/<default>": {"log.retention.ms": "7200000", "log.segment.bytes": "2097152"},
            "brokers/0": {"log.flush.interval.messages": "7"}}


@pytest.mark.parametrize("key, value, named", [
    ("num.partitions", "3", "broker config 'num.partitions' cannot change at run time"),
    ("broker.id", "5", "broker config 'broker.id' cannot change at run time"),
    ("no.such.setting", "1", "unknown broker config 'no.such.setting'"),
    ("log.segment.bytes", "0", "log_file_size must be >= 1"),
    ("log.retention.ms", "soon", "bad value 'soon' for log.retention.ms"),
    ("min.insync.replicas", "2", "min_insync_replicas above 1 needs replicas"),
])
def test_a_setting_that_cannot_change_or_does_not_check_is_invalid_config_naming_it(
        kafka: RunningKafkaBroker, key: str, value: str, named: str) -> None:
    error = refused(lambda: alter_broker(kafka.bootstrap, "0", (key, AlterConfigOpType.SET, value)))
    assert error.name() == "INVALID_CONFIG" and named in error.str()
    assert described_broker(kafka.bootstrap, "0")["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_validate_only_stores_nothing_and_a_name_that_is_no_broker_is_invalid_request(
        kafka: RunningKafkaBroker) -> None:
    alter_broker(kafka.bootstrap, "0", ("log.retention.bytes", AlterConfigOpType.SET, "4096"), validate_only=True)
    assert described_broker(kafka.bootstrap, "0")["log.retention.bytes"].value == "-1"

    async def name_no_broker() -> KafkaResponseError:
        async with KafkaClient(kafka.bootstrap) as client:  # confluent and kafka-python refuse such a name
            with pytest.raises(KafkaResponseError) as caught:
                await KafkaAdmin(client).incremental_alter_configs("leader", {"log.retention.bytes": "1"},
                                                                   resource_type=RESOURCE_BROKER)
        return caught.value

    assert trio.run(name_no_broker).error_code == ErrorCode.invalid_request


def test_kafka_python_alter_configs_keeps_the_dynamic_settings_it_describes_and_quota_windows_apply(
        kafka: RunningKafkaBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        alter_broker(kafka.bootstrap, "0", ("log.retention.bytes", AlterConfigOpType.SET, "1048576"))
        admin.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0",
                                              configs={"quota.window.num": "5", "log.cleanup.policy": "compact"})])
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")])
    finally:
        admin.close()
    quotas = kafka.broker.kafka.quotas
    assert (quotas.samples, kafka.broker.kafka.config.log_cleanup_policy) == (5, "compact")
    # kafka-python's AlterConfigs sends again the settings DescribeConfigs names dynamic (its config_filter):
    # the one set before stays, so it was described with its dynamic source.
    assert kafka.broker.log_manager.config.retention_bytes == 1048576
    assert described["broker"]["0"]["quota.window.num"]["value"] == "5"


def test_dynamic_settings_survive_a_restart(tmp_path: Any) -> None:
    with running_kafka_broker(str(tmp_path)) as first:
        trio.run(alter_default, first.bootstrap, {"log.retention.ms": "600000"})
    with running_kafka_broker(str(tmp_path)) as second:
        assert second.broker.log_manager.config.retention_ms == 600000
        entry = described_broker(second.bootstrap, "0")["log.retention.ms"]
        assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


async def test_the_default_altered_on_one_broker_is_kafkas_znode_and_applied_by_another(
        zk_chroot, zk_admin, tmp_path) -> None:
    async with kafka_cluster(tmp_path, zk_chroot, 2) as cluster:
        first, second = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
        await trio.to_thread.run_sync(create_topic, first, "one-replica")
        assert await trio.to_thread.run_sync(produce_acks_all, cluster.bootstrap(), "one-replica") is None
        await alter_default(first, {"log.retention.bytes": "8388608", "min.insync.replicas": "2"})
        await trio.to_thread.run_sync(functools.partial(
            alter_broker, first, "2", ("log.segment.bytes", AlterConfigOpType.SET, "4194304")))
        with trio.fail_after(WAIT_S):
            while True:
                entries = await trio.to_thread.run_sync(described_broker, second, "2")
                if entries["log.segment.bytes"].value == "4194304":
                    break
                await trio.sleep(0.05)
        assert (entries["log.retention.bytes"].value, entries["log.retention.bytes"].source) == (
            "8388608", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert entries["min.insync.replicas"].value == "2"
        assert entries["log.segment.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        mine = await trio.to_thread.run_sync(described_broker, first, "1")
        assert mine["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value  # broker 2's own only
        async with KafkaClient(first) as client:  # the Trio admin client asks broker 2 itself
            theirs = await KafkaAdmin(client).describe_configs("2", resource_type=RESOURCE_BROKER)
        assert theirs["log.segment.bytes"].value == "4194304"
        # Its one replica is below the new default minimum, on whichever broker leads it.
        refused_produce = await trio.to_thread.run_sync(produce_acks_all, cluster.bootstrap(), "one-replica")
        assert refused_produce == "NOT_ENOUGH_REPLICAS"
    chroot = "/" + zk_chroot.split("/", 1)[1]
    data, _ = await trio.to_thread.run_sync(zk_admin.get, f"{chroot}/config/brokers/<default>")
    assert json.loads(data) == {"version": 1, "config": {"log.retention.bytes": "8388608",
                                                         "min.insync.replicas": "2"}}


async def test_serve_takes_kafkas_names_at_start_and_describe_names_them_static(tmp_path: Any) -> None:
    async with kafka_serve(tmp_path / "broker", "--set", "log.segment.bytes=1048576",
                           "--set", "log.retention.ms=90000") as serve:
        entries = await trio.to_thread.run_sync(described_broker, serve.bootstrap, "0")
    assert (entries["log.segment.bytes"].value, entries["log.segment.bytes"].source) == (
        "1048576", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert entries["log.retention.ms"].value == "90000"


async def test_serve_refuses_min_insync_replicas_above_one_when_standalone_in_one_line(tmp_path: Any) -> None:
    status, _out, err = await cli("serve", "--standalone", "--port", "0", "--kafka-port", "0", "--log-dir",
                                  str(tmp_path / "broker"), "--set", "min.insync.replicas=2")
    assert status != 0
    assert [line for line in err.splitlines() if line.strip()] == [
        "trikafka: bad configuration: command line: min_insync_replicas above 1 needs replicas: this broker is "
        "standalone (got 2)"]
