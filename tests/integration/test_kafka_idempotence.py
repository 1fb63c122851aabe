"""Idempotent producers on the Kafka listener (docs/protocol.md §19.1-§19.4): the leader's answers at
the byte level, producer ids that survive restarts, and other people's idempotent producers writing
each record exactly once, in order."""

from __future__ import annotations

import asyncio
import functools
from typing import Iterator

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import create_topic, read_with_confluent
from tests.helpers.kafka_processes import kafka_serve
from tests.helpers.kafka_wire import init_producer_id, produce_records
from trikafka.kafka.batch import BatchHeader, walk_headers
from trikafka.kafka.records import build_batch
from trikafka.log.names import SEGMENT_SUFFIX
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

COUNT = 2000


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


def batch(producer_id: int, epoch: int, seq: int, count: int = 2) -> bytes:
    return build_batch([f"{producer_id}:{epoch}:{seq + k}".encode() for k in range(count)], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=seq)


def test_the_leader_answers_duplicates_gaps_and_old_epochs(kafka: RunningKafkaBroker) -> None:
    bootstrap = kafka.bootstrap
    create_topic(bootstrap, "idem-wire")
    error, pid, epoch = init_producer_id(bootstrap)
    assert (error, epoch) == (ErrorCode.none, 0) and pid >= 0
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 0, 0)) == (ErrorCode.none, 0)
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 0, 0)) == (ErrorCode.none, 0)  # the retry
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 0, 2)) == (ErrorCode.none, 2)
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 0, 9))[0] == ErrorCode.out_of_order_sequence_number
    assert init_producer_id(bootstrap, producer_id=pid, epoch=0) == (ErrorCode.none, pid, 1)  # KIP-360's bump
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 1, 0)) == (ErrorCode.none, 4)
    assert produce_records(bootstrap, "idem-wire", 0, batch(pid, 0, 4))[0] == ErrorCode.invalid_producer_epoch
    assert init_producer_id(bootstrap, producer_id=pid)[0] == ErrorCode.invalid_request
    seen = read_with_confluent(bootstrap, "idem-wire", 1, 6)
    assert [s.value for s in seen] == [f"{pid}:{e}:{s}".encode() for e, s in
                                       [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]]


async def test_producer_ids_are_never_handed_out_twice_across_restarts(tmp_path) -> None:
    ids: list[int] = []
    for _ in range(2):
        async with kafka_serve(tmp_path / "broker") as serve:
            for _ in range(3):
                error, pid, _ = await trio.to_thread.run_sync(init_producer_id, serve.bootstrap)
                assert error == ErrorCode.none
                ids.append(pid)
            await serve.kill()  # SIGKILL: the rest of the block is never used
    assert len(set(ids)) == len(ids), ids
    assert (tmp_path / "broker" / ".trikafka-producer-ids").read_text() == "2000\n"


def _confluent(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "batch.num.messages": 50})
    for n in range(COUNT):
        producer.produce(topic, value=str(n).encode())
        producer.poll(0)
    assert producer.flush(60) == 0


def _kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=2,
                             batch_size=2000)
    for n in range(COUNT):
        producer.send(topic, str(n).encode())
    producer.flush(60)
    producer.close()


def _aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=2,
                                    max_batch_size=2000)
        await producer.start()
        try:
            for n in range(COUNT):
                await producer.send(topic, str(n).encode())
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest.mark.parametrize("client", [_confluent, _kafka_python, _aiokafka], ids=lambda f: f.__name__.strip("_"))
def test_idempotent_producers_write_each_record_once_in_order(kafka: RunningKafkaBroker, client) -> None:
    topic = f"idem-{client.__name__.strip('_')}"
    create_topic(kafka.bootstrap, topic)
    client(kafka.bootstrap, topic)
    seen = read_with_confluent(kafka.bootstrap, topic, 1, COUNT)
    assert [s.value for s in seen] == [str(n).encode() for n in range(COUNT)]
    assert [s.offset for s in seen] == list(range(COUNT))


def _stored_headers(log_dir: str, topic: str) -> list[BatchHeader]:
    from pathlib import Path

    return [h for segment in sorted(Path(log_dir, f"{topic}-0").glob(f"*{SEGMENT_SUFFIX}"))
            for h in walk_headers(segment.read_bytes())]


def test_trikafkas_producer_is_idempotent_under_acks_all_by_default(kafka: RunningKafkaBroker) -> None:
    from trikafka.client.kafka import KafkaClient
    from trikafka.client.kafka.producer import KafkaProducer

    async def run(topic: str, **settings: object) -> None:
        async with KafkaClient(kafka.bootstrap) as client:
            async with KafkaProducer.open(client, linger_s=0.001, batch_max_bytes=200, **settings) as producer:
                for n in range(100):
                    await producer.submit(topic, str(n).encode(), partition=0)

    for topic, settings in (("trikafka-idem", {}), ("trikafka-acks1", {"acks": 1})):
        create_topic(kafka.bootstrap, topic)
        trio.run(functools.partial(run, topic, **settings))
    headers = _stored_headers(kafka.log_dir, "trikafka-idem")
    assert len(headers) > 1 and {h.producer_id for h in headers} != {-1}
    assert len({(h.producer_id, h.producer_epoch) for h in headers}) == 1
    sequences = [(h.base_sequence, h.record_count) for h in headers]
    assert [s for s, _ in sequences] == [sum(c for _, c in sequences[:k]) for k in range(len(sequences))]
    assert {h.producer_id for h in _stored_headers(kafka.log_dir, "trikafka-acks1")} == {-1}
    with pytest.raises(ValueError, match="needs acks -1"):
        trio.run(functools.partial(run, "trikafka-acks1", acks=1, idempotent=True))
