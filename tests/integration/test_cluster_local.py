"""``trikafka cluster up|down``: a real ZooKeeper and three real brokers on this machine, detached,
that serve a replicated topic, outlive the command that started them, and stop by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import pytest

from tests.helpers.broker_testing import child_process
from trikafka.zk import server_setup

pytestmark = pytest.mark.zookeeper


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has stopped (its new parent, PID 1, reaps it when it may)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def trikafka(*args: str, stdin: bytes | None = None, status: int | None = 0) -> str:
    """The command's stdout then stderr; ``status`` is the exit status it must have (None: any)."""
    async with child_process(*args, stdin=subprocess.PIPE if stdin is not None else None,
                             stdout=subprocess.PIPE) as child:
        if stdin is not None:
            await child.send_stdin(stdin)
        code = await child.wait()
        assert status is None or code == status, child.stderr.decode(errors="replace")
    return bytes(child.stdout).decode() + child.stderr.decode(errors="replace")


async def test_up_serves_a_replicated_topic_and_down_stops_every_process(tmp_path):
    where = ("--dir", str(tmp_path / "cluster"))
    try:
        out = await trikafka("cluster", "up", *where, "--first-port", "0", "--zookeeper-port", "0")
        saved = (tmp_path / "cluster" / "cluster.json").read_text()
        state = json.loads(saved)
        pids = [state["zookeeper"]["pid"], *(b["pid"] for b in state["brokers"])]
        assert all(running(pid) for pid in pids)  # they outlive `cluster up`
        zookeeper = f"127.0.0.1:{state['zookeeper']['port']}"
        broker = f"127.0.0.1:{state['brokers'][2]['port']}"
        assert f"ZooKeeper {zookeeper}, brokers 0:127.0.0.1:{state['brokers'][0]['port']}," in out

        again = await trikafka("cluster", "up", *where, "--first-port", "0", "--zookeeper-port", "0", status=1)
        assert "still runs" in again

        await trikafka("topics", "create", "orders", "--partitions", "2", "--replication-factor", "3",
                       "--zookeeper", zookeeper)
        await trikafka("produce", "orders", "--acks", "-1", "--broker", broker, stdin=b"a\nb\nc\n")
        consumed = await trikafka("consume", "orders", "-c", "3", "-f", "%s\\n", "--broker", broker)
        assert sorted(consumed.split("\n")[:3]) == ["a", "b", "c"]
        view = json.loads((await trikafka("cluster", "--json", "--zookeeper", zookeeper)).split("\n")[0])
        assert [b["id"] for b in view["brokers"]] == [0, 1, 2] and view["under_replicated"] == []

        # The Kafka-protocol listeners (§16.1): each broker's own port, all named by Metadata.
        bootstrap = ",".join(f"127.0.0.1:{b['kafka_port']}" for b in state["brokers"])
        assert f"Kafka protocol bootstrap {bootstrap};" in out
        await trikafka("topics", "create", "events", "--partitions", "2", "--replication-factor", "3",
                       "--kafka", bootstrap)
        await trikafka("produce", "events", "--kafka", bootstrap, stdin=b"x\ny\n")
        assert sorted((await trikafka("consume", "events", "-c", "2", "-f", "%s\\n", "--kafka",
                                      bootstrap)).split("\n")[:2]) == ["x", "y"]

        os.kill(pids[2], signal.SIGKILL)  # broker 1: `up` again brings it back on its port and data
        await trikafka("cluster", "up", *where)
        state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
        assert ([(b["port"], b["kafka_port"]) for b in state["brokers"]]
                == [(b["port"], b["kafka_port"]) for b in json.loads(saved)["brokers"]])
        assert state["brokers"][1]["pid"] != pids[2] and state["brokers"][0]["pid"] == pids[1]
        pids = [state["zookeeper"]["pid"], *(b["pid"] for b in state["brokers"])]
        consumed = await trikafka("consume", "orders", "-c", "3", "-f", "%s\\n", "--broker",
                                  f"127.0.0.1:{state['brokers'][1]['port']}")
        assert sorted(consumed.split("\n")[:3]) == ["a", "b", "c"]
    finally:
        down = await trikafka("cluster", "down", *where)
    assert "stopped 3 brokers and ZooKeeper" in down
    assert not any(running(pid) for pid in pids)
    assert not (tmp_path / "cluster" / "cluster.json").exists()
    assert "no cluster was started" in await trikafka("cluster", "down", *where, status=1)


def test_up_picks_another_zookeeper_port_when_the_picked_one_is_taken_meanwhile(tmp_path, monkeypatch):
    from trikafka.cli import cluster_local
    from trikafka.zk import server_setup

    with socket.socket() as taken:  # another process takes the picked port before ZooKeeper binds it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picks = iter([taken.getsockname()[1], server_setup.free_port()])
        monkeypatch.setattr(server_setup, "free_port", lambda host="127.0.0.1": next(picks))
        directory = tmp_path / "cluster"
        try:
            cluster = cluster_local.start(directory, brokers=0, zookeeper_port=0, first_port=0, first_kafka_port=0,
                                          extra=[])
            assert cluster.zookeeper.port != taken.getsockname()[1]
            assert server_setup._serving(server_setup.four_letter_word("127.0.0.1", cluster.zookeeper.port, "srvr"))
        finally:
            cluster_local.stop(directory)
    assert "Address already in use" in (directory / "zookeeper" / "zookeeper.log").read_text()


async def test_up_on_a_port_another_zookeeper_holds_is_one_line_naming_the_port(tmp_path, zookeeper_server):
    """A stranger ZooKeeper answers on the port: `up` never takes it for its own (whose JVM would
    die with a BindException while brokers registered in the stranger), and starts nothing."""
    port = str(zookeeper_server.port)
    where = ("--dir", str(tmp_path / "cluster"))
    try:
        out = await trikafka("cluster", "up", *where, "--brokers", "1", "--first-port", "0", "--zookeeper-port", port,
                             status=1)
    finally:
        down = await trikafka("cluster", "down", *where, status=None)
    assert out.count("\n") == 1 and out.startswith("trikafka: ") and f"port {port} " in out, out
    assert "no cluster was started" in down, down
    assert server_setup._serving(server_setup.four_letter_word("127.0.0.1", zookeeper_server.port, "srvr"))


def test_up_never_takes_a_stranger_answering_on_its_port_for_its_own_zookeeper(tmp_path, monkeypatch,
                                                                                zookeeper_server):
    """The port looked free when checked and a stranger took it before the JVM bound it: the
    ZooKeeper that answers is not the one `up` started (its data directory is another), and
    `up` says so instead of waiting on the stranger."""
    from trikafka.cli import cluster_local

    monkeypatch.setattr(server_setup, "port_is_free", lambda port, host="127.0.0.1": True)
    with pytest.raises(cluster_local.LocalClusterError, match=f"^port {zookeeper_server.port} "):
        cluster_local.start(tmp_path / "cluster", brokers=0, zookeeper_port=zookeeper_server.port, first_port=0,
                            first_kafka_port=0, extra=[])
    state = cluster_local.LocalCluster.load(tmp_path / "cluster")
    assert state is None or not cluster_local._alive(state.zookeeper)


async def test_down_reports_only_what_it_stopped(tmp_path):
    """A cluster whose processes all died (a ZooKeeper that never bound its port, brokers that failed):
    `down` stopped nothing and says so, and forgets the state file."""
    directory = tmp_path / "cluster"
    directory.mkdir()
    dead_pid = 2 ** 22 + 1  # above the largest pid_max Linux allows: never a live process
    (directory / "cluster.json").write_text(json.dumps({
        "version": 1, "zookeeper": {"name": "zookeeper", "pid": dead_pid, "host": "127.0.0.1", "port": 2181},
        "brokers": [{"name": f"broker-{i}", "pid": dead_pid, "host": "127.0.0.1", "port": 9092 + i,
                     "kafka_port": 9192 + i} for i in range(3)]}))
    down = await trikafka("cluster", "down", "--dir", str(directory))
    assert down == f"trikafka: cluster down: nothing ran of the cluster in {directory}\n", down
    assert not (directory / "cluster.json").exists()
