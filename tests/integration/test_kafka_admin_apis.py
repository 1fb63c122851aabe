"""The smaller admin apis of docs/protocol.md §16.4, through the clients that have the call."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from tests.helpers.kafka_wire import exchange
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
