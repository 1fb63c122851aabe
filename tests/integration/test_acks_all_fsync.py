"""``acks.all.fsync`` on a running broker (docs/protocol.md §12.6): a transaction's writes follow it.

With ``true`` (the default) every acks -1 write of a transaction waits for its own flush: the
``__transaction_state`` records (Ongoing, PrepareCommit, §19.5.3), the records and the marker
(§19.5.5).  With ``false`` none asks for a flush: the broker's flusher runs no flush at all while the
rules of §7.2 are set far away, and a read_committed reader still reads the transaction.
"""

from __future__ import annotations

import functools
from typing import Iterator

import pytest
import trio

from trikafka.client.kafka import KafkaAdmin, KafkaClient, KafkaProducer, NewTopic, PartitionConsumer
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

TOPIC = "out"
VALUES = [b"v%d" % i for i in range(3)]


async def _read_committed(client: KafkaClient) -> list[bytes]:
    values: list[bytes] = []
    async with PartitionConsumer(client, TOPIC, 0, max_wait_s=0.2, read_committed=True) as consumer:
        async for record in consumer:
            assert record.value is not None
            values.append(record.value)
            if len(values) == len(VALUES):
                return values
    raise AssertionError("unreachable: the consumer reads until it is closed")


async def _flushes_settled(kafka: RunningKafkaBroker) -> None:
    """On the broker's loop: once every flush asked for has completed (the flusher's count is final)."""
    for log in kafka.broker.log_manager.logs():
        await kafka.broker.flusher.wait_idle(log)


@pytest.fixture(params=[True, False], ids=["fsync", "no-fsync"])
def kafka(request: pytest.FixtureRequest) -> Iterator[RunningKafkaBroker]:
    """A broker whose logs are flushed only when an acknowledgement asks (§7.2's rules set far away)."""
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=1, transaction_state_log_num_partitions=1,
                              acks_all_fsync=request.param, log_flush_interval=1_000_000,
                              log_default_flush_interval_ms=600_000) as running:
        yield running


async def test_a_transactions_state_records_and_markers_follow_acks_all_fsync(kafka: RunningKafkaBroker) -> None:
    flusher = kafka.broker.flusher
    async with KafkaClient(kafka.bootstrap) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic(TOPIC, 1)]) == {TOPIC: None}
        async with KafkaProducer.open(client, transactional_id="tx") as producer:
            await producer.init_transactions()
            before = flusher.flushes_completed
            async with producer.transaction():
                for value in VALUES:
                    await producer.submit(TOPIC, value, partition=0)
        assert await _read_committed(client) == VALUES  # the marker is in the log
    await trio.to_thread.run_sync(functools.partial(trio.from_thread.run, _flushes_settled, kafka,
                                                    trio_token=kafka.trio_token))
    if kafka.broker.config.acks_all_fsync:
        assert flusher.flushes_completed - before >= 4  # Ongoing, the records, PrepareCommit, the marker
    else:
        assert flusher.flushes_completed == 0  # from the broker's start: no write asked for one
