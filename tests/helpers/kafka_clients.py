"""Real Kafka clients against trikafka's Kafka listener (docs/protocol.md §16): shared test steps.

The clients are other people's code (kafka-python, confluent-kafka, aiokafka,
kcat); these helpers only drive them, so each test states what it checks.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import trio
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

if TYPE_CHECKING:
    from trikafka.client.kafka import KafkaClient
    from trikafka.kafka.records import Record
    from trikafka.testing.kafka_broker import RunningKafkaBroker

CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Seen:
    """One record as a client delivered it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                 replication_factor: int = 1, **settings: Any) -> None:
    """CreateTopics through kafka-python's admin client (``settings``: its options, a secured listener's)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **settings)
    try:
        admin.create_topics([NewTopic(name, partitions, replication_factor, topic_configs=configs or {})])
    finally:
        admin.close()


def read_with_kafka_python(bootstrap: str, topic: str, partitions: int, count: int, **settings: Any) -> list[Seen]:
    """``count`` records from the start of every partition, without a group (assign, earliest)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000, **settings)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen: list[Seen] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    seen.append(Seen(r.partition, r.offset, r.key, r.value,
                                     tuple((k, bytes(v)) for k, v in r.headers), r.timestamp))
        return seen
    finally:
        consumer.close()


def read_with_confluent(bootstrap: str, topic: str, partitions: int, count: int, **settings: Any) -> list[Seen]:
    """``count`` records from the start of every partition with librdkafka (assign, no commits)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, **settings})
    try:
        assign_with_leaders(consumer, [ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: list[Seen] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise AssertionError(f"librdkafka consumer error: {message.error()}")
            seen.append(Seen(message.partition(), message.offset(), message.key(), message.value(),
                             tuple((k, bytes(v)) for k, v in (message.headers() or ())),
                             message.timestamp()[1]))
        return seen
    finally:
        consumer.close()


def learn_leaders(consumer: Any, *topics: str) -> None:
    """Have a librdkafka client fetch the topics' metadata (their partitions' leaders) now.  A call
    about a partition whose leader it does not know yet waits for librdkafka's own retry: an assigned
    partition's start offset is queried again only 500 ms later (a fixed timer), a watermark query
    right after ``Consumer()`` sometimes takes 0.7 s, and an AdminClient's first leader lookup, when
    it was sent on the bootstrap connection librdkafka then drops for the broker the metadata names,
    is sent again 1 to 3 s later."""
    for topic in topics:
        consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)


def assign_with_leaders(consumer: Any, partitions: list[Any]) -> None:
    """``consumer.assign(partitions)`` (librdkafka) once the consumer knows their leaders (``learn_leaders``)."""
    learn_leaders(consumer, *{p.topic for p in partitions})
    consumer.assign(partitions)


def dense(seen: list[Seen], partition: int) -> bool:
    """The partition's offsets run 0, 1, 2, ... with no gap (§16.6)."""
    offsets = sorted(s.offset for s in seen if s.partition == partition)
    return offsets == list(range(len(offsets)))


@dataclass(frozen=True)
class Acked:
    """One record the broker acknowledged: where it says the record is."""

    partition: int
    offset: int
    value: bytes


class CountedProducer:
    """confluent-kafka with ``acks=all`` sending the counted values ``b"0"``, ``b"1"``, ... to one topic.

    Idempotence is off and retries are on, so a batch whose answer was lost
    (its leader SIGKILLed) is sent again: duplicates are possible, and no
    acknowledged record may be lost.  ``acked`` and ``failed`` fill from the
    delivery callbacks, in the thread that calls :meth:`run`.
    """

    def __init__(self, bootstrap: str, topic: str, **settings: Any):
        from confluent_kafka import Producer

        self.topic = topic
        self.acked: list[Acked] = []
        self.failed: list[str] = []
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                   "retries": 1_000_000, "retry.backoff.ms": 100, "linger.ms": 5,
                                   "message.timeout.ms": 120_000, **settings})

    def _delivered(self, err: Any, message: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(Acked(message.partition(), message.offset(), message.value()))

    def run(self, first: int, count: int, *, in_flight: int = 50) -> None:
        """Send values ``first .. first + count - 1``, at most ``in_flight`` unanswered, and wait for every
        answer (bounded by ``message.timeout.ms``)."""
        for n in range(first, first + count):
            while len(self._producer) >= in_flight:
                self._producer.poll(0.05)
            self._producer.produce(self.topic, value=str(n).encode(), on_delivery=self._delivered)
            self._producer.poll(0)
        remaining = self._producer.flush(180)
        assert remaining == 0, f"{remaining} records never answered"


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's high watermark (ListOffsets latest), through librdkafka."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-watermarks"})
    try:
        learn_leaders(consumer, topic)
        return [consumer.get_watermark_offsets(ConfluentPartition(topic, p), timeout=CLIENT_TIMEOUT_S)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def check_acknowledged_read_back(acked: list[Acked], seen: list[Seen], partitions: int) -> None:
    """The promise of ``acks=all`` (docs/protocol.md §16.4, §12.6), checked on a read from the beginning:

    * every acknowledged record is read back, at the offset its acknowledgement named;
    * each partition's offsets run 0, 1, 2, ... with no gap and no offset twice (§16.6);
    * nothing is read that was never sent; a value may be read more than once (a
      retried batch whose first answer was lost is stored twice, at new offsets).
    """
    at = {(s.partition, s.offset): s.value for s in seen}
    lost = [a for a in acked if at.get((a.partition, a.offset)) != a.value]
    assert not lost, f"{len(lost)} acknowledged records not read back where acknowledged, e.g. {lost[:5]}"
    for partition in range(partitions):
        offsets = [s.offset for s in seen if s.partition == partition]
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition}: offsets not dense"
    sent = {a.value for a in acked}
    unknown = [s for s in seen if s.value is None or not s.value.isdigit()]
    assert not unknown, f"records never sent: {unknown[:5]}"
    assert sent <= {s.value for s in seen}


def check_exactly_once(acked: list[Acked], seen: list[Seen], partitions: int) -> None:
    """The promise of an idempotent producer (docs/protocol.md §19.3, §19.4) on top of
    ``check_acknowledged_read_back``'s: no value is read twice, and each partition holds its values
    in the order they were sent (the counted values rise with the offsets)."""
    check_acknowledged_read_back(acked, seen, partitions)
    values = [s.value for s in seen]
    twice = sorted({v for v in values if values.count(v) > 1})
    assert not twice, f"{len(twice)} values stored twice, e.g. {twice[:5]}"
    for partition in range(partitions):
        in_offset_order = [int(s.value or b"-1") for s in sorted(seen, key=lambda s: s.offset)
                           if s.partition == partition]
        assert in_offset_order == sorted(in_offset_order), f"partition {partition}: values out of order"


async def leader_of(bootstrap: str, topic: str, partition: int, *, isr: int = 3, not_on: int | None = None,
                    wait_s: float = 120.0) -> int:
    """The broker Metadata names as the partition's leader, once it names one (other than ``not_on``)
    with an ISR of ``isr`` replicas and that broker serves the partition as its leader: Metadata may
    name a new leader before that broker has taken the role, and a client then retries on
    NOT_LEADER_OR_FOLLOWER (a step that sends one request to it must not see that window)."""
    from confluent_kafka.admin import AdminClient
    from kio.schema.errors import ErrorCode

    from tests.helpers.kafka_wire import list_offset_answer

    admin = AdminClient({"bootstrap.servers": bootstrap})
    with trio.fail_after(wait_s):
        while True:
            metadata = await trio.to_thread.run_sync(functools.partial(admin.list_topics, topic, timeout=10))
            found = metadata.topics[topic].partitions.get(partition)
            if found is not None and found.leader >= 0 and found.leader != not_on and len(found.isrs) == isr:
                at = metadata.brokers[found.leader]
                served = await trio.to_thread.run_sync(list_offset_answer, f"{at.host}:{at.port}", topic, partition, -1)
                if served[0] == ErrorCode.none:
                    return int(found.leader)
            await trio.sleep(0.1)


def sasl_settings(mechanism: str, user: str, password: str) -> dict[str, Any]:
    """librdkafka's settings for a SASL_PLAINTEXT login."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism, "sasl.username": user,
            "sasl.password": password}


def login_error(bootstrap: str, **settings: Any) -> Any | None:
    """librdkafka's first error for an admin client logging in with ``settings``, or None once that
    client described the cluster.  A failed login is reported through ``error_cb`` at once (librdkafka
    then retries until closed), so neither outcome waits for a request timeout."""
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **settings})
    described = admin.describe_cluster(request_timeout=CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not errors and not described.done():
        assert time.monotonic() < deadline, "librdkafka neither logged in nor reported an error"
        admin.poll(0.05)
    if errors:
        return errors[0]
    described.result()
    return None


@contextlib.contextmanager
def running_sasl_broker(log_dir: str, user: str, password: str) -> Iterator[RunningKafkaBroker]:
    """A SASL_PLAINTEXT broker on ``log_dir`` whose users file holds ``user`` (both SCRAM mechanisms)."""
    from trikafka.broker.credentials import CredentialFile, new_record
    from trikafka.testing import running_kafka_broker

    CredentialFile(log_dir).add(user, new_record(password))
    with running_kafka_broker(log_dir, kafka_security_protocol="SASL_PLAINTEXT") as running:
        yield running


async def read_partition(client: KafkaClient, topic: str, partition: int, count: int,
                         offset: int | None = None) -> list[Record]:
    """The first ``count`` records of ``topic``-``partition`` from ``offset`` (the earliest by
    default), read with trikafka's Trio client; none for a ``count`` of 0."""
    from trikafka.client.kafka import EARLIEST, PartitionConsumer

    records: list[Record] = []
    if count == 0:
        return records
    async with PartitionConsumer(client, topic, partition, EARLIEST if offset is None else offset,
                                 max_wait_s=0.2) as consumer:
        async for record in consumer:
            records.append(record)
            if len(records) == count:
                break
    return records
