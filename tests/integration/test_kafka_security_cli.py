"""The command-line contract of a secured broker (docs/protocol.md §18), as an operator runs it:
``trikafka users add``, ``trikafka acls add`` and ``trikafka serve --kafka-security SASL_SSL
--tls-cert --tls-key --set authorizer=acl --set super.users=User:admin``, then other people's
clients over SCRAM-SHA-512 and TLS."""

from __future__ import annotations

import functools
from typing import Any

import trio
from confluent_kafka import KafkaError, Producer

from tests.helpers.certificates import CertificateFiles
from tests.helpers.cli import cli
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S
from tests.helpers.kafka_processes import kafka_serve


def _produce(bootstrap: str, topic: str, user: str, password: str, ca_path: str) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca_path,
                         "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
                         "message.timeout.ms": 10000})
    outcome: list[Any] = []
    producer.produce(topic, b"from " + user.encode(), on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    assert outcome, "librdkafka never reported the delivery"
    return outcome[0]


async def test_users_acls_and_a_sasl_ssl_broker_from_the_command_line(tmp_path, certificates: CertificateFiles):
    log_dir = str(tmp_path / "broker")
    for user in ("admin", "alice"):
        status, _, err = await cli("users", "add", user, "--password-stdin", "--log-dir", log_dir,
                                   stdin=f"{user}-secret\n".encode())
        assert status == 0, err
    status, _, err = await cli("acls", "add", "--principal", "User:alice", "--operation", "Write", "--topic", "orders",
                               "--log-dir", log_dir)
    assert status == 0, err
    status, out, err = await cli("users", "list", "--log-dir", log_dir)
    assert status == 0 and "alice" in out and "secret" not in out, (out, err)
    flags = ("--kafka-security", "SASL_SSL", "--tls-cert", certificates.broker_cert_path, "--tls-key",
             certificates.broker_key_path, "--set", "authorizer=acl", "--set", "super.users=User:admin",
             "--set", "auto.create.topics.enable=true")
    async with kafka_serve(tmp_path / "broker", *flags) as serve:
        produce = functools.partial(_produce, serve.bootstrap, ca_path=certificates.ca_path)
        assert await trio.to_thread.run_sync(functools.partial(produce, "orders", "admin", "admin-secret")) is None
        assert await trio.to_thread.run_sync(functools.partial(produce, "orders", "alice", "alice-secret")) is None
        denied = await trio.to_thread.run_sync(functools.partial(produce, "payroll", "alice", "alice-secret"))
        assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        # The CLI without what the listener expects names the likely cause, not only "closed the connection".
        status, _, err = await cli("topics", "--kafka", serve.bootstrap)
        assert status == 1 and "does its listener expect TLS or SASL" in err, err
        status, _, err = await cli("topics", "--kafka", serve.bootstrap, "--tls-ca", certificates.ca_path)
        assert status == 1 and "does its listener expect SASL" in err, err
