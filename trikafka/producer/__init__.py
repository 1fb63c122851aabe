"""trikafka's producer (docs/protocol.md §5.1, §9.2, §12.13): Trio-native, sync or async batching.

::

    async with Producer(brokers="127.0.0.1:9092", producer_type="async", acks=1) as p:
        delivery = await p.send("events", b"payload", key="user-42")
        result = await delivery.result()      # SendResult(topic, broker_id, partition, offset, ...)

Modules: ``producer`` (the Producer), ``config`` (settings and 0.7 names),
``discovery`` (static list / ZooKeeper watches), ``routing`` (partition choice,
leaders), ``delivery`` (requests, retries), ``async_queue`` (batching),
``pool`` (connections), ``encoding`` (message sets), ``partitioner``
(partitioners), ``audit``, ``results``, ``errors``.
"""

from .config import ASYNC, SYNC, ProducerConfig, config_from_properties, parse_broker_list, parse_codec
from .discovery import ClusterView, StaticDiscovery, ZooKeeperDiscovery
from .errors import (
    AcksNotSupportedError,
    BrokerRejectedError,
    MessageTooLargeError,
    NoBrokersAvailableError,
    PartitionerError,
    ProducerClosedError,
    ProducerError,
    QueueFullError,
)
from .partitioner import (
    BrokerPartition,
    DefaultPartitioner07,
    HashPartitioner,
    RandomPartitioner,
    java_hash,
    producer_partitions,
)
from .producer import Producer
from .results import Delivery, DeliveryFailedError, SendResult

__all__ = [
    "ASYNC", "SYNC", "ProducerConfig", "config_from_properties", "parse_broker_list", "parse_codec",
    "ClusterView", "StaticDiscovery", "ZooKeeperDiscovery",
    "AcksNotSupportedError", "BrokerRejectedError", "DeliveryFailedError", "MessageTooLargeError",
    "NoBrokersAvailableError", "PartitionerError", "ProducerClosedError", "ProducerError", "QueueFullError",
    "BrokerPartition", "DefaultPartitioner07", "HashPartitioner", "RandomPartitioner", "java_hash",
    "producer_partitions", "Producer", "Delivery", "SendResult",
]
