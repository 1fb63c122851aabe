"""trikafka.testing's cluster with the clients that find brokers in ZooKeeper: the Producer
over in-memory streams, the GroupConsumer over the brokers' loopback listeners."""

from __future__ import annotations

import pytest
import trio

from trikafka.group import GroupConfig, GroupConsumer
from trikafka.producer import Producer
from trikafka.testing import BrokerStartError, open_cluster

# Bounds the whole exchange; a hang fails instead of stalling.  Never a sync tool.
EXCHANGE_TIMEOUT_S = 60.0


async def test_a_group_of_two_shares_what_a_producer_sent_to_a_three_broker_cluster():
    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(3, num_partitions=2) as cluster, cluster.coordinator() as zk:
            async with Producer(coordinator=zk, acks=1, connector=cluster.connector) as producer:
                sent = await producer.send_batch("orders", [b"order %d" % n for n in range(60)])
            assert {r.broker_id for r in sent} == {0, 1, 2}
            config = GroupConfig(rebalance_backoff_s=0.1, fetch_wait_max_ms=100)
            seen: dict[str, set[bytes]] = {"a": set(), "b": set()}
            async with cluster.coordinator() as zk_a, cluster.coordinator() as zk_b:
                async with GroupConsumer(zk_a, "billing", {"orders": 1}, config=config, consumer_id="a") as a, \
                        GroupConsumer(zk_b, "billing", {"orders": 1}, config=config, consumer_id="b") as b:

                    async def drain(name, consumer):
                        async for m in consumer:
                            seen[name].add(m.payload)
                            if len(seen["a"] | seen["b"]) == 60:
                                nursery.cancel_scope.cancel()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(drain, "a", a)
                        nursery.start_soon(drain, "b", b)
    assert seen["a"] | seen["b"] == {b"order %d" % n for n in range(60)}


async def test_without_loopback_a_restart_gets_its_port_back_and_a_failed_one_says_why():
    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(2, loopback=False, survive_failures=True) as cluster:
            first = cluster.brokers[0].broker.port
            assert cluster.brokers[1].broker.port != first
            await cluster.stop(0)
            assert (await cluster.restart(0)).broker.port == first
            await cluster.stop(0)
            squatter = trio.socket.socket()  # the run's sockets are FakeListeners' too
            await squatter.bind(("127.0.0.1", first))
            with pytest.raises(BrokerStartError, match=r"broker 0 did not start again on port \d+: "
                                                       r"OSError\(\d+, 'broker port [\d.]+:\d+: Address already in use'\)$"):
                await cluster.restart(0)
            squatter.close()


async def test_the_kafka_bootstrap_of_a_loopback_cluster_serves_a_client_that_opens_tcp():
    """``kafka_bootstrap`` names where Metadata says the brokers are; with ``loopback`` (the default) that
    is where their Kafka listeners are bound, so confluent-kafka, which opens TCP, reaches them too."""
    from confluent_kafka import Consumer, TopicPartition

    from trikafka.client.kafka import KafkaAdmin, KafkaProducer, NewTopic

    with trio.fail_after(EXCHANGE_TIMEOUT_S):
        async with open_cluster(2) as cluster, cluster.kafka_client() as client:
            assert await KafkaAdmin(client).create_topics([NewTopic("orders", 1, 2)]) == {"orders": None}
            async with KafkaProducer.open(client) as producer:
                await producer.send("orders", b"order 1", partition=0)

            def read_one() -> bytes | None:
                consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "g",
                                     "enable.auto.commit": False})
                try:
                    consumer.assign([TopicPartition("orders", 0, 0)])
                    message = consumer.poll(30)
                    assert message is not None and message.error() is None, message and message.error()
                    return message.value()
                finally:
                    consumer.close()

            assert await trio.to_thread.run_sync(read_one) == b"order 1"
