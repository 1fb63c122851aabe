"""pytest fixtures running the real trikafka broker in-process, for your Trio app's tests.

Enable it in your ``conftest.py`` (it is not loaded automatically)::

    pytest_plugins = ["trikafka.testing.pytest_plugin"]

and write tests with pytest-trio (``trio_mode = true``, or ``@pytest.mark.trio``)::

    async def test_my_app(trikafka_broker):
        async with await trikafka_broker.connect() as conn:
            await conn.produce_acked("events", 0, [b"hello"])

``trikafka_kafka_bootstrap`` is the ``"127.0.0.1:PORT"`` of a real broker serving the
Apache Kafka protocol (``kafka_broker``), for apps written with confluent-kafka,
aiokafka or kafka-python; it needs no Trio (``trikafka_kafka_group_bootstrap``: the same
for consumer-group tests, a group's first rebalance not delayed).  ``trikafka_broker`` is an ``InProcessBroker``; ``trikafka_cluster`` is an
``InProcessCluster`` of ``trikafka_cluster_size`` brokers (default 3; override
the fixture to change it) registered in a ``FakeZooKeeper`` — give
``trikafka_cluster.coordinator()`` to a ``Producer`` or ``GroupConsumer``, and
``connector=trikafka_cluster.connector`` to a ``Producer``; its brokers serve the
Kafka protocol too: ``trikafka_cluster.kafka_client()`` is a ``KafkaClient`` for
trikafka's Trio Kafka producer, consumers and admin over in-memory streams
(``trikafka_cluster.kafka_bootstrap`` names its listeners).  Override
``trikafka_broker_settings`` to pass ``BrokerConfig`` fields.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

import pytest

from .broker import InProcessBroker, InProcessCluster, open_broker, open_cluster
from .kafka_broker import kafka_broker, kafka_group_broker


@pytest.fixture
def trikafka_broker_settings() -> dict[str, Any]:
    """``BrokerConfig`` fields for the fixtures' brokers (override in your conftest)."""
    return {}


@pytest.fixture
def trikafka_cluster_size() -> int:
    """How many brokers ``trikafka_cluster`` runs (override in your conftest)."""
    return 3


@pytest.fixture
async def trikafka_broker(trikafka_broker_settings: dict[str, Any]) -> AsyncIterator[InProcessBroker]:
    """One real broker in-process, on a fake file system, for the test's duration."""
    async with open_broker(**trikafka_broker_settings) as broker:
        yield broker


@pytest.fixture
async def trikafka_cluster(trikafka_cluster_size: int,
                           trikafka_broker_settings: dict[str, Any]) -> AsyncIterator[InProcessCluster]:
    """Brokers 0..n-1 in-process, registered in one FakeZooKeeper, for the test's duration."""
    async with open_cluster(trikafka_cluster_size, **trikafka_broker_settings) as cluster:
        yield cluster


@pytest.fixture
def trikafka_kafka_bootstrap(trikafka_broker_settings: dict[str, Any]) -> Iterator[str]:
    """The bootstrap address of a real broker serving the Kafka protocol for this test (§16)."""
    with kafka_broker(**trikafka_broker_settings) as bootstrap:
        yield bootstrap


@pytest.fixture
def trikafka_kafka_group_bootstrap(trikafka_broker_settings: dict[str, Any]) -> Iterator[str]:
    """Like ``trikafka_kafka_bootstrap``, for consumer-group tests (§17.8): ``kafka_group_broker``."""
    with kafka_group_broker(**trikafka_broker_settings) as bootstrap:
        yield bootstrap
