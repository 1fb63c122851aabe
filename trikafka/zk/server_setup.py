"""Setting up a ZooKeeper server process: finding Java and the jars, its config file, its command line,
and the four-letter-word probes that tell when it serves."""

from __future__ import annotations

import glob
import os
import random
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

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


# Below the kernel's ephemeral range, from here up: ports no connection is given as its source port.
_FIXED_PORTS_FROM = 10_000
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def port_choices(port: int, host: str = "127.0.0.1") -> Iterator[tuple[int, bool]]:
    """The ports to start a server on, each with whether it is the last try: ``port`` once, or for
    0 a port ``free_port`` picks, up to ``PORT_ATTEMPTS`` times.  A picked port is free only when
    picked, so a server that cannot start on it is stopped and started again on another pick."""
    attempts = PORT_ATTEMPTS if port == 0 else 1
    for attempt in range(attempts):
        yield port or free_port(host), attempt == attempts - 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (racy by nature: callers retry).

    Chosen below the kernel's ephemeral range where that range is known, so
    that a process stopped and started again on the port (a broker or a
    ZooKeeper in a fault test) does not find it taken meanwhile as the source
    port of some outgoing connection, which a port from ``bind(0)`` may be.
    """
    below = _ephemeral_low()
    pick = random.SystemRandom()  # independent of any seeded ``random`` state
    for _attempt in range(64 if below > _FIXED_PORTS_FROM else 0):
        port = pick.randrange(_FIXED_PORTS_FROM, below)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``port`` now (as the JVM binds: connections of a previous run in
    TIME_WAIT don't count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (0 where unknown: not Linux)."""
    try:
        return int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


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


def build_command(config_path: Path, classpath: str, java: str, *, die_with_parent: bool = True) -> list[str]:
    """The server command line; ``die_with_parent`` wraps it in ``setpriv --pdeathsig KILL`` when
    available (a detached server, such as ``trikafka cluster up``'s, outlives its launcher)."""
    command = [java, *JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(config_path)]
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") and die_with_parent else None
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


def served_data_dir(host: str, port: int) -> Path | None:
    """The data directory of the ZooKeeper answering on ``port`` (its ``conf``: ``dataDir`` is
    ``<ZooKeeperConfig.data_dir>/data/version-2``), so a caller tells its own server from another
    on the same port; None when no server answers ``conf``."""
    for line in four_letter_word(host, port, "conf").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "dataDir":
            return Path(value.strip()).parent.parent
    return None


# -- the process ------------------------------------------------------------------
