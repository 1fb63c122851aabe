"""A fenced transactional producer is told so with the error its client treats as fatal (docs/protocol.md
§19.5.4, §19.5.7): librdkafka's 0103_transactions do_test_fenced_txn (with and without a produce after the
fence), and each api's raw answer to the old epoch."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from confluent_kafka import KafkaException
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic
from tests.helpers.kafka_transactions import confluent_transactional_producer
from tests.helpers.kafka_wire import (add_partitions_to_txn, end_txn, init_transactional, produce_transactional,
                                      retry_while_retriable)
from trikafka.kafka.batch import TRANSACTIONAL
from trikafka.kafka.records import build_batch
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=3,
                              transaction_state_log_num_partitions=3) as running:
        create_topic(running.bootstrap, "out", partitions=2)
        yield running


@pytest.mark.parametrize("produce_after_fence", [None, 0, 1], ids=["commit", "produce-then-commit",
                                                                    "new-partition-then-commit"])
def test_librdkafkas_fenced_producer_gets_a_fatal_error(kafka: RunningKafkaBroker,
                                                        produce_after_fence: int | None) -> None:
    transactional_id = f"fenced-{uuid.uuid4().hex[:6]}"
    first = confluent_transactional_producer(kafka.bootstrap, transactional_id)
    first.begin_transaction()
    for n in range(10):
        first.produce("out", value=b"zombie-%d" % n, partition=0)
    first.flush(CLIENT_TIMEOUT_S)
    confluent_transactional_producer(kafka.bootstrap, transactional_id)  # fences the first
    if produce_after_fence is not None:  # partition 0 is in the transaction already, 1 is added first
        for n in range(10):
            first.produce("out", value=b"late-%d" % n, partition=produce_after_fence)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() and not error.retriable() and not error.txn_requires_abort(), error


def _batch(producer_id: int, epoch: int, value: bytes) -> bytes:
    return build_batch([value], producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                       control_attributes=TRANSACTIONAL)


def test_each_api_answers_the_old_epoch_with_kafkas_fenced_error(kafka: RunningKafkaBroker) -> None:
    bootstrap, transactional_id = kafka.bootstrap, f"raw-{uuid.uuid4().hex[:6]}"
    error, producer_id, old = init_transactional(bootstrap, transactional_id)
    assert error == ErrorCode.none
    assert retry_while_retriable(lambda: add_partitions_to_txn(bootstrap, transactional_id, producer_id, old,
                                                               [("out", 0)])) == {("out", 0): ErrorCode.none}
    assert produce_transactional(bootstrap, transactional_id, "out", 0, _batch(producer_id, old, b"z"))[0] == 0
    error, again, new = init_transactional(bootstrap, transactional_id)  # aborts the first transaction
    assert (error, again) == (ErrorCode.none, producer_id) and new > old
    # Produce: the partition knows the newer epoch (its abort marker, §19.3) or asks the coordinator (§19.5.7);
    # Kafka answers INVALID_PRODUCER_EPOCH either way.
    for partition in (0, 1):
        answer = produce_transactional(bootstrap, transactional_id, "out", partition, _batch(producer_id, old, b"x"))
        assert answer[0] == ErrorCode.invalid_producer_epoch, (partition, answer)
    # The coordinator's apis: PRODUCER_FENCED from the versions that know it (KIP-588), else INVALID_PRODUCER_EPOCH.
    for version, expected in ((1, ErrorCode.invalid_producer_epoch), (3, ErrorCode.producer_fenced)):
        assert add_partitions_to_txn(bootstrap, transactional_id, producer_id, old, [("out", 1)],
                                     version=version) == {("out", 1): expected}
        assert end_txn(bootstrap, transactional_id, producer_id, old, True, version=version) == expected
