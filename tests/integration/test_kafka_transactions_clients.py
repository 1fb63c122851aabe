"""Transactions end to end with librdkafka and kafka-python (docs/protocol.md §19.5, §19.6):
confluent-kafka's and kafka-python's transactional producers commit records and a consumer
group's offsets together and abort others; a second producer of a transactional id fences the
first; a read_committed consumer sees the committed records only.
"""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_confluent
from tests.helpers.kafka_transactions import (committed_offset, confluent_group_metadata,
                                             confluent_transactional_producer, kafka_python_abort_then_commit)
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=3,
                              transaction_state_log_num_partitions=3) as running:
        create_topic(running.bootstrap, "in", partitions=1)
        create_topic(running.bootstrap, "out", partitions=2)
        yield running


def test_commit_and_abort_seen_by_read_committed(kafka):
    from confluent_kafka import TopicPartition

    group = f"copier-{uuid.uuid4().hex[:6]}"
    consumer, metadata = confluent_group_metadata(kafka.bootstrap, group)
    producer = confluent_transactional_producer(kafka.bootstrap, f"tx-{group}")
    try:
        producer.begin_transaction()
        for i in range(3):
            producer.produce("out", value=b"committed-%d" % i, partition=i % 2)
        producer.send_offsets_to_transaction([TopicPartition("in", 0, 3)], metadata, CLIENT_TIMEOUT_S)
        producer.commit_transaction(CLIENT_TIMEOUT_S)

        producer.begin_transaction()
        for i in range(2):
            producer.produce("out", value=b"aborted-%d" % i, partition=i % 2)
        producer.flush(CLIENT_TIMEOUT_S)
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()

    committed = read_with_confluent(kafka.bootstrap, "out", 2, 3, **{"isolation.level": "read_committed"})
    assert sorted(s.value for s in committed) == [b"committed-0", b"committed-1", b"committed-2"]
    everything = read_with_confluent(kafka.bootstrap, "out", 2, 5, **{"isolation.level": "read_uncommitted"})
    assert len(everything) == 5
    assert committed_offset(kafka.bootstrap, group, "in") == 3


def test_a_second_producer_of_the_id_fences_the_first(kafka):
    from confluent_kafka import KafkaException

    transactional_id = f"fenced-{uuid.uuid4().hex[:6]}"
    first = confluent_transactional_producer(kafka.bootstrap, transactional_id)
    first.begin_transaction()
    first.produce("out", value=b"zombie", partition=0)
    first.flush(CLIENT_TIMEOUT_S)
    # The second aborts the first's transaction and bumps the epoch.
    second = confluent_transactional_producer(kafka.bootstrap, transactional_id)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    assert raised.value.args[0].fatal()
    second.begin_transaction()
    second.produce("out", value=b"live", partition=0)
    second.commit_transaction(CLIENT_TIMEOUT_S)
    seen = read_with_confluent(kafka.bootstrap, "out", 2, 1, **{"isolation.level": "read_committed"})
    assert b"zombie" not in {s.value for s in seen}


@pytest.mark.parametrize("produce_after_fence", [None, 0, 1], ids=["commit", "produce-then-commit",
                                                                    "new-partition-then-commit"])
def test_librdkafkas_fenced_producer_gets_a_fatal_error(kafka, produce_after_fence: int | None) -> None:
    """librdkafka's 0103_transactions do_test_fenced_txn: the commit of a fenced producer fails fatally,
    whether or not it produced after the fence (partition 0 is in its transaction already, 1 is added first)."""
    from confluent_kafka import KafkaException

    transactional_id = f"fenced-{uuid.uuid4().hex[:6]}"
    first = confluent_transactional_producer(kafka.bootstrap, transactional_id)
    first.begin_transaction()
    for n in range(10):
        first.produce("out", value=b"zombie-%d" % n, partition=0)
    first.flush(CLIENT_TIMEOUT_S)
    confluent_transactional_producer(kafka.bootstrap, transactional_id)  # fences the first
    if produce_after_fence is not None:
        for n in range(10):
            first.produce("out", value=b"late-%d" % n, partition=produce_after_fence)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() and not error.retriable() and not error.txn_requires_abort(), error


def _kafka_python(bootstrap: str, transactional_id: str, topic: str, group: str) -> None:
    kafka_python_abort_then_commit(bootstrap, transactional_id, topic, group, "in")


def _aiokafka(bootstrap: str, transactional_id: str, topic: str, group: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed")
                await producer.send_offsets_to_transaction({TopicPartition("in", 0): 11}, group)
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest.mark.parametrize("client", [_kafka_python, _aiokafka], ids=lambda f: f.__name__.strip("_"))
def test_python_clients_transactional_producers_commit_records_and_offsets(kafka, client):
    """kafka-python 3.x's and aiokafka 0.14's own transaction managers (their versions of the apis,
    their retries): an aborted record, then a record and a group's offset committed together."""
    group = f"{client.__name__.strip('_')}-{uuid.uuid4().hex[:6]}"
    create_topic(kafka.bootstrap, group, partitions=1)  # this test's output alone
    client(kafka.bootstrap, f"tx-{group}", group, group)
    committed = read_with_confluent(kafka.bootstrap, group, 1, 1, **{"isolation.level": "read_committed"})
    assert [s.value for s in committed] == [b"committed"]
    everything = read_with_confluent(kafka.bootstrap, group, 1, 2, **{"isolation.level": "read_uncommitted"})
    assert [s.value for s in everything] == [b"aborted", b"committed"]
    assert committed_offset(kafka.bootstrap, group, "in") == 11


def test_kafka_pythons_admin_lists_and_describes_transactions(kafka):
    """DescribeTransactions and ListTransactions (§19.5.4) as kafka-python's admin client reads them:
    an open transaction is Ongoing with its partitions, then CompleteCommit once its markers are
    written; filters by state and producer id; an unknown id is TRANSACTIONAL_ID_NOT_FOUND."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    transactional_id = f"described-{uuid.uuid4().hex[:6]}"
    producer = confluent_transactional_producer(kafka.bootstrap, transactional_id)
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        producer.begin_transaction()
        producer.produce("out", value=b"a", partition=0)
        producer.produce("out", value=b"b", partition=1)
        producer.flush(CLIENT_TIMEOUT_S)
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state.value == "Ongoing"
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {("out", 0), ("out", 1)}
        assert described.transaction_timeout_ms == 60000 and described.transaction_start_time_ms > 0
        (listed,) = [t for ts in admin.list_transactions().values() for t in ts
                     if t.transactional_id == transactional_id]
        assert (listed.producer_id, listed.state.value) == (described.producer_id, "Ongoing")
        by_producer = admin.list_transactions(producer_id_filters=[described.producer_id])
        assert [t.transactional_id for ts in by_producer.values() for t in ts] == [transactional_id]
        assert not [t for ts in admin.list_transactions(state_filters=["CompleteCommit"]).values() for t in ts
                    if t.transactional_id == transactional_id]

        producer.commit_transaction(CLIENT_TIMEOUT_S)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while (state := admin.describe_transactions([transactional_id])[transactional_id].state.value) \
                == "PrepareCommit" and time.monotonic() < deadline:
            time.sleep(0.05)  # the markers are being written (§19.5.5)
        assert state == "CompleteCommit"
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions([f"nobody-{uuid.uuid4().hex[:6]}"])
    finally:
        admin.close()
