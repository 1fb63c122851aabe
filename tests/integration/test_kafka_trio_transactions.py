"""trikafka's Trio transactional producer against the real broker (docs/protocol.md §19.8).

Commits become visible to read_committed readers (librdkafka's and
trikafka's own), aborts never do; offsets sent with a transaction reach the
group only when it commits; a second producer of the same transactional id
fences the first.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from typing import AsyncIterator, Iterator

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import read_with_confluent
from trikafka.client.kafka import (KafkaGroupConsumer, KafkaAdmin, KafkaClient, KafkaProducer, KafkaResponseError,
                                   NewTopic, PartitionConsumer, ProducerFencedError, TopicPartition,
                                   TransactionStateError)
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker


MAX_MESSAGE_BYTES = 4096  # a larger batch is refused (MESSAGE_TOO_LARGE): a batch that fails for good


class Boom(Exception):
    """Raised inside a transaction to abort it."""


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=3,
                              transaction_state_log_num_partitions=3, max_message_size=MAX_MESSAGE_BYTES) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def _create(client: KafkaClient, topic: str, partitions: int) -> None:
    assert await KafkaAdmin(client).create_topics([NewTopic(topic, partitions)]) == {topic: None}


@contextlib.asynccontextmanager
async def _transactional(client: KafkaClient, topic: str, partitions: int) -> AsyncIterator[KafkaProducer]:
    """A new topic and a transactional producer of a new id, initialized."""
    await _create(client, topic, partitions)
    async with KafkaProducer.open(client, transactional_id=_name("tx")) as producer:
        await producer.init_transactions()
        yield producer


async def _read_committed_until(client: KafkaClient, topic: str, partition: int, last: bytes) -> list[bytes]:
    """Values of one partition, read_committed, up to and including the value ``last``."""
    values: list[bytes] = []
    async with PartitionConsumer(client, topic, partition, max_wait_s=0.2, read_committed=True) as consumer:
        async for record in consumer:
            assert record.value is not None
            values.append(record.value)
            if record.value == last:
                return values
    raise AssertionError("unreachable: the consumer reads until it is closed")


async def test_commit_is_seen_and_abort_is_not(kafka: RunningKafkaBroker) -> None:
    topic = _name("txn-out")
    async with KafkaClient(kafka.bootstrap) as client:
        async with _transactional(client, topic, 2) as producer:
            async with producer.transaction():
                for i in range(4):
                    await producer.submit(topic, b"committed-%d" % i, partition=i % 2)
            with pytest.raises(Boom):
                async with producer.transaction():
                    for i in range(4):
                        await producer.send(topic, b"aborted-%d" % i, partition=i % 2)
                    raise Boom
            async with producer.transaction():
                await producer.send(topic, b"explicitly-aborted", partition=0)
                await producer.abort()
            async with producer.transaction():
                for p in range(2):
                    await producer.send(topic, b"end-%d" % p, partition=p)
        expected = {p: [b"committed-%d" % i for i in range(p, 4, 2)] + [b"end-%d" % p] for p in range(2)}
        for p in range(2):
            assert await _read_committed_until(client, topic, p, b"end-%d" % p) == expected[p]
    seen = await trio.to_thread.run_sync(functools.partial(
        read_with_confluent, kafka.bootstrap, topic, 2, 6, **{"isolation.level": "read_committed"}))
    assert {p: [s.value for s in seen if s.partition == p] for p in range(2)} == expected
    everything = await trio.to_thread.run_sync(functools.partial(
        read_with_confluent, kafka.bootstrap, topic, 2, 11, **{"isolation.level": "read_uncommitted"}))
    assert sum(s.value.startswith(b"aborted-") for s in everything) == 4  # the aborted records were written


async def _committed(client: KafkaClient, group: str, tp: TopicPartition) -> int:
    """The group's stable committed offset of ``tp`` (-1: none), once no transaction holds it pending."""
    with trio.fail_after(30):
        while True:
            try:
                return (await KafkaAdmin(client).list_group_offsets(group, [tp])).get(tp, -1)
            except KafkaResponseError as exc:
                if exc.error_code != ErrorCode.unstable_offset_commit:
                    raise
            await trio.sleep(0.05)  # the markers follow the EndTxn answer (§19.5.3)


async def _pending(client: KafkaClient, group: str, tp: TopicPartition) -> bool:
    """Whether OffsetFetch (require_stable) answers ``tp`` as held by an open transaction."""
    try:
        await KafkaAdmin(client).list_group_offsets(group, [tp])
    except KafkaResponseError as exc:
        return exc.error_code == ErrorCode.unstable_offset_commit
    return False


async def test_consume_transform_produce_commits_offsets_with_the_output(kafka: RunningKafkaBroker) -> None:
    source, sink, group = _name("ctp-in"), _name("ctp-out"), _name("copier")
    tp = TopicPartition(source, 0)
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, source, 1)
        await _create(client, sink, 1)
        async with KafkaProducer.open(client) as plain:
            for i in range(10):
                await plain.submit(source, b"in-%d" % i)
        async with KafkaProducer.open(client, transactional_id=_name("copier")) as producer, KafkaGroupConsumer(
                client, group, [source], auto_offset_reset="earliest", enable_auto_commit=False,
                read_committed=True, max_wait_s=0.2) as consumer:
            await producer.init_transactions()
            consumed = []
            async for message in consumer:
                consumed.append(message.record)
                if len(consumed) == 10:
                    break
            async with producer.transaction():
                for record in consumed[:5]:
                    await producer.send(sink, record.value)
                await producer.send_offsets(consumer, {tp: consumed[4].offset + 1})
                assert await _pending(client, group, tp)
            assert await _committed(client, group, tp) == consumed[4].offset + 1
            with pytest.raises(Boom):
                async with producer.transaction():
                    for record in consumed[5:]:
                        await producer.send(sink, record.value)
                    await producer.send_offsets(consumer.group_metadata(), {tp: consumed[9].offset + 1})
                    assert await _pending(client, group, tp)
                    raise Boom
            assert await _committed(client, group, tp) == consumed[4].offset + 1
            async with producer.transaction():
                await producer.send(sink, b"end")
        assert await _read_committed_until(client, sink, 0, b"end") == [b"in-%d" % i for i in range(5)] + [b"end"]


@pytest.mark.parametrize("while_open", [True, False], ids=["transaction-open", "between-transactions"])
async def test_a_second_producer_fences_the_first(kafka: RunningKafkaBroker, while_open: bool) -> None:
    topic, transactional_id = _name("fenced"), _name("tx")
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, transactional_id=transactional_id) as first, \
                KafkaProducer.open(client, transactional_id=transactional_id) as second:
            await first.init_transactions()
            async with first.transaction():
                await first.send(topic, b"first")
            if not while_open:
                await second.init_transactions()
            with pytest.raises(ProducerFencedError):  # the send (between) or the commit (open) is fenced
                async with first.transaction():
                    await first.send(topic, b"fenced")
                    if while_open:
                        await second.init_transactions()  # aborts the open transaction, then fences its producer
            with pytest.raises(ProducerFencedError):  # unusable from then on
                async with first.transaction():
                    pass
            async with second.transaction():
                await second.send(topic, b"second")
        assert await _read_committed_until(client, topic, 0, b"second") == [b"first", b"second"]


async def test_a_failed_batch_aborts_and_the_next_transaction_has_a_new_epoch(kafka: RunningKafkaBroker) -> None:
    topic = _name("too-large")
    async with KafkaClient(kafka.bootstrap) as client:
        async with _transactional(client, topic, 1) as producer:
            assert producer.idempotence is not None
            epoch = producer.idempotence.epoch
            with pytest.raises(KafkaResponseError) as raised:
                async with producer.transaction():
                    await producer.send(topic, b"aborted")
                    with pytest.raises(KafkaResponseError):
                        await producer.send(topic, b"x" * MAX_MESSAGE_BYTES * 2)
                    # the block swallowed the error: the commit aborts and raises it
            assert raised.value.error_code == ErrorCode.message_too_large
            assert producer.idempotence.epoch == epoch + 1  # sequences restart under a new epoch
            async with producer.transaction():
                await producer.send(topic, b"after")
        assert await _read_committed_until(client, topic, 0, b"after") == [b"after"]


async def test_misuse_is_refused_before_any_request(kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        async with KafkaProducer.open(client, transactional_id=_name("tx")) as producer:
            with pytest.raises(TransactionStateError, match="init_transactions"):
                async with producer.transaction():
                    pass
            await producer.init_transactions()
            with pytest.raises(TransactionStateError, match="inside a transaction"):
                await producer.send("anything", b"outside")
            async with producer.transaction():
                with pytest.raises(TransactionStateError):
                    async with producer.transaction():
                        pass
        with pytest.raises(ValueError):
            async with KafkaProducer.open(client, transactional_id="x", acks=1):
                pass
