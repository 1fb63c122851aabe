"""kcat (Debian's ``/usr/bin/kcat``, librdkafka) against the Kafka listener (docs/protocol.md §16).

``-L`` lists the brokers and topics from Metadata, ``-P -K:`` produces keyed
lines, ``-C -e`` consumes from the beginning to the end and exits: on a
standalone ``trikafka serve`` and on a three-broker ZooKeeper cluster.
"""

from __future__ import annotations

import functools
import subprocess
from typing import Any

import trio

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_processes import kafka_cluster, kafka_serve

KCAT = "/usr/bin/kcat"
KCAT_TIMEOUT_S = 60.0
LINES = [f"key-{i % 5}:value-{i}" for i in range(200)]


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    """Run kcat to its end; its stdout (a non-zero exit fails with its stderr)."""
    done = subprocess.run([KCAT, "-b", bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=KCAT_TIMEOUT_S)
    assert done.returncode == 0, f"kcat {args} exited with {done.returncode}: {done.stderr}"
    return done.stdout


async def round_trip(bootstrap: str, topic: str, broker_count: int, **create: Any) -> None:
    await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, topic, 1, **create))
    listing = await trio.to_thread.run_sync(kcat, bootstrap, "-L", "-t", topic)
    assert f" {broker_count} brokers:" in listing, listing
    assert f'topic "{topic}" with 1 partitions:' in listing, listing
    await trio.to_thread.run_sync(functools.partial(kcat, bootstrap, "-P", "-t", topic, "-K:",
                                                    stdin="\n".join(LINES) + "\n"))
    consumed = await trio.to_thread.run_sync(kcat, bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                                             "-f", "%o %k:%s\n")
    assert consumed.splitlines() == [f"{offset} {line}" for offset, line in enumerate(LINES)]


async def test_kcat_lists_produces_and_consumes_on_a_standalone_broker(tmp_path):
    async with kafka_serve(tmp_path / "broker") as broker:
        await round_trip(broker.bootstrap, "kcat-standalone", 1)


async def test_kcat_lists_produces_and_consumes_on_a_zookeeper_cluster(zk_chroot, tmp_path):
    async with kafka_cluster(tmp_path, zk_chroot) as cluster:
        await round_trip(cluster.bootstrap(), "kcat-replicated", 3, replication_factor=3)
