"""Test doubles for trikafka and for applications built on it, all in one place.

* :class:`FakeFileSystem` (``fakefs``): an in-memory ``trikafka.log.FileSystem``
  with a crash model, deterministic from a seed.
* :class:`FakeZooKeeper` (``fake_zookeeper``) and :class:`FakeZooKeeperClient`
  (``fake_zookeeper_client``): an in-process ZooKeeper server and its clients with
  kazoo's session behaviour, on Trio time.

* :func:`open_broker` and :func:`open_cluster` (``broker``): the real broker
  in-process on a fake file system, reached over in-memory streams
  (``InMemoryNetwork``, in ``network``); a cluster
  registers its brokers in a ``FakeZooKeeper``, and each serves the Kafka
  protocol over the same network (``cluster.kafka_client()``, a Trio
  ``KafkaClient``; ``cluster.kafka_bootstrap``); ``FakeListeners``
  (``fake_listeners``) lets them listen without binding a real port.
* :func:`kafka_broker` (``kafka_broker``): a real broker on loopback, in a
  thread, serving the Apache Kafka protocol for apps written with
  confluent-kafka, aiokafka or kafka-python; it yields the bootstrap address.
  :func:`kafka_group_broker` is the same for consumer-group tests: a new
  group's first rebalance starts at once.  :func:`running_tls_kafka_broker`
  serves it over TLS with fresh test certificates (``certificates``, made
  with ``trustme``).
* ``trikafka.testing.pytest_plugin``: pytest fixtures over those, enabled with
  ``pytest_plugins = ["trikafka.testing.pytest_plugin"]``.

Production packages never import this one; tests inject these doubles where
production code takes a ``FileSystem`` or a ``ZooKeeperClient``.
"""

from .broker import (
    EXTENSION_REQUESTS,
    BrokerStartError,
    InProcessBroker,
    InProcessCluster,
    in_process_config,
    open_broker,
    open_cluster,
    start_in_memory,
)
from .fake_zookeeper_client import FakeZooKeeperClient
from .kafka_broker import (kafka_broker, kafka_group_broker, running_kafka_broker,
                           running_kafka_group_broker, running_tls_kafka_broker)
from .fake_listeners import FakeListeners
from .fake_zookeeper import FakeZooKeeper
from .fakefs import FakeFileSystem, FakeSegmentFile
from .network import InMemoryNetwork

__all__ = [
    "EXTENSION_REQUESTS", "BrokerStartError", "FakeZooKeeperClient", "FakeListeners", "FakeFileSystem", "FakeSegmentFile", "FakeZooKeeper", "InMemoryNetwork", "InProcessBroker",
    "InProcessCluster", "in_process_config", "kafka_broker", "kafka_group_broker", "open_broker", "open_cluster",
    "running_kafka_broker", "running_kafka_group_broker", "running_tls_kafka_broker",
    "start_in_memory",
]
