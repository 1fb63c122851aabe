"""Fault model "the leader of a Kafka-format partition is SIGKILLed" (docs/protocol.md §16.4, §16.6, §12.6).

Three real ``trikafka serve --zookeeper`` processes serve a topic of two
partitions with replication factor 3 and ``min.insync.replicas=2``.  A
confluent-kafka producer (``acks=all``, retries on, idempotence off or on) sends
a counted stream; once part of it is acknowledged, the broker that leads
partition 0 is SIGKILLed.  The controller elects another replica of the ISR
(two of three suffice for ``acks=all``) and librdkafka follows it through
Metadata and retries.  Afterwards a consumer reads every partition from the
beginning, and :func:`check_acknowledged_read_back` states the promise:
every acknowledged record is read back where it was acknowledged, offsets are
dense, duplicates (a retried batch whose answer died with the leader) are
allowed, losses are not.  With idempotence on (§19.4), :func:`check_exactly_once`
adds: no value is stored twice, and each partition keeps the order it was sent in
(the new leader has the producer state from the log it copied, §19.2).
"""

from __future__ import annotations

import functools

import pytest
import trio

from tests.helpers.kafka_clients import (CountedProducer, check_acknowledged_read_back, check_exactly_once,
                                         create_topic, high_watermarks, leader_of, read_with_confluent)
from tests.helpers.kafka_processes import kafka_cluster

TOPIC = "killed-leader"
PARTITIONS = 2
RECORDS = 6000
ACKED_BEFORE_KILL = 1500
WAIT_S = 120.0


@pytest.mark.parametrize("idempotence", [False, True], ids=["at-least-once", "idempotent"])
async def test_a_sigkilled_leader_loses_no_acknowledged_record(zk_chroot, tmp_path, idempotence):
    async with kafka_cluster(tmp_path, zk_chroot) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, PARTITIONS,
                                                        {"min.insync.replicas": "2"}, replication_factor=3))
        victim = await leader_of(bootstrap, TOPIC, 0)
        producer = CountedProducer(bootstrap, TOPIC, **{"enable.idempotence": idempotence})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(trio.to_thread.run_sync, producer.run, 0, RECORDS))
            with trio.fail_after(WAIT_S):
                while len(producer.acked) < ACKED_BEFORE_KILL:
                    await trio.sleep(0.01)
            await cluster.brokers[victim].kill()
            acked_at_kill = len(producer.acked)
        assert producer.failed == []
        assert len(producer.acked) == RECORDS
        assert acked_at_kill < RECORDS, "the kill came after the whole stream: it tested nothing"

        survivors = cluster.bootstrap(without=(victim,))
        ends = await trio.to_thread.run_sync(high_watermarks, survivors, TOPIC, PARTITIONS)
        seen = await trio.to_thread.run_sync(read_with_confluent, survivors, TOPIC, PARTITIONS, sum(ends))
        assert len(seen) == sum(ends) >= RECORDS
        (check_exactly_once if idempotence else check_acknowledged_read_back)(producer.acked, seen, PARTITIONS)
