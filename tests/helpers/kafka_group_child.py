"""A group member of another project's client in a child process, for tests that SIGKILL it.

``python -m tests.helpers.kafka_group_child BOOTSTRAP GROUP TOPIC [CLIENT]`` joins
the group with ``CLIENT`` (``confluent`` by default, ``aiokafka`` or ``kafka-python``),
prints ``assigned <partition> ...`` on each assignment, and polls until killed.
With ``--commit`` (after CLIENT) it commits what each poll delivered, so a
member's consumption is in the group's offsets; without, it commits nothing.
"""

from __future__ import annotations

import asyncio
import sys

from tests.helpers.kafka_groups import kafka_python_member

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500


def _assigned(partitions: object) -> None:
    print("assigned", *sorted(p.partition for p in partitions), flush=True)  # type: ignore[attr-defined]


def confluent(bootstrap: str, group: str, topic: str, commit: bool) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS})
    consumer.subscribe([topic], on_assign=lambda _c, partitions: _assigned(partitions))
    while True:
        message = consumer.poll(0.1)
        if commit and message is not None and message.error() is None:
            consumer.commit(message, asynchronous=False)


def kafka_python(bootstrap: str, group: str, topic: str, commit: bool) -> None:
    from kafka import ConsumerRebalanceListener

    class Printing(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: object) -> None:
            pass

        def on_partitions_assigned(self, assigned: object) -> None:
            _assigned(assigned)

    consumer = kafka_python_member(bootstrap, group, topic, listener=Printing(), auto_offset_reset="earliest",
                                   enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                                   heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
    while True:
        if consumer.poll(timeout_ms=100) and commit:
            consumer.commit()


def aiokafka(bootstrap: str, group: str, topic: str, commit: bool) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

    class Printing(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: object) -> None:
            pass

        async def on_partitions_assigned(self, assigned: object) -> None:
            _assigned(assigned)

    async def run() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                                    heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        consumer.subscribe([topic], listener=Printing())
        await consumer.start()
        while True:
            if await consumer.getmany(timeout_ms=100) and commit:
                await consumer.commit()

    asyncio.run(run())


CLIENTS = {"confluent": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka}


if __name__ == "__main__":
    client = sys.argv[4] if len(sys.argv) > 4 else "confluent"
    CLIENTS[client](*sys.argv[1:4], "--commit" in sys.argv[5:])
