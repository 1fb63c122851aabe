"""Real ``trikafka serve`` processes serving the Kafka protocol (docs/protocol.md §16), standalone or on ZooKeeper.

Each broker takes free ports (``--port 0 --kafka-port 0``) and names them in its
ready file (§16.1); its log directory survives a SIGKILL, so a broker started
again on the same directory recovers what the killed one wrote.  The Kafka
clients that drive these brokers are blocking; tests call them through
``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import trio

from tests.helpers.broker_testing import READY_MARKER, ChildProcess, child_process
from trikafka.cli.serve import read_ready_file

# A short session, so the controller moves leadership off a SIGKILLed broker within seconds.
ZK_SESSION_TIMEOUT_MS = 1500
ZK_FLAGS = ("--set", f"zk.sessiontimeout.ms={ZK_SESSION_TIMEOUT_MS}")
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0


@dataclass
class KafkaServe:
    """One running ``trikafka serve`` child and its two ports."""

    child: ChildProcess
    log_dir: Path
    port: int
    kafka_port: int
    broker_id: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    async def kill(self) -> None:
        """SIGKILL, and wait until the process is gone (no shutdown work of any kind runs)."""
        self.child.signal(signal.SIGKILL)
        with trio.fail_after(EXIT_TIMEOUT_S):
            await self.child.wait()

    @property
    def stderr_tail(self) -> str:
        return bytes(self.child.stderr[-4000:]).decode(errors="replace")


@contextlib.asynccontextmanager
async def kafka_serve(log_dir: Path, *flags: str, broker_id: int | None = None, zookeeper: str | None = None,
                      ports: tuple[int, int] = (0, 0)) -> AsyncIterator[KafkaServe]:
    """``trikafka serve`` on ``log_dir`` (standalone unless ``zookeeper`` is given) and ``ports`` (its 0.7 and
    Kafka ports; 0: free ones); yields once it serves."""
    ready_file = Path(str(log_dir) + ".port")
    ready_file.unlink(missing_ok=True)  # a restart must not read the previous run's ports
    where = ("--standalone",) if zookeeper is None else ("--zookeeper", zookeeper, "--broker-id", str(broker_id),
                                                        *ZK_FLAGS)
    async with child_process("serve", *where, "--port", str(ports[0]), "--kafka-port", str(ports[1]), "--log-dir", str(log_dir),
                             "--ready-file", str(ready_file), "--log-level", "WARNING", *flags) as child:
        with trio.fail_after(START_TIMEOUT_S):
            await child.wait_for_stderr(READY_MARKER)
        port, kafka_port = read_ready_file(str(ready_file))
        assert kafka_port is not None, "serve --kafka-port 0 names its Kafka port in the ready file"
        yield KafkaServe(child, log_dir, port, kafka_port, broker_id)


class KafkaCluster:
    """Brokers ``1..n`` of one ZooKeeper chroot, each a ``kafka_serve`` child."""

    def __init__(self, root: Path, zookeeper: str, stack: contextlib.AsyncExitStack):
        self.root, self.zookeeper, self._stack = root, zookeeper, stack
        self.brokers: dict[int, KafkaServe] = {}

    async def start(self, broker_id: int, *flags: str) -> KafkaServe:
        serve = await self._stack.enter_async_context(
            kafka_serve(self.root / f"broker-{broker_id}", *flags, broker_id=broker_id, zookeeper=self.zookeeper))
        self.brokers[broker_id] = serve
        return serve

    async def restart_in(self, nursery: trio.Nursery, broker_id: int, *flags: str) -> KafkaServe:
        """Start broker ``broker_id`` again, on its log directory and its ports (clients keep the addresses
        they hold, as a restarted Kafka broker's), as a task of ``nursery``, which stops it: for a restart
        inside a test's own nursery, where entering the cluster's stack would misnest."""
        previous = self.brokers[broker_id]

        async def serving(task_status: trio.TaskStatus[KafkaServe] = trio.TASK_STATUS_IGNORED) -> None:
            async with kafka_serve(self.root / f"broker-{broker_id}", *flags, broker_id=broker_id,
                                   zookeeper=self.zookeeper, ports=(previous.port, previous.kafka_port)) as serve:
                task_status.started(serve)
                await trio.sleep_forever()

        serve: KafkaServe = await nursery.start(serving)
        self.brokers[broker_id] = serve
        return serve

    def bootstrap(self, *, without: tuple[int, ...] = ()) -> str:
        return ",".join(b.bootstrap for i, b in sorted(self.brokers.items()) if i not in without)


@contextlib.asynccontextmanager
async def kafka_cluster(root: Path, zookeeper: str, broker_count: int = 3, *flags: str) -> AsyncIterator[KafkaCluster]:
    """``broker_count`` brokers on ``zookeeper`` (a connect string with the test's chroot), all serving."""
    async with contextlib.AsyncExitStack() as stack:
        cluster = KafkaCluster(root, zookeeper, stack)
        for broker_id in range(1, broker_count + 1):
            await cluster.start(broker_id, *flags)
        yield cluster
