"""DeleteRecords (docs/protocol.md §16.4, §16.6): the log start offset moves, is stored, survives a
restart, is taken by followers, and reads below it are out of range; through the clients that have the call."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as PythonPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, leader_of, learn_leaders
from tests.helpers.kafka_processes import KafkaCluster
from tests.helpers.kafka_wire import fetch_once, list_offset_answer
from trikafka.client import connect
from trikafka.log.log_start import LOG_START_FILE
from trikafka.testing import running_kafka_broker
from trikafka.wire import build_message_set
from trikafka.wire.errors import ErrorCode as ErrorCode07

EARLIEST, LATEST = -2, -1
RECORDS = 10


def _produce(bootstrap: str, topic: str, count: int = RECORDS) -> None:
    """``count`` records, one batch each, so that a deletion can fall between batches or inside one."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for n in range(count):
        producer.produce(topic, value=b"%d" % n, partition=0)
        producer.flush(CLIENT_TIMEOUT_S)
    assert len(producer) == 0


def _confluent_delete(bootstrap: str, topic: str, offset: int, operation_timeout_s: float = CLIENT_TIMEOUT_S) -> int:
    """AdminClient.delete_records of partition 0 below ``offset``: the low watermark it answers
    (``operation_timeout_s``: the request's ``timeout_ms``, how long the ISR may take)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    learn_leaders(admin, topic)
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=CLIENT_TIMEOUT_S,
                                   operation_timeout=operation_timeout_s)
    (future,) = futures.values()
    return int(future.result(CLIENT_TIMEOUT_S).low_watermark)


def test_confluent_deletes_records_and_every_read_starts_after_them(tmp_path):
    with running_kafka_broker(str(tmp_path), num_partitions=1) as kafka:
        create_topic(kafka.bootstrap, "purged")
        _produce(kafka.bootstrap, "purged")
        assert _confluent_delete(kafka.bootstrap, "purged", 4) == 4
        assert list_offset_answer(kafka.bootstrap, "purged", 0, EARLIEST) == (ErrorCode.none, 4)
        assert fetch_once(kafka.bootstrap, "purged", 0, 3)[0] == ErrorCode.offset_out_of_range
        error, hw, records = fetch_once(kafka.bootstrap, "purged", 0, 4)
        assert (error, hw) == (ErrorCode.none, RECORDS) and records
        assert _confluent_delete(kafka.bootstrap, "purged", 2) == 4  # never back
        with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE|out of range"):
            _confluent_delete(kafka.bootstrap, "purged", RECORDS + 1)  # above the high watermark
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})
        try:
            learn_leaders(consumer, "purged")
            low, high = consumer.get_watermark_offsets(TopicPartition("purged", 0), timeout=CLIENT_TIMEOUT_S)
            assert (low, high) == (4, RECORDS)
        finally:
            consumer.close()
        assert (tmp_path / "purged-0" / LOG_START_FILE).read_text() == "4\n"

    with running_kafka_broker(str(tmp_path), num_partitions=1) as kafka:  # a restart keeps it
        assert list_offset_answer(kafka.bootstrap, "purged", 0, EARLIEST) == (ErrorCode.none, 4)
        assert fetch_once(kafka.bootstrap, "purged", 0, 0)[0] == ErrorCode.offset_out_of_range


def test_kafka_python_deletes_up_to_the_high_watermark(tmp_path):
    with running_kafka_broker(str(tmp_path), num_partitions=1) as kafka:
        create_topic(kafka.bootstrap, "emptied")
        _produce(kafka.bootstrap, "emptied", 3)
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        try:
            answer = admin.delete_records({PythonPartition("emptied", 0): -1})  # -1: the high watermark
            assert answer[PythonPartition("emptied", 0)]["low_watermark"] == 3
        finally:
            admin.close()
        assert list_offset_answer(kafka.bootstrap, "emptied", 0, EARLIEST) == (ErrorCode.none, 3)
        assert list_offset_answer(kafka.bootstrap, "emptied", 0, LATEST) == (ErrorCode.none, 3)


def test_a_07_topics_partition_is_refused_with_unsupported_for_message_format(tmp_path):
    """A 0.7 partition's offsets are byte positions only retention moves (§16.4): refused, nothing stored."""
    with running_kafka_broker(str(tmp_path), num_partitions=1) as kafka:

        async def produce_07() -> None:
            async with await connect("127.0.0.1", kafka.port) as conn:
                produced = await conn.produce_acked([("plain", 0, build_message_set([b"one", b"two"]))])
                assert produced[0].error == ErrorCode07.NO_ERROR

        trio.run(produce_07)
        with pytest.raises(KafkaException, match="UNSUPPORTED_FOR_MESSAGE_FORMAT"):
            _confluent_delete(kafka.bootstrap, "plain", 1)
        assert not (tmp_path / "plain-0" / LOG_START_FILE).exists()


# ----------------------------------------------------------------- replicated (§12.4.1)

TOPIC = "purged-replicated"


def _stored_start(log_dir: Path) -> str | None:
    path = log_dir / f"{TOPIC}-0" / LOG_START_FILE
    return path.read_text() if path.exists() else None


async def test_the_answer_waits_for_the_isr_to_store_the_start_and_the_next_leader_answers_it(zk_chroot, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        cluster = KafkaCluster(tmp_path, zk_chroot, stack)
        for broker_id in (1, 2, 3):
            await cluster.start(broker_id)
        await trio.to_thread.run_sync(functools.partial(create_topic, cluster.bootstrap(), TOPIC,
                                                        replication_factor=3))
        leader = await leader_of(cluster.bootstrap(), TOPIC, 0)
        await trio.to_thread.run_sync(_produce, cluster.bootstrap(), TOPIC)
        # timeout 0: the followers cannot have reported the new start yet (the leader's stays)
        with pytest.raises(KafkaException, match="REQUEST_TIMED_OUT|timed out"):
            await trio.to_thread.run_sync(_confluent_delete, cluster.bootstrap(), TOPIC, 5, 0)
        assert await trio.to_thread.run_sync(_confluent_delete, cluster.bootstrap(), TOPIC, 6) == 6
        # answered once each follower stored it from the leader's answers and said so in its fetch
        assert [_stored_start(tmp_path / f"broker-{b}") for b in (1, 2, 3)] == ["6\n"] * 3
        await cluster.brokers[leader].kill()
        survivors = cluster.bootstrap(without=(leader,))
        new_leader = await leader_of(survivors, TOPIC, 0, isr=2, not_on=leader)
        at = cluster.brokers[new_leader].bootstrap
        assert await trio.to_thread.run_sync(list_offset_answer, at, TOPIC, 0, EARLIEST) == (ErrorCode.none, 6)
        assert (await trio.to_thread.run_sync(fetch_once, at, TOPIC, 0, 5))[0] == ErrorCode.offset_out_of_range
