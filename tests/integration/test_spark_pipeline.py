"""The page-view pipeline end to end: generate, load, SIGKILL the load, load again -> exactly once."""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trikafka.spark.offsets import PartitionKey
from trikafka.spark.pageviews import generate_pageviews, iter_pageviews
from trikafka.wire import Codec

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark, pytest.mark.slow]

KILL_SEED = int(os.environ.get("TRIKAFKA_KILL_SEED", "7001"))
START_MS = 1_714_567_200_000  # 2024-05-01T12:40:00Z: the events span two UTC hours
INTERVAL_MS = 97
LOAD_TIMEOUT_S = 300.0


def _generate(broker_cluster, topic: str, count: int, seed: int, codec: Codec, start_ms: int) -> list[bytes]:
    """Produce ``count`` page views; returns their payloads (recomputed from the same seed)."""
    targets = [PartitionKey(topic, b, p) for b in (0, 1) for p in (0, 1)]
    summary = generate_pageviews(
        broker_cluster.addresses, targets, count, rng=random.Random(seed), clock_ms=lambda: start_ms,
        interval_ms=INTERVAL_MS, batch_size=250, codec=codec,
    )
    assert summary.messages == count and len(summary.per_partition) == 4
    views = iter_pageviews(count, rng=random.Random(seed), start_ms=start_ms, interval_ms=INTERVAL_MS)
    return [v.to_json_bytes() for v in views]


def _load_command(broker_cluster, topic: str, output: Path, checkpoint: Path) -> list[str]:
    return [
        sys.executable, "-m", "trikafka.spark.pipeline", "load",
        "--brokers", broker_cluster.broker_list, "--partitions-per-broker", "2", "--topic", topic,
        "--output", str(output), "--checkpoint", str(checkpoint), "--max-bytes-per-trigger", "120000",
    ]


def _start_load(command: list[str], log_path: Path) -> subprocess.Popen:
    setpriv = shutil.which("setpriv")
    wrapped = [setpriv, "--pdeathsig", "KILL", *command] if setpriv else command
    with open(log_path, "ab") as log:
        # Its own process group: the driver, its JVM and Python workers die together, like a crash.
        return subprocess.Popen(wrapped, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the load job's process group (created by us; pgid == its pid) and wait until it is gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed load job's processes did not exit")


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Poll (this waits on another process tree) until ``path`` exists; False if the job ended first."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)
    return True


def _run_and_kill(command, log_path: Path, checkpoint: Path, delay_s: float) -> bool:
    """Start the load, SIGKILL it ``delay_s`` after its query wrote offsets/0; True if it was killed."""
    proc = _start_load(command, log_path)
    try:
        if not _wait_for(checkpoint / "offsets" / "0", proc, LOAD_TIMEOUT_S):
            assert proc.returncode == 0, log_path.read_text()
            return False
        time.sleep(delay_s)
        killed = proc.poll() is None
        _kill_group(proc)
        return killed
    finally:
        if proc.poll() is None:
            _kill_group(proc)


def _expected_aggregate(payloads: list[bytes]) -> dict[tuple[str, int], int]:
    counts: collections.Counter = collections.Counter()
    for payload in payloads:
        event = json.loads(payload)
        counts[(event["page"], event["timestamp"] // 60_000 * 60_000)] += 1
    return dict(counts)


def test_load_killed_at_random_moments_restarts_to_exactly_once(tk, spark, broker_cluster, unique_topic, tmp_path):
    rng = random.Random(KILL_SEED)
    payloads = _generate(broker_cluster, unique_topic, 24_000, KILL_SEED, Codec.NONE, START_MS)
    payloads += _generate(broker_cluster, unique_topic, 8_000, KILL_SEED + 1, Codec.GZIP,
                          START_MS + 24_000 * INTERVAL_MS)
    output, checkpoint, log_path = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "load.log"
    command = _load_command(broker_cluster, unique_topic, output, checkpoint)

    # Crash 1: mid-stream.  Crash 2: anywhere in the restarted run (stream, vacuum or aggregate).
    assert _run_and_kill(command, log_path, checkpoint, rng.uniform(0.5, 5.0)), "the first run ended before the kill"
    commits_after_kill = len(list((checkpoint / "commits").glob("[0-9]*")))
    _run_and_kill(command, log_path, checkpoint, rng.uniform(0.0, 15.0))

    final = subprocess.run(command, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    assert final.returncode == 0, final.stderr[-5000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    assert summary["rows_total"] == len(payloads)
    assert len(list((checkpoint / "commits").glob("[0-9]*"))) > commits_after_kill

    events = spark.read.parquet(str(output / "events"))
    rows = events.select("broker", "partition", "offset", "next_offset", "payload", "page", "hour").collect()
    assert sorted(bytes(r.payload) for r in rows) == sorted(payloads)  # every message exactly once
    assert {r.hour for r in rows} == {"2024-05-01-12", "2024-05-01-13"}

    # After the vacuum a plain Parquet reader sees exactly the committed files too.
    import pyarrow.dataset as ds

    plain = ds.dataset(str(output / "events"), format="parquet", partitioning="hive").to_table(columns=["payload"])
    assert sorted(plain.column("payload").to_pylist()) == sorted(payloads)

    aggregate = spark.read.parquet(str(output / "page_views_per_minute")).selectExpr(
        "page", "unix_millis(minute) AS minute_ms", "views"
    ).collect()
    assert {(r.page, r.minute_ms): r.views for r in aggregate} == _expected_aggregate(payloads)
