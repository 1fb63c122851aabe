"""SASL over TLS, and authorization of authenticated principals (docs/protocol.md §18.1-§18.3).

One broker serves ``SASL_SSL`` with users from the log dir's credential store
and ``authorizer=acl`` with ``super.users=User:admin``: confluent-kafka and
aiokafka log in with SCRAM-SHA-512 over TLS, a wrong password is refused, and
what ``User:alice`` may do is what the ACLs grant her, while the admin may do
everything.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as ConfluentProducer

from tests.helpers.certificates import CertificateFiles
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, read_with_confluent
from trikafka.broker.credentials import CredentialFile, new_record
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

ADMIN, ALICE = ("admin", "admin-secret"), ("alice", "alice-secret")
MECHANISM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: CertificateFiles) -> Iterator[RunningKafkaBroker]:
    log_dir = str(tmp_path_factory.mktemp("sasl-ssl"))
    for user, password in (ADMIN, ALICE):
        CredentialFile(log_dir).add(user, new_record(password))
    with running_kafka_broker(log_dir, kafka_security_protocol="SASL_SSL", authorizer="acl",
                              super_users="User:admin", **certificates.broker_settings()) as running:
        yield running


def settings(certificates: CertificateFiles, user: tuple[str, str]) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": certificates.ca_path,
            "sasl.mechanisms": MECHANISM, "sasl.username": user[0], "sasl.password": user[1]}


def produce(bootstrap: str, topic: str, value: bytes, **config: Any) -> KafkaError | None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **config})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    assert outcome, "librdkafka never reported the delivery"
    return outcome[0]


def admin_client(bootstrap: str, config: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **config})


def create_topic(bootstrap: str, topic: str, config: dict[str, Any]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap, config)  # kept alive until its future is done
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)


def grant_write(bootstrap: str, topic: str, principal: str, config: dict[str, Any]) -> None:
    """CreateAcls through librdkafka's AdminClient, as the logged-in ``config`` user."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    admin = admin_client(bootstrap, config)  # kept alive until its futures are done
    for future in admin.create_acls([binding]).values():
        future.result(CLIENT_TIMEOUT_S)


def test_scram_over_tls_with_acls_for_the_logged_in_user(secured: RunningKafkaBroker,
                                                          certificates: CertificateFiles) -> None:
    admin, alice = settings(certificates, ADMIN), settings(certificates, ALICE)
    create_topic(secured.bootstrap, "ledger", admin)
    assert produce(secured.bootstrap, "ledger", b"by admin", **admin) is None  # a super user
    refused = produce(secured.bootstrap, "ledger", b"by alice", **alice)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|authoriz"):
        grant_write(secured.bootstrap, "ledger", "User:alice", alice)  # alice may not grant herself
    grant_write(secured.bootstrap, "ledger", "User:alice", admin)
    assert produce(secured.bootstrap, "ledger", b"by alice", **alice) is None
    seen = read_with_confluent(secured.bootstrap, "ledger", 1, 2, **admin)
    assert [s.value for s in seen] == [b"by admin", b"by alice"]


def test_a_wrong_password_over_tls_is_an_authentication_error(secured: RunningKafkaBroker,
                                                               certificates: CertificateFiles) -> None:
    errors: list[Any] = []
    producer = ConfluentProducer({"bootstrap.servers": secured.bootstrap, "error_cb": errors.append,
                                  **settings(certificates, ("alice", "wrong"))})
    producer.produce("ledger", b"x")
    for _ in range(int(CLIENT_TIMEOUT_S / 0.1)):
        producer.poll(0.1)
        if errors:
            break
    producer.purge()
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION


def test_aiokafka_scram_sha_512_over_tls(secured: RunningKafkaBroker, certificates: CertificateFiles) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    create_topic(secured.bootstrap, "aio-sasl-ssl", settings(certificates, ADMIN))
    login: dict[str, Any] = dict(bootstrap_servers=secured.bootstrap, security_protocol="SASL_SSL",
                                 ssl_context=certificates.client_context(), sasl_mechanism=MECHANISM,
                                 sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**login)
        await producer.start()
        try:
            await producer.send_and_wait("aio-sasl-ssl", b"over TLS")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", **login)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("aio-sasl-ssl", 0)])
            record = await asyncio.wait_for(consumer.getone(), CLIENT_TIMEOUT_S)
            return [record.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"over TLS"]
