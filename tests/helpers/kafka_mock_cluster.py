"""librdkafka's mock cluster: a second implementation of the Kafka protocol, written by nobody here.

A confluent-kafka handle with ``test.mock.num.brokers`` runs librdkafka's mock
brokers on loopback ports inside this process; ``librdkafka_mock_cluster``
yields their bootstrap address, so that trikafka's Trio client is tested
against a broker whose codec is not its own (``kio`` on both sides of a
trikafka connection would agree on a shared mistake).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

from trikafka.kafka.apis import KafkaApi

# The mock creates a topic that a Metadata request names, with this many partitions.
MOCK_PARTITIONS = 4
# The group apis at the versions librdkafka itself sends its mock (confluent-kafka 2.16): the mock
# advertises JoinGroup v6 and SyncGroup v4, but reads their flexible bodies as if they were not
# ("ProtocolCnt 50754145 > max allowed", "read buffer underflow for SyncGroup v4") and closes.
LIBRDKAFKA_GROUP_VERSIONS = {KafkaApi.JOIN_GROUP: 5, KafkaApi.SYNC_GROUP: 3, KafkaApi.HEARTBEAT: 3,
                             KafkaApi.LEAVE_GROUP: 1}


@contextmanager
def librdkafka_mock_cluster(num_brokers: int, topics: Iterable[str] = ()) -> Iterator[str]:
    """A mock cluster of ``num_brokers`` with ``topics`` created (``MOCK_PARTITIONS`` each); its bootstrap."""
    import confluent_kafka

    handle = confluent_kafka.Producer({"test.mock.num.brokers": num_brokers, "bootstrap.servers": "",
                                       "log_level": 0})
    try:
        brokers = handle.list_topics(timeout=10).brokers
        for topic in topics:
            created = handle.list_topics(topic=topic, timeout=10).topics[topic]
            assert created.error is None and len(created.partitions) == MOCK_PARTITIONS, created
        yield ",".join(f"{b.host}:{b.port}" for b in sorted(brokers.values(), key=lambda b: b.id))
    finally:
        handle.flush(0)
        del handle  # the mock brokers stop with the handle
