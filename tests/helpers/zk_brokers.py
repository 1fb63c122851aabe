"""Real ``trikafka serve --zookeeper`` processes for the cluster, mirror and Spark audit tests.

Each broker runs on a free port with its log dir under the test's directory (so a
restart finds its data); the child is killed by PID when its ``async with`` ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, AsyncIterator

from tests.helpers.broker_testing import READY_MARKER, ChildProcess, child_process
from trikafka.cli.serve import read_ready_file

PARTITIONS_PER_BROKER = 2
# A short flush timer, so what acks=0 sends becomes visible to fetches quickly.
BROKER_FLAGS = ("--num-partitions", str(PARTITIONS_PER_BROKER),
                "--set", "log.default.flush.scheduler.interval.ms=50")


class BrokerProcess:
    """One ``trikafka serve --zookeeper`` child; ``port`` is known once it is ready."""

    def __init__(self, broker_id: int, child: ChildProcess, ready_file: str):
        self.broker_id = broker_id
        self.child = child
        self.ready_file = ready_file
        self.port = 0
        self.kafka_port: int | None = None

    async def wait_ready(self) -> int:
        await self.child.wait_for_stderr(READY_MARKER)
        self.port, self.kafka_port = read_ready_file(self.ready_file)
        return self.port

    async def stop(self) -> None:
        """SIGTERM: the graceful shutdown, which deregisters; it must exit with 0."""
        self.child.signal(signal.SIGTERM)
        assert await self.child.wait() == 0, self.child.stderr.decode(errors="replace")


@contextlib.asynccontextmanager
async def broker_process(tmp_path: Any, zk_connect: str, broker_id: int) -> AsyncIterator[BrokerProcess]:
    """Start broker ``broker_id`` on a free port (its log dir survives restarts); don't wait for it."""
    log_dir = tmp_path / f"broker{broker_id}"
    ready_file = str(tmp_path / f"broker{broker_id}.port")
    with contextlib.suppress(FileNotFoundError):
        os.remove(ready_file)  # a restart must not read the previous run's port
    async with child_process("serve", "--zookeeper", zk_connect, "--broker-id", str(broker_id),
                             "--port", "0", "--ready-file", ready_file, "--log-dir", str(log_dir),
                             *BROKER_FLAGS) as child:
        yield BrokerProcess(broker_id, child, ready_file)
