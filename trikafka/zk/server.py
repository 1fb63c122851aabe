"""Run a private, loopback-only ZooKeeper server as a child process.

Built for Debian's ``zookeeper`` package (3.8): the jars are found under the
usual Java library directories, the server is ``ZooKeeperServerMain`` with a
generated config (admin server off, 4-letter words whitelisted, small heap),
readiness is ``srvr`` answering with a ``Mode:`` line (``ruok`` answers too
early), and it is always stopped by PID with SIGKILL.

Two front ends:

* :class:`ZooKeeperProcess`: blocking start/stop/restart, for pytest fixtures
  and scripts (call it from the main thread, see "orphans" below);
* :func:`run_zookeeper`: a Trio task for ``nursery.start``; cancelling it kills
  the server.

Orphans: on Linux the JVM is launched through ``setpriv --pdeathsig KILL``, so
it dies if the launching *thread* dies, even on SIGKILL of Python.  That is why
the process is spawned on the calling thread (never a Trio worker thread,
whose exit after 10 s idle would kill the server).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from .server_setup import (
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_TICK_TIME_MS,
    PROBE_INTERVAL_S,
    ZooKeeperConfig,
    ZooKeeperStartError,
    _serving,
    build_command,
    find_classpath,
    find_java,
    four_letter_word,
    four_letter_word_async,
    port_choices,
)

_LIVE_PIDS: set[int] = set()


def _kill_live_servers_at_exit() -> None:
    for pid in list(_LIVE_PIDS):
        _kill(pid)


atexit.register(_kill_live_servers_at_exit)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class ZooKeeperProcess:
    """One server on ``host:port`` with its config, data and log under ``data_dir``.

    ``port=0`` picks a free port (retrying on a port race); ``restart`` keeps
    the port and data dir.  Use from the thread that will outlive the server
    (normally the main thread).  Also a context manager.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.ready_timeout_s = ready_timeout_s
        self.log_path = Path(self.data_dir, "zookeeper.log")
        self.startup_s: float | None = None  # launch -> serving, of the last start
        self._process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- blocking API -----------------------------------------------------------

    def start(self) -> None:
        """Launch and wait until the server serves.  Raises ZooKeeperStartError."""
        if self.running:
            raise RuntimeError(f"ZooKeeper already running (pid {self.pid})")
        for self.port, last in port_choices(self.port, self.host):
            self.spawn()
            try:
                self._wait_ready_blocking()
                return
            except ZooKeeperStartError:
                self.stop()
                if last:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """SIGKILL the server by PID and reap it (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        _kill(process.pid)
        process.wait()
        _LIVE_PIDS.discard(process.pid)

    def restart(self) -> None:
        """Kill and start again on the same port with the same data."""
        self.stop()
        self.start()

    def __enter__(self) -> "ZooKeeperProcess":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- pieces shared with run_zookeeper -----------------------------------------

    def spawn(self) -> subprocess.Popen:
        """Write the config and launch the JVM (non-blocking); log appended to ``log_path``."""
        config = ZooKeeperConfig(self.data_dir, self.port, self.host, self.tick_time_ms,
                                 self.max_session_timeout_ms)
        command = build_command(config.write(), find_classpath(), find_java())
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"==== launching ZooKeeper on {self.host}:{self.port}\n".encode())
            log_file.flush()
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                cwd=self.data_dir, start_new_session=True,
            )
        _LIVE_PIDS.add(self._process.pid)
        self._launched_at = time.monotonic()
        return self._process

    def log_tail(self, max_lines: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])

    def _start_failed(self, why: str) -> ZooKeeperStartError:
        return ZooKeeperStartError(f"ZooKeeper on {self.connect_string} {why}; log tail:\n{self.log_tail()}")

    def _wait_ready_blocking(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise self._start_failed(f"exited with {self._process.returncode}")
            if _serving(four_letter_word(self.host, self.port, "srvr")):
                self.startup_s = time.monotonic() - self._launched_at
                return
            time.sleep(PROBE_INTERVAL_S)
        raise self._start_failed(f"not serving after {self.ready_timeout_s} s")

    async def wait_ready(self) -> None:
        """Trio version of the readiness wait (probes with Trio sockets)."""
        with trio.move_on_after(self.ready_timeout_s):
            while True:
                assert self._process is not None
                if self._process.poll() is not None:
                    raise self._start_failed(f"exited with {self._process.returncode}")
                if _serving(await four_letter_word_async(self.host, self.port, "srvr")):
                    self.startup_s = time.monotonic() - self._launched_at
                    return
                await trio.sleep(PROBE_INTERVAL_S)
        raise self._start_failed(f"not serving after {self.ready_timeout_s} s")

    async def wait_exit(self) -> int:
        """Wait (thread-free on Linux) until the process exits; returns its code."""
        process = self._process
        assert process is not None
        try:
            pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            while process.poll() is None:
                await trio.sleep(0.1)
            return process.returncode
        try:
            await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return process.wait()


@dataclass(frozen=True)
class ZooKeeperEndpoint:
    """What :func:`run_zookeeper` reports once the server serves."""

    host: str
    port: int
    pid: int
    data_dir: Path
    log_path: Path
    startup_s: float

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"


async def run_zookeeper(
    data_dir: str | os.PathLike,
    port: int = 0,
    *,
    task_status: trio.TaskStatus[ZooKeeperEndpoint] = trio.TASK_STATUS_IGNORED,
    host: str = "127.0.0.1",
    tick_time_ms: int = DEFAULT_TICK_TIME_MS,
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
) -> None:
    """Supervise a ZooKeeper server: ``endpoint = await nursery.start(run_zookeeper, dir, 0)``.

    Reports a :class:`ZooKeeperEndpoint` once the server serves; runs until
    cancelled, then SIGKILLs it.  To restart, cancel and start again with the
    same ``data_dir`` and ``endpoint.port``.

    Raises:
        ZooKeeperStartError: it did not become ready, or it died while running.
    """
    server = ZooKeeperProcess(data_dir, port, host=host, tick_time_ms=tick_time_ms,
                              max_session_timeout_ms=max_session_timeout_ms,
                              ready_timeout_s=ready_timeout_s)
    try:
        for server.port, last in port_choices(port, host):
            server.spawn()  # on the Trio thread on purpose: see the module docstring
            try:
                await server.wait_ready()
                break
            except ZooKeeperStartError:
                server.stop()
                if last:
                    raise
        assert server.pid is not None and server.startup_s is not None
        task_status.started(ZooKeeperEndpoint(host, server.port, server.pid, server.data_dir,
                                              server.log_path, server.startup_s))
        returncode = await server.wait_exit()
        raise server._start_failed(f"died while running (exit code {returncode})")
    finally:
        server.stop()
