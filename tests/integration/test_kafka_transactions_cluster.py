"""Transactions across brokers (docs/protocol.md §19.5.7): three ``trikafka serve --zookeeper``
brokers, topics of replication factor 3 with ``min.insync.replicas`` 2, and a transactional id whose
coordinator, the group's coordinator and an output partition's leader are three different brokers,
so every KIP-890 check of a Produce or a TxnOffsetCommit goes to another broker (AddPartitionsToTxn
v4 ``verify_only``), and a fenced producer's is answered with the error librdkafka takes as fatal."""

from __future__ import annotations

import functools
import uuid

import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_confluent
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_transactions import (GROUP_KEY, TRANSACTION_KEY, committed_offset, confluent_group_metadata,
                                             confluent_transactional_producer, kafka_python_abort_then_commit,
                                             key_coordinated_outside, partition_leaders)
from tests.helpers.kafka_wire import fetch_stable_offsets

FLAGS = ("--set", "transaction.state.log.num.partitions=3", "--set", "offsets.topic.num.partitions=3",
         "--set", "group.initial.rebalance.delay.ms=0")
REPLICATED = {"min.insync.replicas": "2"}


def _confluent_across_brokers(bootstrap: str, out_leaders: dict[int, int]) -> None:
    """(a) and (b): a commit of records and a group's offsets, then an abort, with librdkafka."""
    from confluent_kafka import TopicPartition

    group, group_node, group_address = key_coordinated_outside(bootstrap, f"g-{uuid.uuid4().hex[:6]}", GROUP_KEY, set())
    tid, tid_node, _ = key_coordinated_outside(bootstrap, f"tx-{uuid.uuid4().hex[:6]}", TRANSACTION_KEY, {group_node})
    elsewhere = [p for p, leader in out_leaders.items() if leader not in {group_node, tid_node}]
    assert elsewhere, f"no partition of out led outside brokers {group_node} and {tid_node}: {out_leaders}"
    consumer, metadata = confluent_group_metadata(bootstrap, group)
    producer = confluent_transactional_producer(bootstrap, tid)
    try:
        producer.begin_transaction()
        for p in out_leaders:
            producer.produce("out", value=b"committed-%d" % p, partition=p)
        producer.send_offsets_to_transaction([TopicPartition("in", 0, 3)], metadata, CLIENT_TIMEOUT_S)
        assert fetch_stable_offsets(group_address, group, "in", [0]) == {0: (-1, ErrorCode.unstable_offset_commit)}
        producer.commit_transaction(CLIENT_TIMEOUT_S)

        producer.begin_transaction()
        for p in out_leaders:
            producer.produce("out", value=b"aborted-%d" % p, partition=p)
        producer.flush(CLIENT_TIMEOUT_S)
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    assert committed_offset(bootstrap, group, "in") == 3
    partitions = len(out_leaders)
    committed = read_with_confluent(bootstrap, "out", partitions, partitions, **{"isolation.level": "read_committed"})
    assert sorted(s.value for s in committed) == sorted(b"committed-%d" % p for p in out_leaders)
    everything = read_with_confluent(bootstrap, "out", partitions, 2 * partitions,
                                     **{"isolation.level": "read_uncommitted"})
    assert len(everything) == 2 * partitions


def _kafka_python_across_brokers(bootstrap: str) -> None:
    """(c): kafka-python's transactional producer, its one-partition output led away from its coordinator."""
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1, REPLICATED, replication_factor=3)
    (leader,) = partition_leaders(bootstrap, topic).values()
    tid, _, _ = key_coordinated_outside(bootstrap, f"tx-{topic}", TRANSACTION_KEY, {leader})
    kafka_python_abort_then_commit(bootstrap, tid, topic, topic, "in")
    committed = read_with_confluent(bootstrap, topic, 1, 1, **{"isolation.level": "read_committed"})
    assert [s.value for s in committed] == [b"committed"]
    everything = read_with_confluent(bootstrap, topic, 1, 2, **{"isolation.level": "read_uncommitted"})
    assert [s.value for s in everything] == [b"aborted", b"committed"]
    assert committed_offset(bootstrap, topic, "in") == 11


def _fenced_across_brokers(bootstrap: str, out_leaders: dict[int, int]) -> None:
    """(d) librdkafka's 0103 do_test_fenced_txn: a producer fenced by a second of its id, then producing to a
    partition led away from its coordinator, fails fatally (the leader's verification, §19.5.7)."""
    from confluent_kafka import KafkaException

    partition, leader = next(iter(out_leaders.items()))
    tid, _, _ = key_coordinated_outside(bootstrap, f"fenced-{uuid.uuid4().hex[:6]}", TRANSACTION_KEY, {leader})
    first = confluent_transactional_producer(bootstrap, tid)
    first.begin_transaction()
    for n in range(10):
        first.produce("out", value=b"zombie-%d" % n, partition=partition)
    first.flush(CLIENT_TIMEOUT_S)
    confluent_transactional_producer(bootstrap, tid)  # fences the first
    for n in range(10):
        first.produce("out", value=b"late-%d" % n, partition=partition)
    try:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        assert exc.args[0].fatal(), exc.args[0]
    else:
        raise AssertionError("a fenced producer committed")


async def test_transactions_whose_coordinators_and_leaders_are_on_different_brokers(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 3, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        for topic, partitions in (("in", 1), ("out", 3)):
            await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, topic, partitions, REPLICATED,
                                                            replication_factor=3))
        out_leaders = await trio.to_thread.run_sync(partition_leaders, bootstrap, "out")
        await trio.to_thread.run_sync(_confluent_across_brokers, bootstrap, out_leaders)
        await trio.to_thread.run_sync(_kafka_python_across_brokers, bootstrap)
        await trio.to_thread.run_sync(_fenced_across_brokers, bootstrap, out_leaders)
