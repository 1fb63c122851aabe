"""Consumer groups of real Kafka clients against trikafka (docs/protocol.md §17): shared test steps.

``ConfluentGroup`` drives several librdkafka consumers of one group from one
thread, polling each in turn, and records what each was assigned and every
record it delivered; tests wait for a condition on that record (never for a
time) and then assert on it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition

WAIT_S = 60.0
POLL_S = 0.05


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0,
            **settings: Any) -> None:
    """``per_partition`` records to each partition, acks=all, values ``p<partition>-<n>``; ``settings``
    are more librdkafka settings (``enable.idempotence``: each partition stores them in order)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **settings})
    for n in range(start, start + per_partition):
        for partition in range(partitions):
            producer.produce(topic, value=f"p{partition}-{n}".encode(), partition=partition)
    assert producer.flush(30) == 0


class ConfluentGroup:
    """Members of one group, each a librdkafka consumer that commits what it delivered."""

    def __init__(self, bootstrap: str, group: str, topic: str, **settings: Any):
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.settings = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **settings}
        self.members: dict[str, Consumer] = {}
        self.assigned: dict[str, set[int]] = {}
        self.seen: list[tuple[str, int, int]] = []  # (member, partition, offset)
        self.revocations: dict[str, int] = {}  # member -> how many times its partitions were revoked
        self.assignments: dict[str, int] = {}  # member -> how many assignments it was given (empty ones too)

    def add(self, name: str, **settings: Any) -> None:
        """A new member ``name``; ``settings`` are its own librdkafka settings (``group.instance.id``)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False, **self.settings,
                             **settings})

        def on_assign(_: Consumer, partitions: list[ConfluentPartition]) -> None:
            self.assigned[name] = {p.partition for p in partitions}
            self.assignments[name] = self.assignments.get(name, 0) + 1

        def on_revoke(member: Consumer, partitions: list[ConfluentPartition]) -> None:
            self.commit(name)  # what it delivered is committed before another member takes over
            self.assigned[name] = set()
            self.revocations[name] = self.revocations.get(name, 0) + 1

        def on_lost(_: Consumer, partitions: list[ConfluentPartition]) -> None:
            self.assigned[name] = set()  # it left the group (max.poll.interval.ms): nothing is its to commit
            self.revocations[name] = self.revocations.get(name, 0) + 1  # taken away all the same

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        self.members[name] = consumer
        self.assigned[name] = set()

    def commit(self, name: str) -> None:
        try:
            self.members[name].commit(asynchronous=False)
        except Exception as exc:  # nothing delivered since the last commit: librdkafka says _NO_OFFSET
            if "NO_OFFSET" not in str(exc):
                raise

    def close(self, name: str, *, commit: bool = True) -> None:
        """Commit (unless not ``commit``: a member that lost its assignment may not) and leave the group."""
        if commit:
            self.commit(name)
        self.members[name].close()  # its revoke callback commits through self.members
        del self.members[name], self.assigned[name]

    def close_all(self) -> None:
        for name in list(self.members):
            self.close(name)

    def poll_until(self, done: Callable[[], bool], wait_s: float = WAIT_S) -> bool:
        """Poll every member in turn until ``done()``; whether it became true within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for name, consumer in list(self.members.items()):
                message = consumer.poll(POLL_S)
                if message is not None and not message.error():
                    self.seen.append((name, message.partition(), message.offset()))
            if done():
                return True
        return False

    def balanced(self, partitions: int, members: int) -> bool:
        """Every member holds a share of ``partitions``, the shares disjoint and covering them all."""
        shares = [self.assigned.get(name, set()) for name in self.members]
        union = set().union(*shares) if shares else set()
        return (len(self.members) == members and union == set(range(partitions))
                and sum(map(len, shares)) == partitions
                and all(len(s) in (partitions // members, -(-partitions // members)) for s in shares))

    def delivered(self) -> set[tuple[int, int]]:
        return {(partition, offset) for _, partition, offset in self.seen}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition (OffsetFetch through librdkafka)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([ConfluentPartition(topic, p) for p in range(partitions)], timeout=30)
        return {p.partition: p.offset for p in found}
    finally:
        consumer.close()


def kafka_python_member(bootstrap: str, group: str, topic: str, listener: Any = None, **settings: Any) -> Any:
    """A kafka-python consumer subscribed to ``topic`` in ``group`` whose coordinator knows the topic's
    partitions before it first joins.  ``Any``: kafka-python ships no types.

    kafka-python 3.0.12 loses a rebalance that a metadata change started when ``poll`` returns before
    the JoinGroup answer: the leader's assignment makes its metadata snapshots equal again, so the next
    ``poll`` sees no rejoin needed and never finishes the join in flight (coordinator/base.py
    ``join_group_async``); the member keeps no partitions and sends no heartbeat until its session
    expires.  A member whose coordinator took its snapshot before the topic's metadata arrived always
    takes that path (it assigns nothing, then rejoins once the metadata arrives).  The coordinator
    rebuilds its snapshot on a metadata answer received after ``subscribe``, so the subscription comes
    first and ``topics()`` then fetches the metadata, before ``poll`` can start the first join.
    """
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **settings)
    if listener is None:
        consumer.subscribe([topic])
    else:
        consumer.subscribe([topic], listener=listener)
    assert topic in consumer.topics(), f"{topic} is not in the cluster's metadata"
    return consumer
