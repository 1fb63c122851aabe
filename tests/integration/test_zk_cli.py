"""``trikafka serve`` and ZooKeeper, as real processes: a private ZooKeeper by
default, ``--zookeeper`` to join an ensemble, a duplicate broker id refused,
and a clear message when no private ZooKeeper can start."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import trio

from tests.helpers.broker_testing import (
    PROCESS_TIMEOUT_S,
    READY_MARKER,
    child_env,
    child_process,
    produce_acked,
    trikafka_command,
)
from tests.helpers.registry import wait_for_value
from trikafka.zk import KazooZooKeeperClient, parse_broker_registration
from trikafka.zk.server_setup import free_port
from trikafka.cli.serve import read_ready_file

PRIVATE_LINE = re.compile(rb"registered in private ZooKeeper (127\.0\.0\.1:\d+) \(pid (\d+), data ([^)]+)\)")


async def read_port(ready_file: Path) -> int:
    return read_ready_file(str(ready_file))[0]


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer exists (a zombie would still count as present)."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.zookeeper
async def test_two_brokers_join_one_ensemble_and_a_duplicate_id_is_refused(zk_chroot, tmp_path,
                                                                           no_kazoo_thread_leaks):
    def serve_args(broker_id: int) -> list[str]:
        return ["serve", "--zookeeper", zk_chroot, "--broker-id", str(broker_id), "--port", "0",
                "--log-dir", str(tmp_path / f"logs-{broker_id}"), "--ready-file", str(tmp_path / f"port-{broker_id}")]

    async with child_process(*serve_args(1)) as first, child_process(*serve_args(2)) as second:
        await first.wait_for_stderr(READY_MARKER)
        await second.wait_for_stderr(READY_MARKER)
        ports = {1: await read_port(tmp_path / "port-1"), 2: await read_port(tmp_path / "port-2")}
        async with KazooZooKeeperClient(zk_chroot) as observer:
            assert await observer.children("/brokers/ids") == ["1", "2"]
            for broker_id, port in ports.items():
                info = parse_broker_registration((await observer.get(f"/brokers/ids/{broker_id}"))[0])
                assert (info.host, info.port) == ("127.0.0.1", port)
                assert info.creator_id.startswith("127.0.0.1-")
            await produce_acked(ports[2], "shared", 0, b"to broker 2")
            assert (await wait_for_value(observer, "/brokers/topics/shared/2"))[0] == b"1"

            with trio.fail_after(PROCESS_TIMEOUT_S):
                duplicate = await trio.run_process(
                    trikafka_command(*serve_args(1)[:-2], "--log-dir", str(tmp_path / "logs-dup")),
                    capture_stderr=True, check=False, env=child_env())
            assert duplicate.returncode != 0
            assert b"trikafka: broker id 1 is in use" in duplicate.stderr
            assert b"Traceback" not in duplicate.stderr
            assert await observer.children("/brokers/ids") == ["1", "2"]  # the live broker 1 kept its id

            # `topics create` with --zookeeper alone creates the topic on every registered broker.
            with trio.fail_after(PROCESS_TIMEOUT_S):
                created = await trio.run_process(
                    trikafka_command("topics", "create", "views", "--partitions", "2", "--zookeeper", zk_chroot),
                    capture_stdout=True, capture_stderr=True, check=False, env=child_env())
            assert created.returncode == 0, created.stderr
            for broker_id in (1, 2):
                assert (await wait_for_value(observer, f"/brokers/topics/views/{broker_id}"))[0] == b"2"
            assert not await observer.exists("/trikafka/config/topics/views")  # no settings, no settings znode

            ids = observer.watch_children("/brokers/ids")
            assert await ids.__anext__() == ["1", "2"]
            first.signal(signal.SIGTERM)
            assert await first.wait() == 0
            with trio.fail_after(PROCESS_TIMEOUT_S):
                assert await ids.__anext__() == ["2"]
            second.signal(signal.SIGTERM)
            assert await second.wait() == 0
            with trio.fail_after(PROCESS_TIMEOUT_S):
                assert await ids.__anext__() == []


@pytest.mark.zookeeper
async def test_plain_serve_runs_its_own_zookeeper_and_stops_it(tmp_path, no_kazoo_thread_leaks):
    log_dir, ready_file = tmp_path / "logs", tmp_path / "port"
    async with child_process("serve", "--port", "0", "--log-dir", str(log_dir), "--zookeeper-port", "0",
                             "--ready-file", str(ready_file)) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = await read_port(ready_file)
        match = PRIVATE_LINE.search(bytes(broker.stderr))
        assert match, broker.stderr.decode(errors="replace")
        zk_connect, zk_pid, zk_data = match.group(1).decode(), int(match.group(2)), Path(match.group(3).decode())
        assert zk_data == tmp_path / "logs-zookeeper" and (zk_data / "zoo.cfg").exists()
        assert not process_gone(zk_pid)
        async with KazooZooKeeperClient(zk_connect) as observer:
            info = parse_broker_registration((await observer.get("/brokers/ids/0"))[0])
            assert (info.host, info.port) == ("127.0.0.1", port)
            await produce_acked(port, "clicks", 0, b"one")
            assert (await wait_for_value(observer, "/brokers/topics/clicks/0"))[0] == b"1"
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    with trio.fail_after(5):
        while not process_gone(zk_pid):  # reaped by the broker before it exited
            await trio.sleep(0.05)


async def test_serve_without_java_says_what_to_do_instead(tmp_path):
    env = child_env()
    env["PATH"] = str(tmp_path)  # no java, no setpriv
    with trio.fail_after(PROCESS_TIMEOUT_S):
        result = await trio.run_process(
            trikafka_command("serve", "--port", "0", "--log-dir", str(tmp_path / "logs"), "--zookeeper-port", "0"),
            capture_stderr=True, check=False, env=env)
    assert result.returncode == 1
    assert b"cannot start the private ZooKeeper" in result.stderr
    assert b"--standalone" in result.stderr and b"--zookeeper" in result.stderr
    assert b"Traceback" not in result.stderr


def test_standalone_and_zookeeper_flags_exclude_each_other(tmp_path, capsys):
    from trikafka.cli import main

    assert main(["serve", "--standalone", "--zookeeper", "127.0.0.1:2181", "--log-dir", str(tmp_path)]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(["serve", "--zookeeper", "127.0.0.1:notaport", "--log-dir", str(tmp_path)]) == 2
    assert "zk.connect" in capsys.readouterr().err


@pytest.mark.zookeeper
async def test_a_killed_broker_restarts_on_its_private_zookeeper(tmp_path, no_kazoo_thread_leaks):
    """SIGKILL takes the private server down too (parent-death signal); on the
    next start the server reloads the dead broker's session, and the broker
    waits for it to expire instead of calling its own id a duplicate."""
    args = ("serve", "--port", "0", "--log-dir", str(tmp_path / "logs"), "--ready-file", str(tmp_path / "port"),
            "--set", "zk.sessiontimeout.ms=1000", "--zookeeper-port", "0")
    async with child_process(*args) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        first_zk_pid = int(PRIVATE_LINE.search(bytes(broker.stderr)).group(2))
        broker.process.kill()
        await broker.wait()
    with trio.fail_after(10):
        while not process_gone(first_zk_pid):
            await trio.sleep(0.05)
    async with child_process(*args) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = await read_port(tmp_path / "port")
        zk_connect = PRIVATE_LINE.search(bytes(broker.stderr)).group(1).decode()
        async with KazooZooKeeperClient(zk_connect) as observer:
            info = parse_broker_registration((await observer.get("/brokers/ids/0"))[0])
            assert info.port == port
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


@pytest.mark.zookeeper
async def test_a_broker_restarted_after_sigkill_comes_back_by_itself(zk_chroot, tmp_path, no_kazoo_thread_leaks):
    """Its previous session still holds /brokers/ids/1 with the same host and port:
    the new run waits for that session to expire, then registers (no person needed)."""
    port = free_port()  # a fixed port: the registration names it
    args = ["serve", "--zookeeper", zk_chroot, "--broker-id", "1", "--port", str(port), "--host", "127.0.0.1",
            "--log-dir", str(tmp_path / "logs"), "--set", "zk.sessiontimeout.ms=4000"]
    async with KazooZooKeeperClient(zk_chroot) as observer:
        async with child_process(*args) as first:
            await first.wait_for_stderr(READY_MARKER)
            _data, old = await wait_for_value(observer, "/brokers/ids/1")
            first.signal(signal.SIGKILL)
            assert await first.wait() == -signal.SIGKILL
        async with child_process(*args) as second:
            await second.wait_for_stderr(b"still registered by this broker's previous session")
            await second.wait_for_stderr(READY_MARKER)
            data, new = await wait_for_value(observer, "/brokers/ids/1",
                                             lambda v: v is not None and v[1].ephemeral_owner != old.ephemeral_owner)
            assert parse_broker_registration(data).port == port
            assert second.process.returncode is None  # serving, not exited with "broker id 1 is in use"
            second.signal(signal.SIGTERM)
            assert await second.wait() == 0
