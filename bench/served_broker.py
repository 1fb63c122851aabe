"""One ``trikafka serve`` child process for a benchmark, stopped by PID.

Every bench script starts its brokers through ``served_broker``: the broker
binds port 0, reports its port through ``--ready-file``, logs to a file next
to that ready file (a pipe could fill up and stall a chatty broker), and is
stopped with SIGTERM, then SIGKILL after ``stop_timeout_s``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trikafka.cli.serve import read_ready_file  # noqa: E402


@contextmanager
def served_broker(
    serve_args: list[str],
    ready_file: Path,
    *,
    log_level: str | None = None,
    start_timeout_s: float = 30.0,
    stop_timeout_s: float = 30.0,
    launcher: list[str] | None = None,
) -> Iterator[tuple[subprocess.Popen, int]]:
    """Run ``trikafka serve --port 0 --ready-file READY_FILE *serve_args``; yield (process, port).

    ``launcher`` replaces ``-m trikafka`` after the interpreter (e.g. ``-c CODE``
    that changes something, then runs ``trikafka.cli.main``).
    """
    ready_file.unlink(missing_ok=True)
    log_path = ready_file.with_suffix(".log")
    cmd = [sys.executable, *(launcher or ["-m", "trikafka"])]
    if log_level:
        cmd += ["--log-level", log_level]
    cmd += ["serve", "--port", "0", "--ready-file", str(ready_file), *serve_args]
    # The repository first on the path, so a checkout runs its own code even when not installed.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while not ready_file.exists() or not ready_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the broker did not start (log {log_path}):\n{tail}")
            time.sleep(0.02)
        yield proc, read_ready_file(str(ready_file))[0]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
