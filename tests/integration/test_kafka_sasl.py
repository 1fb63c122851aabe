"""SASL on the Kafka listener with real clients (docs/protocol.md §18.2).

A broker with ``kafka_security_protocol=SASL_PLAINTEXT`` and users from
``trikafka users``: confluent-kafka (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN),
aiokafka (SCRAM-SHA-512), kafka-python (SCRAM-SHA-256) and kcat produce and
consume; a wrong password and an unknown user each get the client's
authentication error while the broker keeps serving; a user added or deleted
while the broker runs is seen at the next login; with ZooKeeper, a user added
with ``--zookeeper`` logs in on every broker.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
from typing import Any, Iterator

import pytest
import trio

from tests.helpers.cli import cli
from tests.helpers.kafka_clients import login_error, read_with_confluent, running_sasl_broker
from tests.helpers.kafka_clients import sasl_settings as client_sasl_settings
from tests.helpers.kafka_processes import kafka_cluster
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

CLIENT_TIMEOUT_S = 30.0
KCAT = "/usr/bin/kcat"
USER, PASSWORD = "alice", "alice-secret"


def sasl_settings(mechanism: str, user: str = USER, password: str = PASSWORD) -> dict[str, Any]:
    """librdkafka's settings for a SASL_PLAINTEXT login (alice's unless told)."""
    return client_sasl_settings(mechanism, user, password)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKafkaBroker]:
    with running_sasl_broker(str(tmp_path_factory.mktemp("sasl-broker")), USER, PASSWORD) as running:
        yield running


def produce_with_confluent(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "error_cb": errors.append, **settings})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_produces_and_consumes(kafka: RunningKafkaBroker, mechanism: str) -> None:
    topic = f"confluent-{mechanism.lower()}"
    values = [f"{mechanism}-{i}".encode() for i in range(20)]
    produce_with_confluent(kafka.bootstrap, topic, values, **sasl_settings(mechanism))
    seen = read_with_confluent(kafka.bootstrap, topic, 1, len(values), **sasl_settings(mechanism))
    assert [s.value for s in seen] == values


@pytest.mark.parametrize("password, user", [("wrong", USER), (PASSWORD, "mallory")],
                         ids=["wrong-password", "unknown-user"])
def test_bad_credentials_get_librdkafkas_authentication_error(kafka: RunningKafkaBroker, user: str,
                                                              password: str) -> None:
    from confluent_kafka import KafkaError

    error = login_error(kafka.bootstrap, **sasl_settings("SCRAM-SHA-512", user, password))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "invalid credentials" in error.str()
    produce_with_confluent(kafka.bootstrap, "after-bad-login", [b"still serving"], **sasl_settings("SCRAM-SHA-512"))


def test_a_client_without_sasl_is_refused(kafka: RunningKafkaBroker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "socket.timeout.ms": 3000})
    with pytest.raises(Exception):
        admin.list_topics(timeout=3)


def test_aiokafka_scram_sha_512(kafka: RunningKafkaBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "aiokafka-sasl"
    settings: dict[str, Any] = dict(bootstrap_servers=kafka.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                                    sasl_plain_password=PASSWORD)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **settings)
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            while len(got) < 10:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), CLIENT_TIMEOUT_S)
                for records in batches.values():
                    got += [r.value for r in records]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"aio-{i}".encode() for i in range(10)]


def test_aiokafka_wrong_password(kafka: RunningKafkaBroker, caplog: pytest.LogCaptureFixture) -> None:
    """aiokafka fails to bootstrap, logging the broker's error 58 (SaslAuthenticationFailed)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                                    sasl_plain_password="wrong", request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(run())
    assert any("SaslAuthenticationFailed" in r.getMessage() and "invalid credentials" in r.getMessage()
               for r in caplog.records if r.name.startswith("aiokafka")), caplog.text


def test_kafka_python_scram_sha_256(kafka: RunningKafkaBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    settings: dict[str, Any] = dict(bootstrap_servers=kafka.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER,
                                    sasl_plain_password=PASSWORD)
    producer = KafkaProducer(acks=1, **settings)
    for i in range(10):
        producer.send("kafka-python-sasl", f"kp-{i}".encode()).get(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(group_id=None, auto_offset_reset="earliest", enable_auto_commit=False, **settings)
    try:
        consumer.assign([TopicPartition("kafka-python-sasl", 0)])
        got: list[bytes] = []
        for _ in range(60):
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
            if len(got) >= 10:
                break
    finally:
        consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(10)]


@pytest.mark.slow  # kafka-python retries its bootstrap for 30 s before it gives up
def test_kafka_python_unknown_user(kafka: RunningKafkaBroker, caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python cannot bootstrap, logging the broker's error 58 (SaslAuthenticationFailedError)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=kafka.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="mallory",
                      sasl_plain_password=PASSWORD, request_timeout_ms=3000, max_block_ms=3000)
    assert any("SaslAuthenticationFailed" in r.getMessage() and "invalid credentials" in r.getMessage()
               for r in caplog.records if r.name.startswith("kafka")), caplog.text


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}"]
    return subprocess.run([KCAT, "-b", bootstrap, *sasl, *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_kcat_produces_and_consumes(kafka: RunningKafkaBroker) -> None:
    lines = [f"line-{i}" for i in range(30)]
    produced = kcat(kafka.bootstrap, "-P", "-t", "kcat-sasl", stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(kafka.bootstrap, "-C", "-t", "kcat-sasl", "-o", "beginning", "-e")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines


def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``trikafka ARGS`` as a child process, from a test that is not async."""
    return trio.run(functools.partial(cli, *args, stdin=stdin))


def test_users_added_and_deleted_while_the_broker_runs(tmp_path) -> None:
    log_dir = str(tmp_path / "broker")
    with running_kafka_broker(log_dir, kafka_security_protocol="SASL_PLAINTEXT") as running:
        settings = sasl_settings("SCRAM-SHA-512", "bob", "bob-secret")
        assert "invalid credentials" in login_error(running.bootstrap, **settings).str()
        status, _out, err = run_cli("users", "add", "bob", "--password-stdin", "--log-dir", log_dir,
                                    stdin=b"bob-secret\n")
        assert status == 0, err
        produce_with_confluent(running.bootstrap, "bobs", [b"hello"], **settings)
        status, out, err = run_cli("users", "list", "--log-dir", log_dir)
        assert status == 0 and out.split() == ["bob", "SCRAM-SHA-512,SCRAM-SHA-256"], (out, err)
        status, _out, err = run_cli("users", "delete", "bob", "--log-dir", log_dir)
        assert status == 0, err
        assert "invalid credentials" in login_error(running.bootstrap, **settings).str()


async def test_a_user_added_in_zookeeper_logs_in_on_every_broker(zk_chroot, tmp_path) -> None:
    password_file = tmp_path / "inter-broker-password"
    password_file.write_text("broker-secret\n")
    inter_broker = ("--inter-broker-sasl-username", "broker", "--inter-broker-sasl-password-file", str(password_file))
    async with kafka_cluster(tmp_path, zk_chroot, 2, "--kafka-security", "SASL_PLAINTEXT", *inter_broker) as cluster:
        status, _out, err = await cli("users", "add", "carol", "--password-stdin", "--zookeeper", zk_chroot,
                                      stdin=b"carol-secret\n")
        assert status == 0, err
        settings = sasl_settings("SCRAM-SHA-256", "carol", "carol-secret")
        for broker in cluster.brokers.values():
            await trio.to_thread.run_sync(functools.partial(produce_with_confluent, broker.bootstrap,
                                                            f"carol-{broker.broker_id}", [b"hi"], **settings))
        status, _out, err = await cli("users", "add", "carol", "--password-stdin", "--zookeeper", zk_chroot,
                                      stdin=b"carol-changed\n")
        assert status == 0, err
        changed = sasl_settings("SCRAM-SHA-512", "carol", "carol-changed")
        for broker in cluster.brokers.values():  # the new password logs in, the old one no longer
            await trio.to_thread.run_sync(functools.partial(produce_with_confluent, broker.bootstrap,
                                                            f"carol-{broker.broker_id}", [b"again"], **changed))
            refused = await trio.to_thread.run_sync(functools.partial(login_error, broker.bootstrap, **settings))
            assert "invalid credentials" in refused.str()
        status, _out, err = await cli("users", "delete", "carol", "--zookeeper", zk_chroot)
        assert status == 0, err
        for broker in cluster.brokers.values():  # each broker's watch drops the user soon after
            await refused_eventually(broker.kafka_port, "carol", "carol-changed")


async def refused_eventually(port: int, user: str, password: str) -> None:
    """Log in with trikafka's client until the broker refuses (ZooKeeper watches lag the command a little)."""
    from kio.schema.errors import ErrorCode

    from trikafka.client.kafka import KafkaResponseError, SaslLogin
    from trikafka.client.kafka.connection import open_kafka_connection
    from trikafka.kafka.sasl import SaslMechanism

    login = SaslLogin(SaslMechanism.SCRAM_SHA_512, user, password)
    with trio.fail_after(CLIENT_TIMEOUT_S):
        while True:
            try:
                connection = await open_kafka_connection("127.0.0.1", port, sasl=login)
            except KafkaResponseError as exc:
                assert exc.error_code == ErrorCode.sasl_authentication_failed, exc
                return
            await connection.aclose()
            await trio.sleep(0.05)


async def _trio_client_round_trip(bootstrap: str, login: Any) -> list[bytes]:
    from trikafka.client.kafka import EARLIEST, KafkaClient, KafkaProducer, PartitionConsumer

    async with KafkaClient(bootstrap, sasl=login) as client:
        async with KafkaProducer.open(client) as producer:
            for i in range(5):
                await producer.send("trio-sasl", f"t{i}".encode())
        got: list[bytes] = []
        async with PartitionConsumer(client, "trio-sasl", 0, EARLIEST) as consumer:
            with trio.fail_after(CLIENT_TIMEOUT_S):
                while got[-5:] != [f"t{i}".encode() for i in range(5)]:  # each parametrization adds five
                    got += [r.value for r in await consumer.fetch() if r.value is not None]
        return got


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_trikafkas_trio_client_logs_in(kafka: RunningKafkaBroker, mechanism: str) -> None:
    from trikafka.client.kafka import SaslLogin
    from trikafka.kafka.sasl import SaslMechanism

    login = SaslLogin(SaslMechanism.parse(mechanism), USER, PASSWORD)
    got = trio.run(_trio_client_round_trip, kafka.bootstrap, login)
    assert got[-5:] == [f"t{i}".encode() for i in range(5)]


def test_trikafkas_trio_client_with_a_wrong_password(kafka: RunningKafkaBroker) -> None:
    from kio.schema.errors import ErrorCode

    from trikafka.client.kafka import KafkaClient, KafkaResponseError, SaslLogin
    from trikafka.kafka.sasl import SaslMechanism

    async def connect() -> None:
        async with KafkaClient(kafka.bootstrap, sasl=SaslLogin(SaslMechanism.SCRAM_SHA_512, USER, "wrong")) as client:
            await client.refresh_metadata()

    with pytest.raises(KafkaResponseError) as raised:
        trio.run(connect)
    assert raised.value.error_code == ErrorCode.sasl_authentication_failed
    assert "invalid credentials" in str(raised.value)


def test_cli_produce_and_consume_with_sasl(kafka: RunningKafkaBroker, tmp_path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    sasl = ("--kafka", kafka.bootstrap, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", USER,
            "--sasl-password-file", str(password_file))
    status, _out, err = run_cli("produce", "cli-sasl", *sasl, stdin=b"one\ntwo\n")
    assert status == 0, err
    status, out, err = run_cli("consume", "cli-sasl", *sasl, "--exit-at-end", "-f", "%s\\n")
    assert status == 0 and out.splitlines() == ["one", "two"], (out, err)
    status, _out, err = run_cli("consume", "cli-sasl", "--kafka", kafka.bootstrap, "--sasl-mechanism", "PLAIN",
                                "--sasl-username", USER)
    assert status == 2 and "password" in err, err
