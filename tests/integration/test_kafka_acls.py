"""ACLs on the Kafka listener (docs/protocol.md §18.3), with other people's clients.

Every client here is ``User:ANONYMOUS`` (no SASL or TLS on this listener), so
the ACLs name that principal.  Each test starts its own broker with
``authorizer=acl`` on a log dir whose ACLs ``trikafka acls`` edits.
"""

from __future__ import annotations

import subprocess
import time
from typing import Iterator

import pytest
import trio
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaAdminClient
from kafka.errors import TopicAuthorizationFailedError

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_kafka_python
from tests.helpers.kafka_processes import kafka_serve
from trikafka.broker.kafka.acl import store as acl_store
from trikafka.cli import build_parser
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

ANONYMOUS = "User:ANONYMOUS"
KCAT = "/usr/bin/kcat"
ACL_FILE_POLL_S = 0.05


def trikafka(argv: list[str]) -> int:
    """``trikafka ARGV`` in this process: the CLI's parser, checks and command (the test's logging kept)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.validate(parser, args)
    return int(args.func(args))


def acls(action: str, log_dir: str, *flags: str) -> None:
    """``trikafka acls ACTION --log-dir D FLAGS``."""
    assert trikafka(["acls", action, "--log-dir", log_dir, *flags]) == 0


def grant(log_dir: str, operation: str, *resource: str, principal: str = ANONYMOUS) -> None:
    acls("add", log_dir, "--principal", principal, "--operation", operation, *resource)


def wait_for_acls(running: RunningKafkaBroker, count: int) -> None:
    """Return once the broker's authorizer holds ``count`` ACLs (it reads the file every ``FILE_POLL_S``)."""
    assert running.broker.kafka is not None
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(running.broker.kafka.authorizer.acls) != count:
        assert time.monotonic() < deadline, "the broker never loaded the ACL file"
        time.sleep(0.05)


@pytest.fixture
def secured(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningKafkaBroker]:
    """A broker with authorization on, where ANONYMOUS may create topics (Create on the Cluster) and nothing else.
    It reads the ACL file every 50 ms (a broker reads it once a second): each grant is waited for."""
    monkeypatch.setattr(acl_store, "FILE_POLL_S", ACL_FILE_POLL_S)
    log_dir = str(tmp_path / "data")
    grant(log_dir, "Create", "--cluster")
    with running_kafka_broker(log_dir, authorizer="acl", auto_create_topics_enable=False) as running:
        yield running


def produce_one(bootstrap: str, topic: str, value: bytes = b"v") -> KafkaError | None:
    """One record through librdkafka; the delivery error, or None once acknowledged."""
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "retries": 0})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    assert outcome, "librdkafka never reported the delivery"
    return outcome[0]


def test_produce_is_refused_until_write_is_granted_and_read_until_read_is(secured: RunningKafkaBroker) -> None:
    create_topic(secured.bootstrap, "orders")
    error = produce_one(secured.bootstrap, "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(secured.log_dir, "Write", "--topic", "orders")
    wait_for_acls(secured, 2)
    assert produce_one(secured.bootstrap, "orders", b"first") is None
    with pytest.raises(TopicAuthorizationFailedError):
        read_with_kafka_python(secured.bootstrap, "orders", 1, 1)
    grant(secured.log_dir, "Read", "--topic", "orders")
    wait_for_acls(secured, 3)
    assert [s.value for s in read_with_kafka_python(secured.bootstrap, "orders", 1, 1)] == [b"first"]


def test_metadata_lists_only_the_topics_the_principal_may_describe(secured: RunningKafkaBroker) -> None:
    for topic in ("visible", "hidden", "pre-a", "pre-b"):
        create_topic(secured.bootstrap, topic)
    grant(secured.log_dir, "Describe", "--topic", "visible")
    grant(secured.log_dir, "Read", "--topic", "pre-", "--prefixed")  # Read implies Describe
    wait_for_acls(secured, 3)
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=10000)
    try:
        assert set(admin.list_topics()) == {"visible", "pre-a", "pre-b"}
    finally:
        admin.close()


def test_a_deny_overrides_an_allow(secured: RunningKafkaBroker) -> None:
    create_topic(secured.bootstrap, "audit-log")
    grant(secured.log_dir, "All", "--topic", "audit-", "--prefixed", principal="User:*")
    acls("add", secured.log_dir, "--principal", ANONYMOUS, "--operation", "Write", "--topic", "audit-log", "--deny")
    wait_for_acls(secured, 3)
    error = produce_one(secured.bootstrap, "audit-log")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls("remove", secured.log_dir, "--principal", ANONYMOUS, "--operation", "Write", "--topic", "audit-log",
         "--deny")
    wait_for_acls(secured, 2)
    assert produce_one(secured.bootstrap, "audit-log") is None


def test_a_group_consumer_needs_read_on_its_group(secured: RunningKafkaBroker) -> None:
    from confluent_kafka import Consumer

    create_topic(secured.bootstrap, "events")
    grant(secured.log_dir, "Write", "--topic", "events")
    grant(secured.log_dir, "Read", "--topic", "events")
    wait_for_acls(secured, 3)
    assert produce_one(secured.bootstrap, "events", b"e0") is None

    def consume_in_group() -> bytes:
        consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "billing",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["events"])
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error():
                    raise KafkaException(message.error())
                return bytes(message.value())
            raise AssertionError("no record within the client timeout")
        finally:
            consumer.close()

    with pytest.raises(KafkaException) as refused:
        consume_in_group()
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(secured.log_dir, "Read", "--group", "billing")
    wait_for_acls(secured, 4)
    assert consume_in_group() == b"e0"


def test_super_users_are_allowed_everything(tmp_path) -> None:
    with running_kafka_broker(str(tmp_path / "data"), authorizer="acl", super_users=ANONYMOUS) as running:
        create_topic(running.bootstrap, "anything")
        assert produce_one(running.bootstrap, "anything") is None


def test_kafka_python_sees_topic_authorization_failed_on_create_without_create(tmp_path) -> None:
    with running_kafka_broker(str(tmp_path / "data"), authorizer="acl") as running:
        with pytest.raises(TopicAuthorizationFailedError):
            create_topic(running.bootstrap, "nope")


def test_confluent_admin_creates_describes_and_deletes_acls(tmp_path) -> None:
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    log_dir = str(tmp_path / "data")
    with running_kafka_broker(log_dir, authorizer="acl", super_users=ANONYMOUS) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        bindings = [
            AclBinding(ResourceType.TOPIC, "payments", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "pay-", ResourcePatternType.PREFIXED, "User:alice", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "payments", ResourcePatternType.LITERAL, "User:mallory", "*",
                       AclOperation.ALL, AclPermissionType.DENY),
        ]
        for future in admin.create_acls(bindings, request_timeout=CLIENT_TIMEOUT_S).values():
            assert future.result(CLIENT_TIMEOUT_S) is None
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        assert set(admin.describe_acls(everything).result(CLIENT_TIMEOUT_S)) == set(bindings)
        # MATCH: every ACL that applies to the topic "payments"
        on_payments = AclBindingFilter(ResourceType.TOPIC, "payments", ResourcePatternType.MATCH, None, None,
                                       AclOperation.ANY, AclPermissionType.ANY)
        assert set(admin.describe_acls(on_payments).result(CLIENT_TIMEOUT_S)) == {bindings[0], bindings[2]}
        # the store is the one `trikafka acls list` reads
        assert trikafka(["acls", "list", "--log-dir", log_dir]) == 0
        mallory = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:mallory", None,
                                   AclOperation.ANY, AclPermissionType.ANY)
        deleted = admin.delete_acls([mallory])[mallory].result(CLIENT_TIMEOUT_S)
        assert deleted == [bindings[2]]
        assert set(admin.describe_acls(everything).result(CLIENT_TIMEOUT_S)) == set(bindings[:2])


def test_acl_apis_need_alter_on_the_cluster(secured: RunningKafkaBroker) -> None:
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, ANONYMOUS, "*", AclOperation.ALL,
                         AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding])[binding].result(CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert len(secured.broker.kafka.authorizer.acls) == 1  # only the fixture's Create on the cluster


def kcat_produce(bootstrap: str, topic: str, line: str) -> subprocess.CompletedProcess[str]:
    """kcat (librdkafka) producing one line; its completed process."""
    return subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic], input=line + "\n", capture_output=True,
                          text=True, timeout=CLIENT_TIMEOUT_S * 2)


async def test_kcat_against_trikafka_serve_with_the_authorizer_set(tmp_path) -> None:
    log_dir = tmp_path / "broker"
    grant(str(log_dir), "Create", "--cluster")
    flags = ("--set", "authorizer=acl", "--set", "super.users=User:admin")
    async with kafka_serve(log_dir, *flags) as broker:
        await trio.to_thread.run_sync(create_topic, broker.bootstrap, "kcat-acl")
        refused = await trio.to_thread.run_sync(kcat_produce, broker.bootstrap, "kcat-acl", "denied")
        assert refused.returncode != 0 and "authorization failed" in refused.stderr.lower(), refused.stderr
        grant(str(log_dir), "Write", "--topic", "kcat-acl")
        with trio.fail_after(CLIENT_TIMEOUT_S):  # the broker reads the ACL file once a second
            while (await trio.to_thread.run_sync(kcat_produce, broker.bootstrap, "kcat-acl", "allowed")).returncode:
                await trio.sleep(0.2)


def test_acl_requests_with_codes_that_mean_nothing_answer_invalid_request(tmp_path) -> None:
    from kio.schema.create_acls.v2.request import AclCreation, CreateAclsRequest
    from kio.schema.describe_acls.v2.request import DescribeAclsRequest
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i8

    from tests.helpers.kafka_wire import exchange

    with running_kafka_broker(str(tmp_path / "data"), authorizer="acl", super_users=ANONYMOUS) as running:
        creations = (AclCreation(resource_type=i8(2), resource_name="t", resource_pattern_type=i8(3),
                                 principal=ANONYMOUS, host="*", operation=i8(99), permission_type=i8(3)),
                     AclCreation(resource_type=i8(1), resource_name="t", resource_pattern_type=i8(3),
                                 principal=ANONYMOUS, host="*", operation=i8(3), permission_type=i8(3)),
                     AclCreation(resource_type=i8(2), resource_name="t", resource_pattern_type=i8(3),
                                 principal="alice", host="*", operation=i8(3), permission_type=i8(3)))
        created = exchange(running.bootstrap, 30, 2, CreateAclsRequest(creations=creations))
        assert [r.error_code for r in created.results] == [ErrorCode.invalid_request] * 3
        described = exchange(running.bootstrap, 29, 2, DescribeAclsRequest(
            resource_type_filter=i8(0), resource_name_filter=None, pattern_type_filter=i8(1), principal_filter=None,
            host_filter=None, operation=i8(1), permission_type=i8(1)))
        assert described.error_code == ErrorCode.invalid_request and described.resources == ()
        assert len(running.broker.kafka.authorizer.acls) == 0  # nothing stored, the broker still serving
        assert produce_one(running.bootstrap, "after-garbage") is None


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(secured: RunningKafkaBroker) -> None:
    from kio.schema.errors import ErrorCode

    from tests.helpers.kafka_wire import init_producer_id

    assert init_producer_id(secured.bootstrap)[0] == ErrorCode.cluster_authorization_failed
    assert init_producer_id(secured.bootstrap, transactional_id="tx")[0] == \
        ErrorCode.transactional_id_authorization_failed
    create_topic(secured.bootstrap, "eos")
    grant(secured.log_dir, "Write", "--topic", "eos")  # KIP-679: Write on a topic is enough
    wait_for_acls(secured, 2)
    assert init_producer_id(secured.bootstrap)[0] == ErrorCode.none
    producer = ConfluentProducer({"bootstrap.servers": secured.bootstrap, "enable.idempotence": True})
    outcome: list[KafkaError | None] = []
    producer.produce("eos", b"once", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    assert outcome == [None]


def test_the_transaction_apis_need_their_acls(secured: RunningKafkaBroker) -> None:
    """§18.3: Write on the TransactionalId for every transaction api, then Write on each topic
    (AddPartitionsToTxn), Read on the group (AddOffsetsToTxn, TxnOffsetCommit) and Read on each
    topic (TxnOffsetCommit)."""
    from kio.schema.errors import ErrorCode

    from tests.helpers.kafka_wire import (add_offsets_to_txn, add_partitions_to_txn, end_txn, init_transactional,
                                          retry_while_retriable, txn_offset_commit)

    bootstrap, log_dir = secured.bootstrap, secured.log_dir
    create_topic(bootstrap, "txn-acl")
    assert add_partitions_to_txn(bootstrap, "tx", 0, 0, [("txn-acl", 0)]) == {
        ("txn-acl", 0): ErrorCode.transactional_id_authorization_failed}
    assert end_txn(bootstrap, "tx", 0, 0, True) == ErrorCode.transactional_id_authorization_failed
    assert add_offsets_to_txn(bootstrap, "tx", 0, 0, "g") == ErrorCode.transactional_id_authorization_failed
    assert txn_offset_commit(bootstrap, "tx", 0, 0, "g", "txn-acl", {0: 1}) == {
        0: ErrorCode.transactional_id_authorization_failed}
    grant(log_dir, "Write", "--transactional-id", "tx")
    wait_for_acls(secured, 2)
    error, pid, epoch = init_transactional(bootstrap, "tx")
    assert error == ErrorCode.none
    assert add_partitions_to_txn(bootstrap, "tx", pid, epoch, [("txn-acl", 0)]) == {
        ("txn-acl", 0): ErrorCode.topic_authorization_failed}
    assert add_offsets_to_txn(bootstrap, "tx", pid, epoch, "g") == ErrorCode.group_authorization_failed
    assert txn_offset_commit(bootstrap, "tx", pid, epoch, "g", "txn-acl", {0: 1}) == {
        0: ErrorCode.group_authorization_failed}
    grant(log_dir, "Write", "--topic", "txn-acl")
    grant(log_dir, "Read", "--group", "g")
    wait_for_acls(secured, 4)
    assert add_partitions_to_txn(bootstrap, "tx", pid, epoch, [("txn-acl", 0)]) == {("txn-acl", 0): ErrorCode.none}
    assert add_partitions_to_txn(bootstrap, "tx", pid, epoch, [("txn-acl", 0)], version=4, verify_only=True) == {
        ("txn-acl", 0): ErrorCode.cluster_authorization_failed}  # brokers' form: ClusterAction on the Cluster
    assert retry_while_retriable(lambda: add_offsets_to_txn(bootstrap, "tx", pid, epoch, "g")) == ErrorCode.none
    assert txn_offset_commit(bootstrap, "tx", pid, epoch, "g", "txn-acl", {0: 1}) == {
        0: ErrorCode.topic_authorization_failed}  # Read on the topic, not Write
    assert end_txn(bootstrap, "tx", pid, epoch, False) == ErrorCode.none


def test_altering_a_topics_settings_needs_alter_configs_on_it(secured: RunningKafkaBroker) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    create_topic(secured.bootstrap, "tuned")
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})

    def alter() -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, "tuned", incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
        (future,) = admin.incremental_alter_configs([resource]).values()
        future.result(timeout=CLIENT_TIMEOUT_S)

    with pytest.raises(KafkaException) as refused:
        alter()
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(secured.log_dir, "AlterConfigs", "--topic", "tuned")
    wait_for_acls(secured, 2)
    alter()
