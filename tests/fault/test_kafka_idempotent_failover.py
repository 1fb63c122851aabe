"""Fault model "the leader dies after appending a batch whose answer the producer never saw"
(docs/protocol.md §19.2-§19.4), made deterministic at the byte level.

Three ``trikafka serve --zookeeper`` processes serve a partition with three
replicas.  An idempotent producer's batches are acknowledged (acks -1, so
every replica holds them); its leader is SIGKILLed; the producer sends its
last batch again to the new leader, as a client whose answer was lost does.
The promise: the new leader, whose producer state comes from the log it
copied, answers the retry with the batch's first offset and stores it once;
the producer's next batch follows on; an out-of-order one is refused.
"""

from __future__ import annotations

import functools

import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import create_topic, leader_of, read_with_confluent
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import init_producer_id, produce_records
from trikafka.kafka.records import build_batch

TOPIC = "idempotent-failover"


def batch(producer_id: int, seq: int, count: int = 3) -> bytes:
    return build_batch([str(seq + k).encode() for k in range(count)], producer_id=producer_id, producer_epoch=0,
                       base_sequence=seq)


async def test_a_retry_to_the_new_leader_is_answered_with_the_first_offset_and_stored_once(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, 1,
                                                        {"min.insync.replicas": "2"}, replication_factor=3))
        victim = await leader_of(bootstrap, TOPIC, 0)
        at_victim = cluster.brokers[victim].bootstrap
        error, pid, _ = await trio.to_thread.run_sync(init_producer_id, at_victim)
        assert error == ErrorCode.none
        for seq, offset in ((0, 0), (3, 3)):
            answer = await trio.to_thread.run_sync(produce_records, at_victim, TOPIC, 0, batch(pid, seq))
            assert answer == (ErrorCode.none, offset)
        await cluster.brokers[victim].kill()

        survivors = cluster.bootstrap(without=(victim,))
        successor = await leader_of(survivors, TOPIC, 0, isr=2, not_on=victim)
        at_successor = cluster.brokers[successor].bootstrap
        retry = await trio.to_thread.run_sync(produce_records, at_successor, TOPIC, 0, batch(pid, 3))
        assert retry == (ErrorCode.none, 3)
        gap = await trio.to_thread.run_sync(produce_records, at_successor, TOPIC, 0, batch(pid, 9))
        assert gap[0] == ErrorCode.out_of_order_sequence_number
        follow_on = await trio.to_thread.run_sync(produce_records, at_successor, TOPIC, 0, batch(pid, 6))
        assert follow_on == (ErrorCode.none, 6)
        seen = await trio.to_thread.run_sync(read_with_confluent, survivors, TOPIC, 1, 9)
        assert [(s.offset, s.value) for s in seen] == [(n, str(n).encode()) for n in range(9)]
