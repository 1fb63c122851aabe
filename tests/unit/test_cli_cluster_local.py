"""``cluster up``'s wait for a broker it starts: it asks the child how it ended, never the child's
command line, which reads empty for a moment while the child executes its program."""

from __future__ import annotations

import sys

import pytest

from trikafka.cli import cluster_local
from trikafka.cli.cluster_local import LocalClusterError, ClusterProcess


def test_a_started_child_that_serves_is_waited_for_whatever_its_command_line(tmp_path):
    ready = tmp_path / "broker-0.port"
    # A child whose command line never names trikafka: only the child's own state may say it runs.
    script = f"import time; time.sleep(0.3); open({str(ready)!r}, 'w').write('9092\\nkafka 9192\\n'); time.sleep(30)"
    process = cluster_local._spawn([sys.executable, "-c", script], tmp_path / "broker-0.log", tmp_path)
    try:
        member = ClusterProcess("broker-0", process.pid, "127.0.0.1", 0, 0)
        assert cluster_local._wait_ready_file(ready, member, process, tmp_path / "broker-0.log") == (9092, 9192)
    finally:
        process.kill()
        process.wait()


def test_a_started_child_that_exits_is_reported_with_its_status_and_last_line(tmp_path):
    log_path = tmp_path / "broker-0.log"
    process = cluster_local._spawn([sys.executable, "-c", "print('trikafka: no such setting x'); raise SystemExit(2)"],
                                   log_path, tmp_path)
    member = ClusterProcess("broker-0", process.pid, "127.0.0.1", 0, 0)
    with pytest.raises(LocalClusterError, match=r"^broker-0 exited at start \(status 2\): trikafka: no such "
                                                r"setting x \(see "):
        cluster_local._wait_ready_file(tmp_path / "broker-0.port", member, process, log_path)
