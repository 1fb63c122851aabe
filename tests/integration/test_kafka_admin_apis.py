"""The smaller admin apis of docs/protocol.md §16.4, through the clients that have the call."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from tests.helpers.kafka_clients import login_error, running_sasl_broker, sasl_settings
from tests.helpers.kafka_wire import exchange
from trikafka.broker.credentials import CredentialFile
from trikafka.kafka.sasl import SaslMechanism
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


@pytest.fixture
def python_admin(kafka) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def test_kafka_pythons_describe_cluster_reads_v1(kafka, python_admin):
    described = python_admin.describe_cluster()
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    assert described["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": port, "rack": None}]
    assert described["controller_id"] == 0 and len(described["cluster_id"]) == 22


def test_confluents_describe_cluster(kafka):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    described = admin.describe_cluster().result(TIMEOUT_S)
    assert [node.id for node in described.nodes] == [0] and described.controller.id == 0


def test_describe_cluster_of_controllers_is_a_mismatched_endpoint_type(kafka):
    for endpoint_type, error in ((1, ErrorCode.none), (2, ErrorCode.mismatched_endpoint_type)):
        answer = exchange(kafka.bootstrap, 60, 1, DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(endpoint_type)))
        assert (answer.error_code, answer.endpoint_type) == (error, 1)
        assert len(answer.brokers) == (1 if error == ErrorCode.none else 0)


# ----------------------------------------------------------------- SCRAM credentials (§18.2)

ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKafkaBroker]:
    with running_sasl_broker(str(tmp_path_factory.mktemp("scram-broker")), ADMIN_USER, ADMIN_PASSWORD) as running:
        yield running


def _logs_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a librdkafka admin client with this login can describe the cluster."""
    return login_error(bootstrap, **sasl_settings(mechanism, user, password)) is None


def test_confluent_adds_a_user_who_then_logs_in_and_describes_it(sasl_kafka):
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": sasl_kafka.bootstrap,
                         **sasl_settings("SCRAM-SHA-512", ADMIN_USER, ADMIN_PASSWORD)})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("bob", info, b"bob-secret")])
    assert futures["bob"].result(TIMEOUT_S) is None
    assert _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-256", "bob", "bob-secret")
    assert not _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-256", "bob", "wrong")
    assert not _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-512", "bob", "bob-secret")  # only SHA-256 stored
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    stored = CredentialFile(sasl_kafka.log_dir).read()  # the store `trikafka users` reads
    assert set(stored) >= {ADMIN_USER, "bob"} and stored["bob"][SaslMechanism.SCRAM_SHA_256].iterations == 8192
    every = admin.describe_user_scram_credentials().result(TIMEOUT_S)
    assert {ADMIN_USER, "bob"} <= set(every)
    too_few = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"x")
    with pytest.raises(Exception, match="iterations"):
        admin.alter_user_scram_credentials([too_few])["bob"].result(TIMEOUT_S)


def test_kafka_python_alters_deletes_and_sees_errors(sasl_kafka):
    from kafka.admin import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion

    admin = KafkaAdminClient(bootstrap_servers=sasl_kafka.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN_USER,
                             sasl_plain_password=ADMIN_PASSWORD)
    try:
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_512, "carol-secret"),
            UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_256, "carol-secret")]) == {"carol": None}
        assert _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-512", "carol", "carol-secret")
        assert _logs_in(sasl_kafka.bootstrap, "PLAIN", "carol", "carol-secret")
        described = admin.describe_user_scram_credentials(["carol", "nobody"])
        assert [(i["mechanism"], i["iterations"]) for i in described["carol"]["credential_infos"]] == [
            (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
        assert "does not exist" in described["nobody"]["error"]
        errors = admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512),
            UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_512, "again")])
        assert "does not exist" in errors["nobody"] and "twice" in errors["carol"]
        assert _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-512", "carol", "carol-secret")  # nothing applied
        assert admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512),
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]) == {"carol": None}
        assert not _logs_in(sasl_kafka.bootstrap, "SCRAM-SHA-512", "carol", "carol-secret")
        assert "carol" not in CredentialFile(sasl_kafka.log_dir).read()  # the last mechanism took the user
    finally:
        admin.close()


def test_scram_and_producer_apis_need_their_acls(tmp_path):
    """librdkafka 2.x frees an alloca'd string on a DescribeUserScramCredentials answer with a top-level
    error and crashes the process (against Kafka too), so that denial is checked with kafka-python."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from kafka import TopicPartition
    from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    with running_kafka_broker(str(tmp_path), authorizer="acl") as running:  # ANONYMOUS, no ACLs
        python_admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
        try:
            with pytest.raises(ClusterAuthorizationFailedError, match="Cluster authorization failed"):
                python_admin.describe_user_scram_credentials()
            with pytest.raises(TopicAuthorizationFailedError):  # DescribeProducers: Read on the topic
                python_admin.describe_producers([TopicPartition("any", 0)], broker_id=0)
        finally:
            python_admin.close()
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        upsertion = UserScramCredentialUpsertion("eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"x")
        with pytest.raises(KafkaException) as refused:
            admin.alter_user_scram_credentials([upsertion])["eve"].result(TIMEOUT_S)
        assert refused.value.args[0].code() == ErrorCode.cluster_authorization_failed
        assert CredentialFile(str(tmp_path)).read() == {}


# ----------------------------------------------------------------- DescribeProducers (§19.2.2)

def test_kafka_python_describes_an_idempotent_and_a_transactional_producer(kafka, python_admin):
    from confluent_kafka import Producer
    from kafka import TopicPartition
    from kafka.errors import UnknownTopicOrPartitionError

    from tests.helpers.kafka_clients import create_topic
    from tests.helpers.kafka_transactions import confluent_transactional_producer

    create_topic(kafka.bootstrap, "produced", partitions=1)
    idempotent = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    for i in range(5):
        idempotent.produce("produced", value=b"%d" % i, partition=0)
    assert idempotent.flush(TIMEOUT_S) == 0
    transactional = confluent_transactional_producer(kafka.bootstrap, "describe-producers")
    transactional.begin_transaction()
    transactional.produce("produced", value=b"in a transaction", partition=0)
    assert transactional.flush(TIMEOUT_S) == 0
    partition = TopicPartition("produced", 0)

    def producers() -> list[tuple[int, int, int, int]]:
        """(epoch, last sequence, transaction start offset, coordinator epoch) of each producer, by id."""
        state = python_admin.describe_producers([partition])[partition].active_producers
        assert all(p.last_timestamp > 0 for p in state)
        return [(p.producer_epoch, p.last_sequence, p.current_transaction_start_offset, p.coordinator_epoch)
                for p in state]

    assert sorted(producers()) == [(0, 0, 5, -1), (0, 4, -1, -1)]  # no marker yet: no coordinator epoch
    transactional.commit_transaction(TIMEOUT_S)
    # the COMMIT marker's coordinator epoch: the one broker's first leadership of __transaction_state
    assert sorted(producers()) == [(0, 0, -1, 0), (0, 4, -1, -1)]
    with pytest.raises(UnknownTopicOrPartitionError):
        python_admin.describe_producers([TopicPartition("produced", 3)], broker_id=0)


async def test_scram_credentials_altered_on_one_broker_are_in_zookeeper_for_all(zk_chroot, tmp_path) -> None:
    """ZooKeeper mode (§18.2): the users' znodes are the store, as for `trikafka users --zookeeper`."""
    import functools

    import trio
    from kafka.admin import ScramMechanism, UserScramCredentialUpsertion

    from tests.helpers.cli import cli
    from tests.helpers.kafka_processes import kafka_cluster

    def alter_then_describe(alter_at: str, describe_at: str) -> dict:
        one, two = (KafkaAdminClient(bootstrap_servers=b) for b in (alter_at, describe_at))
        try:
            assert one.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "dave", ScramMechanism.SCRAM_SHA_512, "dave-secret", iterations=5000)]) == {"dave": None}
            return two.describe_user_scram_credentials(["dave"])["dave"]
        finally:
            one.close()
            two.close()

    async with kafka_cluster(tmp_path, zk_chroot, 2) as cluster:
        first, second = (cluster.brokers[i].bootstrap for i in (1, 2))
        described = await trio.to_thread.run_sync(functools.partial(alter_then_describe, first, second))
        assert described["credential_infos"] == [{"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 5000}]
        status, out, err = await cli("users", "list", "--zookeeper", zk_chroot)
        assert status == 0 and out.split() == ["dave", "SCRAM-SHA-512"], (out, err)
