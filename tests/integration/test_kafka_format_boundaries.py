"""The two formats never mix (docs/protocol.md §16.6): 0.7 requests on a Kafka-format topic
answer WrongFormat or close, Kafka requests on a 0.7 topic answer UNSUPPORTED_FOR_MESSAGE_FORMAT,
and the broker goes on serving both listeners."""

from __future__ import annotations

import trio
import datetime

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode as KafkaError
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i64

from tests.helpers.kafka_clients import create_topic, read_with_kafka_python
from tests.helpers.kafka_wire import exchange
from trikafka.client import connect
from trikafka.testing import running_kafka_broker
from trikafka.wire import build_message_set
from trikafka.wire.errors import ErrorCode


def test_each_listener_refuses_the_other_format_and_keeps_serving(tmp_path) -> None:
    with running_kafka_broker(str(tmp_path)) as kafka:
        create_topic(kafka.bootstrap, "kafka-topic")

        async def with_07_client() -> tuple[ErrorCode, list]:
            async with await connect("127.0.0.1", kafka.port) as conn:
                acked = await conn.produce_acked([("kafka-topic", 0, build_message_set([b"a 0.7 message"]))], acks=1)
                produced = await conn.produce_acked([("plain-topic", 0, build_message_set([b"one", b"two"]))])
                assert produced[0].error == ErrorCode.NO_ERROR
                fetched = await conn.fetch("kafka-topic", 0, 0, 4096)
                assert fetched.error == ErrorCode.WRONG_FORMAT
                return acked[0].error, produced

        error, _ = trio.run(with_07_client)
        assert error == ErrorCode.WRONG_FORMAT
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "message.timeout.ms": 3000})
        failures: list[str] = []
        producer.produce("plain-topic", value=b"x", partition=0,
                         on_delivery=lambda err, msg: failures.append(err.name() if err else "ok"))
        producer.flush(10)
        assert failures == ["UNSUPPORTED_FOR_MESSAGE_FORMAT"]
        fetched = exchange(kafka.bootstrap, 1, 12, FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
            topics=(FetchTopic(topic="plain-topic", partitions=(FetchPartition(
                partition=i32(0), fetch_offset=i64(0), log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20)),)),)))
        assert fetched.responses[0].partitions[0].error_code == KafkaError.unsupported_for_message_format
        # Both listeners still serve: a Kafka round trip and a 0.7 one.
        ok = Producer({"bootstrap.servers": kafka.bootstrap})
        ok.produce("kafka-topic", value=b"still here")
        assert ok.flush(10) == 0
        assert [s.value for s in read_with_kafka_python(kafka.bootstrap, "kafka-topic", 1, 1)] == [b"still here"]
