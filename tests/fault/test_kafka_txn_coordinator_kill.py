"""Fault model "the transaction coordinator is SIGKILLed mid-transaction" (docs/protocol.md §19.5.6,
§19.5.7).

Three ``trikafka serve --zookeeper`` processes; ``__transaction_state`` and the output topic have
replication factor 3 and ``min.insync.replicas`` 2.  A librdkafka transactional producer writes to
every partition of the output and flushes; then the broker that coordinates its transactional id
is SIGKILLed.  Another replica of the id's ``__transaction_state`` partition becomes its leader and
loads the Ongoing transaction.  A new producer of the same id (``init_transactions``) fences the
old one, which aborts that transaction, and commits its own.  The promise: a read_committed reader
sees the new transaction's records and nothing of the aborted one.
"""

from __future__ import annotations

import functools
import uuid

import trio

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_confluent
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_transactions import (TRANSACTION_KEY, confluent_transactional_producer,
                                             key_coordinated_outside, partition_leaders)

FLAGS = ("--set", "transaction.state.log.num.partitions=3")
TOPIC = "out"
PARTITIONS = 3


def _open_transaction(bootstrap: str, transactional_id: str) -> None:
    """Records in every partition, flushed (the ISR holds them), the transaction left open."""
    producer = confluent_transactional_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(TOPIC, value=b"doomed-%d" % p, partition=p)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def _commit_after_failover(bootstrap: str, transactional_id: str) -> None:
    producer = confluent_transactional_producer(bootstrap, transactional_id)  # aborts the open one first
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(TOPIC, value=b"kept-%d" % p, partition=p)
    producer.commit_transaction(CLIENT_TIMEOUT_S)


async def test_a_sigkilled_transaction_coordinator_loses_nothing_committed_and_shows_nothing_aborted(
        zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 3, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, PARTITIONS,
                                                        {"min.insync.replicas": "2"}, replication_factor=3))
        await trio.to_thread.run_sync(partition_leaders, bootstrap, TOPIC)
        tid, victim, _ = await trio.to_thread.run_sync(key_coordinated_outside, bootstrap,
                                                       f"tx-{uuid.uuid4().hex[:6]}", TRANSACTION_KEY, set())
        await trio.to_thread.run_sync(_open_transaction, bootstrap, tid)
        await cluster.brokers[victim].kill()
        survivors = cluster.bootstrap(without=(victim,))
        await trio.to_thread.run_sync(_commit_after_failover, survivors, tid)
        committed = await trio.to_thread.run_sync(functools.partial(
            read_with_confluent, survivors, TOPIC, PARTITIONS, PARTITIONS, **{"isolation.level": "read_committed"}))
        assert sorted(s.value for s in committed) == [b"kept-%d" % p for p in range(PARTITIONS)]
        everything = await trio.to_thread.run_sync(functools.partial(
            read_with_confluent, survivors, TOPIC, PARTITIONS, 2 * PARTITIONS,
            **{"isolation.level": "read_uncommitted"}))
        assert sorted(s.value for s in everything) == sorted(
            [b"doomed-%d" % p for p in range(PARTITIONS)] + [b"kept-%d" % p for p in range(PARTITIONS)])
