"""The Kafka listener's one mapping of ZooKeeper's and the assignment's errors to Kafka's (§16.4)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.registry import as_topic_errors
from trikafka.broker.kafka.topics import TopicError
from trikafka.broker.replication.assignment import AssignmentError
from trikafka.zk.errors import NoNodeError, ZooKeeperClientError
from trikafka.zk.replication_store import TopicExistsError


def _raised(exc: Exception, refusals=None) -> TopicError:
    with pytest.raises(TopicError) as caught:
        with as_topic_errors(*(() if refusals is None else (refusals,))):
            raise exc
    return caught.value


def test_a_zookeeper_failure_is_an_unknown_server_error():
    error = _raised(ZooKeeperClientError("connection lost"))
    assert (error.code, str(error)) == (ErrorCode.unknown_server_error, "ZooKeeper: connection lost")


def test_a_refusal_answers_its_code_with_its_message_or_the_exception_s():
    refusals = {TopicExistsError: (ErrorCode.topic_already_exists, "topic 't' already exists"),
                AssignmentError: (ErrorCode.invalid_replication_factor, None)}
    assert (_raised(TopicExistsError("/x"), refusals).code, str(_raised(TopicExistsError("/x"), refusals))) == (
        ErrorCode.topic_already_exists, "topic 't' already exists")
    error = _raised(AssignmentError("3 replicas, 1 broker"), refusals)
    assert (error.code, str(error)) == (ErrorCode.invalid_replication_factor, "3 replicas, 1 broker")
    # A ZooKeeper error not named stays a server error.
    assert _raised(NoNodeError("/y"), refusals).code == ErrorCode.unknown_server_error


def test_a_topic_error_and_other_exceptions_pass_through():
    with pytest.raises(TopicError) as caught:
        with as_topic_errors():
            raise TopicError(ErrorCode.invalid_partitions, "only grows")
    assert caught.value.code == ErrorCode.invalid_partitions
    with pytest.raises(KeyError):
        with as_topic_errors():
            raise KeyError("k")
