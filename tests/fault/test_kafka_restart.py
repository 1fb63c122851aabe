"""Fault model "a standalone broker serving Kafka-format topics is SIGKILLed" (docs/protocol.md §16.6, §7.3).

A ``trikafka serve --standalone`` child takes an ``acks=all`` stream from
confluent-kafka, is SIGKILLed, and starts again on the same log directory:
recovery keeps every acknowledged batch (the kill is of the process, so what
it wrote is in the page cache), the rebuilt batch index agrees with the
batches (ListOffsets latest = the records stored), and new writes continue the
offsets densely.  So under ``acks.all.fsync=false`` too (docs/protocol.md §12.6), where an
acknowledgement waits for no flush: only a power cut may lose what no flush covered.
"""

from __future__ import annotations

import functools

import pytest
import trio

from tests.helpers.kafka_clients import (CountedProducer, check_acknowledged_read_back, create_topic,
                                         high_watermarks, read_with_confluent)
from tests.helpers.kafka_processes import kafka_serve

TOPIC = "restarted"
PARTITIONS = 2
BEFORE, AFTER = 2000, 500


@pytest.mark.parametrize("flags", [(), ("--set", "acks.all.fsync=false")], ids=["fsync", "no-fsync"])
async def test_a_restart_after_sigkill_keeps_every_acknowledged_record_and_continues_densely(tmp_path, flags):
    log_dir = tmp_path / "broker"
    async with kafka_serve(log_dir, *flags) as broker:
        await trio.to_thread.run_sync(functools.partial(create_topic, broker.bootstrap, TOPIC, PARTITIONS))
        before = CountedProducer(broker.bootstrap, TOPIC)
        await trio.to_thread.run_sync(before.run, 0, BEFORE)
        await broker.kill()
    assert before.failed == [] and len(before.acked) == BEFORE

    async with kafka_serve(log_dir) as broker:
        ends = await trio.to_thread.run_sync(high_watermarks, broker.bootstrap, TOPIC, PARTITIONS)
        assert sum(ends) == BEFORE  # the index rebuilt on open names every recovered batch
        after = CountedProducer(broker.bootstrap, TOPIC)
        await trio.to_thread.run_sync(after.run, BEFORE, AFTER)
        assert after.failed == [] and len(after.acked) == AFTER
        for partition in range(PARTITIONS):  # new offsets continue where the recovered log ends
            offsets = sorted(a.offset for a in after.acked if a.partition == partition)
            assert offsets == list(range(ends[partition], ends[partition] + len(offsets)))
        seen = await trio.to_thread.run_sync(read_with_confluent, broker.bootstrap, TOPIC, PARTITIONS,
                                             BEFORE + AFTER)
        assert len(seen) == BEFORE + AFTER
        check_acknowledged_read_back(before.acked + after.acked, seen, PARTITIONS)
        assert await trio.to_thread.run_sync(high_watermarks, broker.bootstrap, TOPIC, PARTITIONS) == \
            [ends[p] + sum(a.partition == p for a in after.acked) for p in range(PARTITIONS)]
