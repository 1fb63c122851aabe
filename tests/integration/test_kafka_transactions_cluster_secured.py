"""Transactions across the brokers of a secured cluster (docs/protocol.md §18.5, §19.5.7).

Three ``trikafka serve --zookeeper`` brokers whose Kafka listener is ``SASL_SSL``, with
``authorizer=acl``: the clients log in as the super user ``admin``; the brokers log in to each
other as ``broker``, which holds only ClusterAction on the Cluster.  An output topic's partitions
are led by at least two brokers, so whichever broker coordinates the transaction, a partition
led by another is verified through AddPartitionsToTxn v4 and marked through WriteTxnMarkers over
TLS and SASL.  A read_committed reader sees the committed records.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import trio

from tests.helpers.certificates import CertificateFiles
from tests.helpers.cli import cli
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_confluent
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_transactions import confluent_transactional_producer, partition_leaders

ADMIN, BROKER = ("admin", "admin-secret"), ("broker", "broker-secret")
MECHANISM = "SCRAM-SHA-512"
PARTITIONS = 3


def _confluent(certificates: CertificateFiles) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": certificates.ca_path, "sasl.mechanisms": MECHANISM,
            "sasl.username": ADMIN[0], "sasl.password": ADMIN[1]}


def _kafka_python(certificates: CertificateFiles) -> dict[str, Any]:
    return dict(security_protocol="SASL_SSL", ssl_cafile=certificates.ca_path, sasl_mechanism=MECHANISM,
                sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])


def _commit(bootstrap: str, settings: dict[str, Any]) -> None:
    producer = confluent_transactional_producer(bootstrap, f"tx-{uuid.uuid4().hex[:6]}", **settings)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce("out", value=b"committed-%d" % p, partition=p)
    producer.commit_transaction(CLIENT_TIMEOUT_S)


async def test_a_transaction_commits_across_the_brokers_of_a_sasl_ssl_cluster_with_acls(
        zk_chroot: str, tmp_path: Any, certificates: CertificateFiles) -> None:
    for user, password in (ADMIN, BROKER):
        status, _out, err = await cli("users", "add", user, "--password-stdin", "--zookeeper", zk_chroot,
                                      stdin=f"{password}\n".encode())
        assert status == 0, err
    status, _out, err = await cli("acls", "add", "--principal", "User:broker", "--operation", "ClusterAction",
                                  "--cluster", "--zookeeper", zk_chroot)
    assert status == 0, err
    password_file = tmp_path / "inter-broker-password"
    password_file.write_text(BROKER[1] + "\n")
    flags = ("--kafka-security", "SASL_SSL", "--tls-cert", certificates.broker_cert_path,
             "--tls-key", certificates.broker_key_path, "--tls-ca", certificates.ca_path,
             "--inter-broker-sasl-username", BROKER[0], "--inter-broker-sasl-password-file", str(password_file),
             "--set", "authorizer=acl", "--set", f"super.users=User:{ADMIN[0]}",
             "--set", "transaction.state.log.num.partitions=3", "--set", "offsets.topic.num.partitions=3")
    async with kafka_cluster(tmp_path, zk_chroot, 3, *flags) as cluster:
        bootstrap = cluster.bootstrap()
        confluent = _confluent(certificates)
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "out", PARTITIONS,
                                                        {"min.insync.replicas": "2"}, replication_factor=3,
                                                        **_kafka_python(certificates)))
        leaders = await trio.to_thread.run_sync(functools.partial(partition_leaders, bootstrap, "out", **confluent))
        assert len(set(leaders.values())) >= 2, f"every partition of out led by one broker: {leaders}"
        await trio.to_thread.run_sync(_commit, bootstrap, confluent)
        committed = await trio.to_thread.run_sync(functools.partial(
            read_with_confluent, bootstrap, "out", PARTITIONS, PARTITIONS,
            **{"isolation.level": "read_committed", **confluent}))
        assert sorted(s.value for s in committed) == [b"committed-%d" % p for p in range(PARTITIONS)]
