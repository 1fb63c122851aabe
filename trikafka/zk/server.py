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
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import trio

DEFAULT_TICK_TIME_MS = 100
DEFAULT_MAX_SESSION_TIMEOUT_MS = 60_000
DEFAULT_READY_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 0.25  # ZOOKEEPER-5051: an early probe can hang forever
PROBE_INTERVAL_S = 0.05
PORT_ATTEMPTS = 3
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JAR_DIRS = ("/usr/share/java", "/usr/share/zookeeper", "/usr/share/zookeeper/lib")
CLASSPATH_ENV = "TRIKAFKA_ZOOKEEPER_CLASSPATH"
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr,cons,dump,conf,wchs"
# Small heap and a cheap JIT/GC: the server holds a few thousand znodes at most,
# and several servers may share a 2-core machine with other JVMs.
JVM_FLAGS = (
    "-Xms32m", "-Xmx256m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
)


class ZooKeeperNotFoundError(RuntimeError):
    """No ZooKeeper jars or no ``java`` on this machine."""


class ZooKeeperStartError(RuntimeError):
    """The server exited or did not become ready in time (see its log)."""


# -- discovery and configuration ------------------------------------------------


def find_classpath(jar_dirs: tuple[str, ...] = JAR_DIRS) -> str:
    """The Java classpath for the server.

    ``$TRIKAFKA_ZOOKEEPER_CLASSPATH`` wins.  Debian's ``zookeeper.jar`` names its
    dependencies in its manifest, so it plus ``slf4j-simple.jar`` (for logs)
    suffices; a tarball-style ``lib`` directory contributes all of its jars.
    """
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        return override
    for directory in jar_dirs:
        server_jar = _server_jar(directory)
        if server_jar is None:
            continue
        if Path(directory, "zookeeper.jar").exists():
            extra = [p for p in (Path(directory, "slf4j-simple.jar"),) if p.exists()]
            return os.pathsep.join(str(p) for p in [Path(server_jar), *extra])
        return os.pathsep.join(sorted(glob.glob(os.path.join(directory, "*.jar"))))
    raise ZooKeeperNotFoundError(
        f"no ZooKeeper server jar under {', '.join(jar_dirs)} "
        f"(apt-get install zookeeper, or set {CLASSPATH_ENV})")


def _server_jar(directory: str) -> str | None:
    plain = os.path.join(directory, "zookeeper.jar")
    if os.path.exists(plain):
        return plain
    versioned = [
        path for path in sorted(glob.glob(os.path.join(directory, "zookeeper-3*.jar")))
        if not any(tag in os.path.basename(path) for tag in ("-it", "-contrib", "-recipes", "-jute", "-tests"))
    ]
    return versioned[-1] if versioned else None


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotFoundError("no `java` on PATH (apt-get install default-jre-headless)")
    return java


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (racy by nature: callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ZooKeeperConfig:
    """What goes into ``zoo.cfg``.  Sessions are clamped to
    [``min_session_timeout_ms`` (default 2 ticks), ``max_session_timeout_ms``]."""

    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    tick_time_ms: int = DEFAULT_TICK_TIME_MS
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    min_session_timeout_ms: int | None = None

    def render(self) -> str:
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={Path(self.data_dir, 'data')}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "forceSync=no",  # test/dev server: no fsync per transaction
            "preAllocSize=4096",
        ]
        if self.min_session_timeout_ms is not None:
            lines.append(f"minSessionTimeout={self.min_session_timeout_ms}")
        return "\n".join(lines) + "\n"

    def write(self) -> Path:
        """Write ``<data_dir>/zoo.cfg`` (creating the directories); returns its path."""
        Path(self.data_dir, "data").mkdir(parents=True, exist_ok=True)
        path = Path(self.data_dir, "zoo.cfg")
        path.write_text(self.render())
        return path


def build_command(config_path: Path, classpath: str, java: str) -> list[str]:
    """The server command line, wrapped in ``setpriv --pdeathsig KILL`` when available."""
    command = [java, *JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(config_path)]
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", *command] if setpriv else command


# -- four-letter words ------------------------------------------------------------


def four_letter_word(host: str, port: int, word: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """Send a 4-letter command and return the reply ("" if none arrived in time)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


async def four_letter_word_async(host: str, port: int, word: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """Trio version of :func:`four_letter_word`."""
    chunks: list[bytes] = []
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return ""
        async with stream:
            try:
                await stream.send_all(word.encode("ascii"))
                while chunk := await stream.receive_some(4096):
                    chunks.append(chunk)
            except (OSError, trio.BrokenResourceError):
                pass
    return b"".join(chunks).decode("utf-8", "replace")


def _serving(reply: str) -> bool:
    return "Mode:" in reply


# -- the process ------------------------------------------------------------------

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
        pick_port = self.port == 0
        for attempt in range(PORT_ATTEMPTS if pick_port else 1):
            if pick_port:
                self.port = free_port(self.host)
            self.spawn()
            try:
                self._wait_ready_blocking()
                return
            except ZooKeeperStartError:
                self.stop()
                if not pick_port or attempt == PORT_ATTEMPTS - 1:
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
    pick_port = port == 0
    try:
        for attempt in range(PORT_ATTEMPTS if pick_port else 1):
            if pick_port:
                server.port = free_port(host)
            server.spawn()  # on the Trio thread on purpose: see the module docstring
            try:
                await server.wait_ready()
                break
            except ZooKeeperStartError:
                server.stop()
                if not pick_port or attempt == PORT_ATTEMPTS - 1:
                    raise
        assert server.pid is not None and server.startup_s is not None
        task_status.started(ZooKeeperEndpoint(host, server.port, server.pid, server.data_dir,
                                              server.log_path, server.startup_s))
        returncode = await server.wait_exit()
        raise server._start_failed(f"died while running (exit code {returncode})")
    finally:
        server.stop()
