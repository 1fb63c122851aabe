"""Shared fixtures of the Spark tests (loaded with ``pytest_plugins`` by each test_spark_* module).

* ``broker_cluster`` (session): two real ``trikafka serve`` subprocesses on
  127.0.0.1 (broker ids 0 and 1, two partitions per topic), stopped by PID.
  Tests share them, so every test uses topics of its own (``unique_topic``).
* ``spark`` (session): one local[2] SparkSession bound to 127.0.0.1, UI off.
  The source is *not* registered: it is found by PySpark's ``pyspark_*``
  discovery, which these tests therefore exercise.
* ``produce`` helpers that send with PRODUCE_ACKED acks=-1, so data is
  visible when they return.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from trikafka.spark.blocking_client import BrokerConnection
from trikafka.spark.cluster import format_broker_list
from trikafka.wire.metadata import BrokerAddress
from trikafka.wire import Codec, ErrorCode, ProducePart, build_message_set
from trikafka.cli.serve import read_ready_file

REPO_ROOT = Path(__file__).resolve().parents[2]
PARTITIONS_PER_BROKER = 2
BROKER_START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


ENTRY_OVERHEAD = {0: 9, 1: 10}  # length prefix + header, per magic (spec §3.2)


class Expected:
    """Rows the source must return, computed from what was produced (not with the reader's decoder)."""

    def __init__(self, topic: str):
        self.topic = topic
        self.rows: dict[tuple[int, int], list[tuple]] = {}

    def plain(self, broker: int, partition: int, base: int, payloads, magic: int = 1) -> None:
        rows = self.rows.setdefault((broker, partition), [])
        offset = base
        for payload in payloads:
            nxt = offset + ENTRY_OVERHEAD[magic] + len(payload)
            rows.append((self.topic, broker, partition, offset, nxt, payload))
            offset = nxt

    def wrapper(self, broker: int, partition: int, base: int, end: int, payloads) -> None:
        # spec §4: every inner message reports the wrapper's start, the last one its end.
        rows = self.rows.setdefault((broker, partition), [])
        for i, payload in enumerate(payloads):
            rows.append((self.topic, broker, partition, base, end if i == len(payloads) - 1 else base, payload))

    def all_rows(self) -> list[tuple]:
        return [row for key in sorted(self.rows) for row in self.rows[key]]

    def boundaries(self) -> dict[tuple[int, int], set[int]]:
        """Every entry boundary of each broker-partition (where a read may start or stop)."""
        return {key: {r[3] for r in rows} | {r[4] for r in rows} for key, rows in self.rows.items()}


def row_tuple(r) -> tuple:  # type: ignore[no-untyped-def]
    return (r.topic, r.broker, r.partition, r.offset, r.next_offset, bytes(r.payload))


def rows_by_partition(rows) -> dict[tuple[int, int], list[tuple]]:  # type: ignore[no-untyped-def]
    """Spark rows grouped per broker-partition, in the order read."""
    grouped: dict[tuple[int, int], list[tuple]] = {}
    for r in rows:
        grouped.setdefault((r.broker, r.partition), []).append(row_tuple(r))
    return grouped


def produce_mixed(broker_cluster, topic: str, seed: int) -> Expected:
    """Plain magic-1, magic-0, gzip and snappy sets on every broker-partition."""
    rng = random.Random(seed)
    expected = Expected(topic)
    for broker in (0, 1):
        for partition in (0, 1):
            def payloads(n):
                return [rng.randbytes(rng.randrange(0, 300)) for _ in range(n)]
            batch = payloads(40) + [b""]
            base, _ = broker_cluster.produce_payloads(topic, broker, partition, batch)
            expected.plain(broker, partition, base, batch)
            for codec in (Codec.GZIP, Codec.SNAPPY):
                batch = payloads(25)
                base, end = broker_cluster.produce_payloads(topic, broker, partition, batch, codec=codec)
                expected.wrapper(broker, partition, base, end, batch)
            batch = payloads(15)
            base, _ = broker_cluster.produce_payloads(topic, broker, partition, batch, magic=0)
            expected.plain(broker, partition, base, batch, magic=0)
    return expected


def spark_available() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


requires_spark = pytest.mark.skipif(not spark_available(), reason="needs pyspark, pyarrow and java")


def _command_with_pdeathsig(command: list[str]) -> list[str]:
    # If pytest itself is SIGKILLed, the kernel kills the broker too.
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", *command] if setpriv else command


def stop_process(proc: subprocess.Popen, *, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; always reaps (by PID, never by name)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class BrokerProcess:
    """One ``python -m trikafka serve`` subprocess."""

    broker_id: int
    log_dir: Path
    proc: subprocess.Popen | None = None
    port: int = 0
    kafka_port: int | None = None  # the Kafka listener (§16.1), named by the ready file
    output_path: Path | None = None
    num_partitions: int = PARTITIONS_PER_BROKER

    def start(self) -> None:
        ready = self.log_dir.parent / f"broker-{self.broker_id}.port"
        ready.unlink(missing_ok=True)
        self.output_path = self.log_dir.parent / f"broker-{self.broker_id}.log"
        command = [
            sys.executable, "-m", "trikafka", "serve", "--standalone", "--host", "127.0.0.1", "--port", "0",
            "--log-dir", str(self.log_dir), "--broker-id", str(self.broker_id),
            "--num-partitions", str(self.num_partitions), "--ready-file", str(ready),
        ]
        with open(self.output_path, "ab") as out:
            self.proc = subprocess.Popen(_command_with_pdeathsig(command), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker {self.broker_id} did not start: {self.output_path.read_text()}")
            time.sleep(0.05)
        self.port, self.kafka_port = read_ready_file(str(ready))

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    @property
    def address(self) -> BrokerAddress:
        return BrokerAddress(self.broker_id, "127.0.0.1", self.port)


@dataclass
class BrokerCluster:
    processes: list[BrokerProcess] = field(default_factory=list)

    @property
    def addresses(self) -> dict[int, BrokerAddress]:
        return {p.broker_id: p.address for p in self.processes}

    @property
    def kafka_bootstrap(self) -> str:
        """``host:port`` of broker 0's Kafka listener (each broker is a standalone cluster)."""
        port = self.processes[0].kafka_port
        assert port is not None, "serve names its Kafka port in the ready file"
        return f"127.0.0.1:{port}"

    @property
    def broker_list(self) -> str:
        return format_broker_list(self.addresses.values())

    def connect(self, broker_id: int) -> BrokerConnection:
        address = self.addresses[broker_id]
        return BrokerConnection(address.host, address.port)

    def produce(self, topic: str, broker_id: int, partition: int, message_set: bytes) -> tuple[int, int]:
        """Append ``message_set`` with acks=-1; returns (base_offset, next_offset)."""
        with self.connect(broker_id) as conn:
            (result,) = conn.produce_acked([ProducePart(topic, partition, message_set)])
        assert result.error == ErrorCode.NO_ERROR, result
        return result.base_offset, result.next_offset

    def produce_payloads(
        self, topic: str, broker_id: int, partition: int, payloads: Sequence[bytes], *,
        codec: Codec = Codec.NONE, magic: int = 1,
    ) -> tuple[int, int]:
        return self.produce(topic, broker_id, partition, build_message_set(payloads, magic=magic, codec=codec))

    def visible_end(self, topic: str, broker_id: int, partition: int) -> int:
        with self.connect(broker_id) as conn:
            return conn.visible_end(topic, partition)


@pytest.fixture(scope="session")
def broker_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    root = tmp_path_factory.mktemp("spark-brokers")
    cluster = BrokerCluster([BrokerProcess(i, root / f"broker-{i}") for i in range(2)])
    try:
        for process in cluster.processes:
            process.start()
        yield cluster
    finally:
        for process in cluster.processes:
            process.stop()


@pytest.fixture(scope="session")
def tk():  # type: ignore[no-untyped-def]
    """This module's helpers (``tk.Expected``, ``tk.produce_mixed``, ...) for the test modules.

    Test modules take them from this fixture instead of importing this plugin
    module, which would happen before pytest can assertion-rewrite it.
    """
    return sys.modules[__name__]


_topic_counter = itertools.count()


@pytest.fixture
def unique_topic() -> str:
    return f"t{next(_topic_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """The shared local[2] session; the trikafka source is found by discovery."""
    if not spark_available():
        pytest.skip("needs pyspark, pyarrow and java")
    from trikafka.spark.session import build_session

    # Discovery imports ``pyspark_trikafka`` from the workers' sys.path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    session = build_session("trikafka-tests", register=False)
    try:
        yield session
    finally:
        session.stop()
