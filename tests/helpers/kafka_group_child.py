"""A librdkafka group member in a child process, for tests that SIGKILL it (no LeaveGroup, no commit).

``python -m tests.helpers.kafka_group_child BOOTSTRAP GROUP TOPIC`` joins the
group, prints ``assigned <partition> ...`` on each assignment, and polls until killed.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer


def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})

    def on_assign(_: Consumer, partitions: list) -> None:
        print("assigned", *sorted(p.partition for p in partitions), flush=True)

    consumer.subscribe([topic], on_assign=on_assign)
    while True:
        consumer.poll(0.1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
