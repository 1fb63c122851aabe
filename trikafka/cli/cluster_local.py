"""``trikafka cluster up|down``: a ZooKeeper and N brokers on this machine, as detached processes.

``up`` starts them under one directory (``cluster.json`` there records what runs: the
ZooKeeper's and each broker's PID and addresses, its 0.7 port and its Kafka-protocol port)
and returns once every broker serves;
``down`` stops exactly those processes, by PID, brokers first (SIGTERM: a clean stop),
then ZooKeeper.  Unlike a broker's private ZooKeeper, this one outlives any broker, so
brokers can be killed and restarted against it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .serve import read_ready_file

STATE_FILE = "cluster.json"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1
KAFKA_PORT_DISTANCE = 100  # default Kafka-protocol ports: the 0.7 ports + 100 (9192, 9193, ...)


class LocalClusterError(Exception):
    """Why ``cluster up`` or ``down`` could not do its work (one line)."""


@dataclass(frozen=True)
class ClusterProcess:
    """One process of the cluster: what it is, its PID and where it listens."""

    name: str  # "zookeeper" or "broker-<id>"
    pid: int
    host: str
    port: int
    kafka_port: int = 0  # a broker's Kafka-protocol listener (docs/protocol.md §16.1); 0 for ZooKeeper


@dataclass(frozen=True)
class LocalCluster:
    """A ZooKeeper and brokers started by ``cluster up`` in ``directory``."""

    directory: Path
    zookeeper: ClusterProcess
    brokers: tuple[ClusterProcess, ...]

    @property
    def zookeeper_connect(self) -> str:
        return f"{self.zookeeper.host}:{self.zookeeper.port}"

    @property
    def broker_list(self) -> str:
        return ",".join(f"{m.name.removeprefix('broker-')}:{m.host}:{m.port}" for m in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """The brokers' Kafka-protocol listeners, as Kafka clients' ``bootstrap.servers``."""
        return ",".join(f"{m.host}:{m.kafka_port}" for m in self.brokers)

    def save(self) -> None:
        state = {"version": 1, "zookeeper": asdict(self.zookeeper), "brokers": [asdict(m) for m in self.brokers]}
        tmp = self.directory / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(tmp, self.directory / STATE_FILE)

    @classmethod
    def load(cls, directory: Path) -> "LocalCluster | None":
        try:
            state = json.loads((directory / STATE_FILE).read_text())
            return cls(directory, ClusterProcess(**state["zookeeper"]),
                       tuple(ClusterProcess(**m) for m in state["brokers"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise LocalClusterError(f"{directory / STATE_FILE} is not a cluster state file: {exc}") from None


def start(directory: Path, *, brokers: int, zookeeper_port: int, first_port: int, first_kafka_port: int,
          extra: list[str]) -> LocalCluster:
    """Start ZooKeeper, then brokers 0..brokers-1 (ports ``first_port + id`` and Kafka-protocol ports
    ``first_kafka_port + id``, or free ports for 0).

    Over a cluster recorded in ``directory``, start again only its members that stopped, on
    their ports and data (a killed broker comes back); LocalClusterError if all of them run.
    """
    existing = LocalCluster.load(directory)
    if existing is not None:
        if all(_alive(m) for m in (existing.zookeeper, *existing.brokers)):
            raise LocalClusterError(f"the cluster in {directory} still runs: `trikafka cluster down --dir "
                                    f"{directory}` first")
        zookeeper = existing.zookeeper if _alive(existing.zookeeper) else \
            _start_zookeeper(directory, existing.zookeeper.port)
        ports = [(m.port, m.kafka_port) for m in existing.brokers]
        running = {i: m for i, m in enumerate(existing.brokers) if _alive(m)}
    else:
        directory.mkdir(parents=True, exist_ok=True)
        zookeeper = _start_zookeeper(directory, zookeeper_port)
        ports = [(first_port + i if first_port else 0, first_kafka_port + i if first_kafka_port else 0)
                 for i in range(brokers)]
        running = {}
    members = [running.get(i, ClusterProcess(f"broker-{i}", 0, "127.0.0.1", port, kafka_port))
               for i, (port, kafka_port) in enumerate(ports)]
    LocalCluster(directory, zookeeper, tuple(members)).save()  # from here on `down` can stop what started
    for broker_id, member in enumerate(members):
        if broker_id not in running:
            members[broker_id] = _start_broker(directory, LocalCluster(directory, zookeeper, tuple(members)),
                                               broker_id, member, extra)
    cluster = LocalCluster(directory, zookeeper, tuple(members))
    cluster.save()
    return cluster


def _start_zookeeper(directory: Path, port: int) -> ClusterProcess:
    """ZooKeeper on ``port``, or on a free port for 0: a port ``free_port`` picks is free only when
    picked, so a server that exits at start (or does not serve) is stopped and started again on
    another pick, ``PORT_ATTEMPTS`` times in all."""
    from trikafka.zk import server_setup
    from trikafka.zk.server_setup import ZooKeeperConfig, build_command, find_classpath, find_java, port_choices

    if port and not server_setup.port_is_free(port):
        raise LocalClusterError(_port_taken(port))
    zk_dir = directory / "zookeeper"
    log_path = zk_dir / "zookeeper.log"
    for chosen, last in port_choices(port):
        config = ZooKeeperConfig(zk_dir, chosen)
        command = build_command(config.write(), find_classpath(), find_java(), die_with_parent=False)
        process = _spawn(command, log_path, zk_dir)
        member = ClusterProcess("zookeeper", process.pid, "127.0.0.1", chosen)
        try:
            _wait_zookeeper(member, process, log_path, config.data_dir)
            return member
        except LocalClusterError:
            if process.poll() is None:
                process.kill()
            if last:
                raise
    raise AssertionError("unreachable")


def _start_broker(directory: Path, cluster: LocalCluster, broker_id: int, planned: ClusterProcess,
                  extra: list[str]) -> ClusterProcess:
    """Broker ``broker_id`` on ``planned``'s ports (0: a free one), recorded in the state file while it
    starts.  Both ports are given, so a broker never takes the fixed Kafka port 9093 that a broker on
    9092 would default to (§16.1) while another broker of the cluster listens there."""
    name = f"broker-{broker_id}"
    ready_file = directory / f"{name}.port"
    ready_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "trikafka", "serve", "--zookeeper", cluster.zookeeper_connect,
               "--broker-id", str(broker_id), "--port", str(planned.port), "--kafka-port", str(planned.kafka_port),
               "--log-dir", str(directory / name),
               "--ready-file", str(ready_file), *extra]
    process = _spawn(command, directory / f"{name}.log", directory)
    starting = ClusterProcess(name, process.pid, "127.0.0.1", planned.port, planned.kafka_port)
    members = list(cluster.brokers)
    members[broker_id] = starting
    LocalCluster(directory, cluster.zookeeper, tuple(members)).save()
    port, kafka_port = _wait_ready_file(ready_file, starting, process, directory / f"{name}.log")
    return ClusterProcess(name, starting.pid, "127.0.0.1", port, kafka_port)


def stop(directory: Path) -> tuple[ClusterProcess, ...]:
    """Stop what ``start`` recorded in ``directory``: brokers (SIGTERM, then SIGKILL after
    ``STOP_TIMEOUT_S``), then ZooKeeper; removes the state file.  Returns the members that were
    running (the others had already stopped)."""
    cluster = LocalCluster.load(directory)
    if cluster is None:
        raise LocalClusterError(f"no cluster was started in {directory} (no {STATE_FILE})")
    stopped: list[ClusterProcess] = []
    for group in (cluster.brokers, (cluster.zookeeper,)):
        for member in group:
            if _alive(member):
                os.kill(member.pid, signal.SIGTERM)
                stopped.append(member)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for member in group:
            while _alive(member) and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL_S)
            if _alive(member):
                os.kill(member.pid, signal.SIGKILL)
    (directory / STATE_FILE).unlink()
    return tuple(stopped)


def _stopped_summary(directory: Path, stopped: tuple[ClusterProcess, ...]) -> str:
    """``down``'s line: what it stopped, never what the state file merely recorded."""
    brokers = sum(1 for m in stopped if m.name != "zookeeper")
    parts = [f"{brokers} broker{'' if brokers == 1 else 's'}"] if brokers else []
    parts += [f"ZooKeeper {m.host}:{m.port}" for m in stopped if m.name == "zookeeper"]
    return f"stopped {' and '.join(parts)}" if parts else f"nothing ran of the cluster in {directory}"


def _spawn(command: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """A detached process (its own session: Ctrl-C in the shell does not reach it), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd, start_new_session=True)


def _alive(member: ClusterProcess) -> bool:
    """Whether ``member``'s PID still runs the process started (not a reused PID, not a zombie),
    for a process some earlier command started.  Not for one this command is starting: while it
    executes its program, its command line reads empty for a moment, so it would look gone;
    ``_exit_status`` asks the child itself."""
    try:
        with open(f"/proc/{member.pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{member.pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    marker = b"ZooKeeperServerMain" if member.name == "zookeeper" else b"trikafka"
    return state != "Z" and marker in cmdline


def _exit_status(process: subprocess.Popen[bytes]) -> str | None:
    """How a child this command started ended (``None`` while it runs), for the one-line error."""
    status = process.poll()
    if status is None:
        return None
    if status >= 0:
        return f"status {status}"
    try:
        return f"signal {signal.Signals(-status).name}"
    except ValueError:
        return f"signal {-status}"


def _port_taken(port: int) -> str:
    return (f"port {port} for ZooKeeper is taken (another ZooKeeper?): give --zookeeper-port PORT "
            f"(0: a free port)")


def _wait_zookeeper(member: ClusterProcess, process: subprocess.Popen[bytes], log_path: Path, data_dir: Path) -> None:
    """Until the ZooKeeper ``process`` serves on ``member``'s port.  A server answering there is
    taken for it only while ``process`` runs and the server's data directory is ``data_dir``: a
    stranger that holds the port answers at once, while ours dies of a BindException."""
    from trikafka.zk.server_setup import _serving, four_letter_word, served_data_dir

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if (status := _exit_status(process)) is not None:
            raise LocalClusterError(f"ZooKeeper exited at start ({status}): {_log_summary(log_path)} "
                                    f"(see {log_path})")
        if _serving(four_letter_word(member.host, member.port, "srvr")):
            served = served_data_dir(member.host, member.port)
            if served is not None and served.resolve() != data_dir.resolve():
                raise LocalClusterError(_port_taken(member.port))
            if served is not None and _exit_status(process) is None:
                return
        time.sleep(POLL_INTERVAL_S)
    raise LocalClusterError(f"ZooKeeper did not serve on {member.host}:{member.port} within {READY_TIMEOUT_S:.0f} s; "
                            f"see {log_path}")


def _wait_ready_file(path: Path, member: ClusterProcess, process: subprocess.Popen[bytes],
                     log_path: Path) -> tuple[int, int]:
    """(port, Kafka port) once the broker wrote its ready file."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            port, kafka_port = read_ready_file(str(path))
            if kafka_port is not None:
                return port, kafka_port
        except (FileNotFoundError, ValueError):
            pass
        if (status := _exit_status(process)) is not None:
            raise LocalClusterError(f"{member.name} exited at start ({status}): {_log_summary(log_path)} "
                                    f"(see {log_path})")
        time.sleep(POLL_INTERVAL_S)
    raise LocalClusterError(f"{member.name} did not serve within {READY_TIMEOUT_S:.0f} s; see {log_path}")


def _log_summary(log_path: Path) -> str:
    """Why a process that exited at start did: its log's last error line, else its last line.  The
    error message carries it because a caller (a benchmark) may remove the directory right away."""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    errors = [line for line in lines if "ERROR" in line or "Exception" in line or "Error:" in line]
    return (errors or lines or ["(no output)"])[-1].strip()


def add_arguments(cluster: argparse.ArgumentParser) -> None:
    """The options of ``cluster up|down`` on the ``cluster`` parser."""
    cluster.add_argument("--dir", default="trikafka-cluster", metavar="DIR",
                         help="with up/down: the cluster's directory (data, logs, cluster.json; default "
                              "./trikafka-cluster)")
    cluster.add_argument("--brokers", type=int, default=3, metavar="N", help="with up: how many brokers (default 3)")
    cluster.add_argument("--first-port", type=int, default=9092, metavar="PORT",
                         help="with up: broker I listens on PORT+I (default 9092; 0: free ports)")
    cluster.add_argument("--first-kafka-port", type=int, default=None, metavar="PORT",
                         help="with up: broker I serves the Kafka protocol on PORT+I (default: the first port "
                              "+ 100, so 9192; 0: free ports)")
    cluster.add_argument("--zookeeper-port", type=int, default=2181, metavar="PORT",
                         help="with up: ZooKeeper's port (default 2181; 0: a free port)")
    cluster.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="with up: a broker setting for every broker (as `serve --set`)")


def cmd_up_down(args: argparse.Namespace) -> int:
    directory = Path(args.dir).absolute()
    try:
        if args.action == "up":
            if args.brokers < 1:
                raise LocalClusterError("--brokers must be >= 1")
            extra = [item for setting in args.set for item in ("--set", setting)]
            first_kafka_port = args.first_kafka_port
            if first_kafka_port is None:
                first_kafka_port = args.first_port + KAFKA_PORT_DISTANCE if args.first_port else 0
            cluster = start(directory, brokers=args.brokers, zookeeper_port=args.zookeeper_port,
                            first_port=args.first_port, first_kafka_port=first_kafka_port, extra=extra)
            print(f"trikafka: cluster up in {directory}: ZooKeeper {cluster.zookeeper_connect}, brokers "
                  f"{cluster.broker_list}, Kafka protocol bootstrap {cluster.kafka_bootstrap}; stop it with "
                  f"`trikafka cluster down --dir {args.dir}`")
            return 0
        print(f"trikafka: cluster down: {_stopped_summary(directory, stop(directory))}")
        return 0
    except LocalClusterError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1
