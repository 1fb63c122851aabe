"""Client quotas from real clients (docs/protocol.md §20): DescribeClientQuotas and AlterClientQuotas
through trikafka's Trio admin client (neither confluent-kafka 2.16 nor kafka-python 3.0 has them), the
throttling a confluent-kafka producer and consumer see (their ``throttle_cb``), and the quotas' storage:
the log directory's file standalone, Kafka's ``/config`` znodes with ZooKeeper.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Iterator

import pytest
import trio
from confluent_kafka import Consumer, Producer
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import running_sasl_broker, sasl_settings
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import exchange, receive_answer
from trikafka.broker.entity_configs import ENTITY_CONFIGS_FILE
from trikafka.kafka.framing import encode_request
from trikafka.client.kafka.admin import KafkaAdmin, QuotaEntity, QuotaFilter
from trikafka.client.kafka.client import KafkaClient
from trikafka.client.kafka.errors import KafkaResponseError
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

WAIT_S = 30.0
DESCRIBE_CLUSTER = 60
ALICE_APP = QuotaEntity.of([("user", "alice"), ("client-id", "app")])
DEFAULT_USER = QuotaEntity.of([("user", None)])
SLOW = QuotaEntity.of([("client-id", "slow")])
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@pytest.fixture
def kafka(tmp_path: Any) -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(str(tmp_path), num_partitions=1) as running:
        yield running


async def alter(bootstrap: str, changes: dict[QuotaEntity, dict[str, float | None]],
                validate_only: bool = False) -> dict[QuotaEntity, Any]:
    async with KafkaClient(bootstrap) as client:
        return await KafkaAdmin(client).alter_client_quotas(changes, validate_only=validate_only)


async def describe(bootstrap: str, *filters: QuotaFilter, strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
    async with KafkaClient(bootstrap) as client:
        return await KafkaAdmin(client).describe_client_quotas(filters, strict=strict)


async def test_alter_stores_and_describe_matches_exact_default_and_specified_names(kafka: RunningKafkaBroker) -> None:
    results = await alter(kafka.bootstrap, {ALICE_APP: {"producer_byte_rate": 1024, "request_percentage": 12.5},
                                            DEFAULT_USER: {"consumer_byte_rate": 2048},
                                            SLOW: {"producer_byte_rate": 1}})
    assert results == dict.fromkeys((ALICE_APP, DEFAULT_USER, SLOW))
    everything = {ALICE_APP: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
                  DEFAULT_USER: {"consumer_byte_rate": 2048.0}, SLOW: {"producer_byte_rate": 1.0}}
    assert await describe(kafka.bootstrap) == everything
    assert await describe(kafka.bootstrap, QuotaFilter("user", EXACT, "alice")) == {ALICE_APP: everything[ALICE_APP]}
    assert await describe(kafka.bootstrap, QuotaFilter("user", EXACT, "alice"), strict=True) == {}
    assert await describe(kafka.bootstrap, QuotaFilter("user", DEFAULT)) == {DEFAULT_USER: everything[DEFAULT_USER]}
    assert await describe(kafka.bootstrap, QuotaFilter("user", SPECIFIED)) == {ALICE_APP: everything[ALICE_APP]}
    assert await describe(kafka.bootstrap, QuotaFilter("client-id"), strict=True) == {SLOW: everything[SLOW]}
    other_ip, default_ip = QuotaEntity.of([("ip", "127.0.0.2")]), QuotaEntity.of([("ip", None)])
    assert await alter(kafka.bootstrap, {other_ip: {"connection_creation_rate": 0},
                                         default_ip: {"connection_creation_rate": 1000}}) == {
        other_ip: None, default_ip: None}
    assert await describe(kafka.bootstrap, QuotaFilter("ip", EXACT, "127.0.0.2")) == {
        other_ip: {"connection_creation_rate": 0.0}}
    assert await describe(kafka.bootstrap, QuotaFilter("ip", DEFAULT)) == {default_ip: {"connection_creation_rate": 1000.0}}
    await alter(kafka.bootstrap, {other_ip: {"connection_creation_rate": None},
                                  default_ip: {"connection_creation_rate": None}})
    await alter(kafka.bootstrap, {ALICE_APP: {"request_percentage": None}, SLOW: {"producer_byte_rate": None}})
    assert await describe(kafka.bootstrap) == {ALICE_APP: {"producer_byte_rate": 1024.0},
                                               DEFAULT_USER: {"consumer_byte_rate": 2048.0}}
    with open(os.path.join(kafka.log_dir, ENTITY_CONFIGS_FILE)) as f:
        assert json.load(f) == {"version": 1, "entities": {"users/<default>": {"consumer_byte_rate": "2048"},
                                                           "users/alice/clients/app": {"producer_byte_rate": "1024"}}}


async def test_a_bad_entry_is_invalid_request_naming_it_and_validate_only_stores_nothing(
        kafka: RunningKafkaBroker) -> None:
    ip = QuotaEntity.of([("ip", "127.0.0.1")])
    ip_and_user = QuotaEntity.of([("ip", "127.0.0.1"), ("user", "alice")])
    not_an_ip = QuotaEntity.of([("ip", "broker.example")])
    results = await alter(kafka.bootstrap, {ip: {"producer_byte_rate": 1}, SLOW: {"producer_byte_rate": 0.5},
                                            ALICE_APP: {"controller_mutation_rate": 1},
                                            DEFAULT_USER: {"connection_creation_rate": 5},
                                            ip_and_user: {"connection_creation_rate": 5},
                                            not_an_ip: {"connection_creation_rate": 5}})
    assert {entity: (error.error_code, str(error).split(': ', 2)[2]) for entity, error in results.items()} == {
        ip: (ErrorCode.invalid_request, "quota key 'producer_byte_rate' is not one of an entity of type ip"),
        SLOW: (ErrorCode.invalid_request, "quota producer_byte_rate = 0.5: a whole number >= 1 is needed"),
        ALICE_APP: (ErrorCode.invalid_request,
                    "unknown quota key 'controller_mutation_rate' (served: producer_byte_rate, "
                    "consumer_byte_rate, request_percentage, connection_creation_rate)"),
        DEFAULT_USER: (ErrorCode.invalid_request,
                       "quota key 'connection_creation_rate' is not one of an entity of type user"),
        ip_and_user: (ErrorCode.invalid_request, "entity type 'ip' cannot be combined with user or client-id"),
        not_an_ip: (ErrorCode.invalid_request, "'broker.example' is not a valid IP address")}
    assert await alter(kafka.bootstrap, {SLOW: {"producer_byte_rate": 5}}, validate_only=True) == {SLOW: None}
    assert await describe(kafka.bootstrap) == {}


def test_without_the_cluster_acls_the_quota_apis_answer_cluster_authorization_failed(tmp_path: Any) -> None:
    with running_kafka_broker(str(tmp_path), authorizer="acl") as kafka:
        results = trio.run(alter, kafka.bootstrap, {SLOW: {"producer_byte_rate": 100}})
        assert results[SLOW] is not None and results[SLOW].error_code == ErrorCode.cluster_authorization_failed

        async def denied() -> KafkaResponseError:
            with pytest.raises(KafkaResponseError) as caught:
                await describe(kafka.bootstrap)
            return caught.value

        assert trio.run(denied).error_code == ErrorCode.cluster_authorization_failed
        assert kafka.broker.kafka.entity_configs.entities == {}


def test_quotas_survive_a_restart(tmp_path: Any) -> None:
    with running_kafka_broker(str(tmp_path)) as first:
        trio.run(alter, first.bootstrap, {SLOW: {"producer_byte_rate": 100}})
    with running_kafka_broker(str(tmp_path)) as second:
        assert trio.run(describe, second.bootstrap) == {SLOW: {"producer_byte_rate": 100.0}}
        assert second.broker.kafka.quotas.quota_of("producer_byte_rate", "ANONYMOUS", "slow") == (100.0, "", "slow")


def produce_throttles(bootstrap: str, client_id: str, topic: str, count: int, batch_each: bool = False,
                      **settings: Any) -> list[int]:
    """The throttle times (ms) confluent-kafka's producer was told while sending ``count`` 10 kB records
    (``batch_each``: each in a batch of its own)."""
    seen: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0,
                         "throttle_cb": lambda event: seen.append(int(event.throttle_time * 1000)), **settings})
    for _ in range(count):
        producer.produce(topic, b"x" * 10_000)
        producer.poll(0)
        if batch_each:
            assert producer.flush(WAIT_S) == 0
    assert producer.flush(WAIT_S) == 0
    producer.poll(0.5)
    return seen


def test_a_throttled_producer_is_told_throttle_time_and_another_client_is_not(kafka: RunningKafkaBroker) -> None:
    trio.run(alter, kafka.bootstrap, {SLOW: {"producer_byte_rate": 1000}})
    assert max(produce_throttles(kafka.bootstrap, "slow", "quota-produce", 2), default=0) > 0
    assert produce_throttles(kafka.bootstrap, "fast", "quota-produce", 3) == []


def test_a_users_quota_throttles_that_sasl_user_and_not_another(tmp_path: Any) -> None:
    """The user is the connection's principal (§18.2); the quota is read from the log dir's file at start."""
    from trikafka.broker.credentials import CredentialFile, new_record

    log_dir = str(tmp_path)
    CredentialFile(log_dir).add("bob", new_record("bob-secret"))
    with open(os.path.join(log_dir, ENTITY_CONFIGS_FILE), "w") as f:
        json.dump({"version": 1, "entities": {"users/alice": {"producer_byte_rate": "1000"}}}, f)
    with running_sasl_broker(log_dir, "alice", "alice-secret") as kafka:
        alice = produce_throttles(kafka.bootstrap, "app", "quota-sasl", 2, **sasl_settings("SCRAM-SHA-512", "alice",
                                                                                          "alice-secret"))
        bob = produce_throttles(kafka.bootstrap, "app", "quota-sasl", 2, **sasl_settings("SCRAM-SHA-512", "bob",
                                                                                        "bob-secret"))
    assert max(alice, default=0) > 0 and bob == []


@pytest.mark.slow  # waits out real quota windows (50 kB at 15 kB/s: 3 s of throttling), no clock of ours
def test_a_throttled_consumer_is_told_throttle_time(tmp_path: Any) -> None:
    """Windows of 1 s: a 15 kB/s quota lets each Fetch take one 10 kB record (§20.2) and throttles the next."""
    with running_kafka_broker(str(tmp_path), num_partitions=1, quota_window_num=2,
                              quota_window_size_seconds=1) as kafka:
        read, seen = consume_throttles(kafka, 15_000)
    assert read == 5 and max(seen) > 0


def consume_throttles(kafka: RunningKafkaBroker, quota_bytes_per_s: int) -> tuple[int, list[int]]:
    """Records read and throttle times seen by a confluent-kafka consumer of 5 records of 10 kB."""
    produce_throttles(kafka.bootstrap, "writer", "quota-fetch", 5, batch_each=True)
    trio.run(alter, kafka.bootstrap, {QuotaEntity.of([("client-id", "reader")]):
                                      {"consumer_byte_rate": quota_bytes_per_s}})
    seen: list[int] = []
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "client.id": "reader", "group.id": "quota-readers",
                         "auto.offset.reset": "earliest",
                         "throttle_cb": lambda event: seen.append(int(event.throttle_time * 1000))})
    consumer.subscribe(["quota-fetch"])
    read = 0
    deadline_s = time.monotonic() + WAIT_S
    while (read < 5 or not seen) and time.monotonic() < deadline_s:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            read += 1
    consumer.close()
    return read, seen


def test_a_request_quota_answers_throttle_time_then_mutes_the_connection_and_spares_other_clients(
        tmp_path: Any) -> None:
    """KIP-219 (§20.2): the throttled answer comes at once, the next request of that connection only after
    the throttle time; windows of 1 s keep the throttle (capped at the window span) short."""
    request = DescribeClusterRequest(include_cluster_authorized_operations=False)
    with running_kafka_broker(str(tmp_path), quota_window_num=2, quota_window_size_seconds=1) as kafka:
        trio.run(alter, kafka.bootstrap, {QuotaEntity.of([("client-id", "trikafka-test")]):
                                          {"request_percentage": 0.000001}})
        host, port = kafka.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
            sock.sendall(b"".join(encode_request(DESCRIBE_CLUSTER, 0, i, "trikafka-test", request) for i in (1, 2, 3)))
            answers, waited_s = [], []
            for _ in range(3):  # each after the mute the one before it set
                before_s = time.monotonic()
                answers.append(receive_answer(sock, DESCRIBE_CLUSTER, 0)[1])
                waited_s.append(time.monotonic() - before_s)
        throttles_s = [answer.throttle_time.total_seconds() for answer in answers]
        assert all(throttle_s > 0 for throttle_s in throttles_s)
        assert waited_s[1] >= throttles_s[0] * 0.9 and waited_s[2] >= throttles_s[1] * 0.9
        other = exchange(kafka.bootstrap, DESCRIBE_CLUSTER, 0, request, client_id="someone-else")
        assert other.throttle_time.total_seconds() == 0


async def test_quotas_altered_on_one_broker_are_kafkas_znodes_and_seen_by_another(zk_chroot, zk_admin,
                                                                                    tmp_path) -> None:
    async with kafka_cluster(tmp_path, zk_chroot, 2) as cluster:
        first, second = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
        await alter(first, {QuotaEntity.of([("ip", "::1")]): {"connection_creation_rate": 7}})
        await alter(first, {ALICE_APP: {"producer_byte_rate": 1024}, DEFAULT_USER: {"request_percentage": 50}})
        assert await describe(first) == {ALICE_APP: {"producer_byte_rate": 1024.0},
                                         DEFAULT_USER: {"request_percentage": 50.0},
                                         QuotaEntity.of([("ip", "::1")]): {"connection_creation_rate": 7.0}}
        with trio.fail_after(WAIT_S):
            while await describe(second) != await describe(first):
                await trio.sleep(0.05)
    chroot = "/" + zk_chroot.split("/", 1)[1]
    for path, config in [("config/users/alice/clients/app", {"producer_byte_rate": "1024"}),
                         ("config/users/<default>", {"request_percentage": "50.0"}),
                         ("config/ips/::1", {"connection_creation_rate": "7"})]:
        data, _ = await trio.to_thread.run_sync(zk_admin.get, f"{chroot}/{path}")
        assert json.loads(data) == {"version": 1, "config": config}
    # Kafka's change notification of the last change is left; the older ones were deleted by their writer.
    (notification,) = await trio.to_thread.run_sync(zk_admin.get_children, f"{chroot}/config/changes")
    data, _ = await trio.to_thread.run_sync(zk_admin.get, f"{chroot}/config/changes/{notification}")
    assert notification.startswith("config_change_")
    assert json.loads(data) == {"version": 2, "entity_path": "users/<default>"}


@pytest.mark.slow  # waits out real quota windows (80 kB at 25 kB/s: 3 s of throttling), no clock of ours
def test_a_throttled_fetch_is_answered_empty_and_the_consumer_still_reads_everything(tmp_path: Any) -> None:
    """KIP-219 (§20.2): kafka-python's consumer under a consumer_byte_rate quota is told throttle times, and
    no answer that carries records is throttled; the answers are bounded by the quota's window bytes, so the
    consumer progresses."""
    import kafka as kafka_python
    from kafka.consumer.fetcher import Fetcher

    answers: list[tuple[int, int]] = []  # (throttle_time_ms, bytes of records) of each Fetch answer
    handle_fetch_response = Fetcher._handle_fetch_response

    def recording(self: Any, node_id: Any, fetch_offsets: Any, send_time: Any, response: Any) -> Any:
        answers.append((response.throttle_time_ms, sum(len(p.records or b"") for t in response.responses
                                                           for p in t.partitions)))
        return handle_fetch_response(self, node_id, fetch_offsets, send_time, response)

    with running_kafka_broker(str(tmp_path), num_partitions=1, quota_window_num=2,
                              quota_window_size_seconds=1) as kafka:
        produce_throttles(kafka.bootstrap, "writer", "quota-empty", 8, batch_each=True)
        trio.run(alter, kafka.bootstrap, {QuotaEntity.of([("client-id", "reader")]): {"consumer_byte_rate": 25_000}})
        consumer = kafka_python.KafkaConsumer(bootstrap_servers=kafka.bootstrap, client_id="reader",
                                              auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            Fetcher._handle_fetch_response = recording  # type: ignore[method-assign]
            consumer.assign([kafka_python.TopicPartition("quota-empty", 0)])
            read = 0
            deadline_s = time.monotonic() + WAIT_S
            while read < 8 and time.monotonic() < deadline_s:
                read += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
        finally:
            Fetcher._handle_fetch_response = handle_fetch_response  # type: ignore[method-assign]
            consumer.close()
    assert read == 8
    assert any(throttle_ms > 0 for throttle_ms, _ in answers)
    assert [a for a in answers if a[0] > 0 and a[1] > 0] == []


def test_an_ip_quota_closes_the_connections_over_its_rate_unanswered_after_the_throttle_time(tmp_path: Any) -> None:
    """KIP-612 (§20.2): windows of 1 s and 2 connections a second for 127.0.0.1: its third connection is
    closed without an answer once the throttle time has passed; 127.0.0.2 has no quota of its own."""
    request = DescribeClusterRequest(include_cluster_authorized_operations=False)
    here, default_ip = QuotaEntity.of([("ip", "127.0.0.1")]), QuotaEntity.of([("ip", None)])
    with running_kafka_broker(str(tmp_path), quota_window_num=2, quota_window_size_seconds=1) as kafka:
        assert trio.run(alter, kafka.bootstrap, {here: {"connection_creation_rate": 2},
                                                 default_ip: {"connection_creation_rate": 1000}}) == {
            here: None, default_ip: None}
        host, port = kafka.bootstrap.rsplit(":", 1)
        sockets = [socket.create_connection(("127.0.0.1", int(port)), timeout=WAIT_S) for _ in range(3)]
        other = socket.create_connection(("127.0.0.1", int(port)), timeout=WAIT_S, source_address=("127.0.0.2", 0))
        try:
            for i, sock in enumerate([*sockets, other]):
                sock.sendall(encode_request(DESCRIBE_CLUSTER, 0, i, "trikafka-test", request))
            for sock in [sockets[0], sockets[1], other]:
                assert receive_answer(sock, DESCRIBE_CLUSTER, 0)[1].error_code == ErrorCode.none
            before_s = time.monotonic()
            try:
                assert sockets[2].recv(1) == b""  # closed, unanswered
            except ConnectionResetError:  # closed with the request unread
                pass
            assert time.monotonic() - before_s >= 0.2  # after the throttle time: (3 - 2) / 2 x 1 s, less the above
        finally:
            for sock in [*sockets, other]:
                sock.close()
