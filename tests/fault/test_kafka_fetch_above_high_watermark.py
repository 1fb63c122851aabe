"""Fault model "a consumer fetches past a leader's lagging high watermark" (docs/protocol.md §16.4, §12.6).

A new leader learns the high watermark its predecessor reached only as its followers catch up, so a
consumer that read up to the old leader's high watermark may fetch above the new leader's.  The same
state is made here without a failover: a follower is SIGSTOPped (still in the ISR: the test's steps take less
than ``replica.lag.time.max.ms``, 10 s, and its ZooKeeper session outlasts them) and the leader appends with acks 1, so its log end passes its high
watermark.  The promise: a fetch above the high watermark but not past the log end is answered with no
records and no error (the consumer waits); only a fetch past the log end is ``OFFSET_OUT_OF_RANGE``.
"""

from __future__ import annotations

import functools
import signal

import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import create_topic, leader_of
from tests.helpers.kafka_processes import kafka_cluster
from tests.helpers.kafka_wire import fetch_once, produce_records
from trikafka.kafka.records import build_batch

TOPIC = "lagging"
# A stopped follower stays in the ISR and registered for the whole test.
FLAGS = ("--set", "zk.sessiontimeout.ms=30000")
WAIT_S = 60.0


async def test_a_fetch_above_the_high_watermark_waits_and_past_the_log_end_is_out_of_range(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot, 2, *FLAGS) as cluster:
        bootstrap = cluster.bootstrap()
        await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, TOPIC, 1, {
            "min.insync.replicas": "1"}, replication_factor=2))
        leader = await leader_of(bootstrap, TOPIC, 0, isr=2)
        at_leader = cluster.brokers[leader].bootstrap
        with trio.fail_after(WAIT_S):
            # Metadata may name the leader before that broker has taken the role.
            while (first := await trio.to_thread.run_sync(produce_records, at_leader, TOPIC, 0,
                                                          build_batch([b"both"])))[0] == ErrorCode.not_leader_or_follower:
                await trio.sleep(0.1)
        assert first == (ErrorCode.none, 0)
        follower = cluster.brokers[next(b for b in cluster.brokers if b != leader)]
        follower.child.signal(signal.SIGSTOP)
        try:
            assert await trio.to_thread.run_sync(functools.partial(
                produce_records, at_leader, TOPIC, 0, build_batch([b"leader only"]), acks=1)) == (ErrorCode.none, 1)
            above = await trio.to_thread.run_sync(fetch_once, at_leader, TOPIC, 0, 2)
            assert above == (ErrorCode.none, 1, b""), above
            past = await trio.to_thread.run_sync(fetch_once, at_leader, TOPIC, 0, 3)
            assert past[0] == ErrorCode.offset_out_of_range, past
        finally:
            follower.child.signal(signal.SIGCONT)
