"""``trikafka consume --group`` and ``trikafka groups`` as real processes against a
real ZooKeeper and a real ``trikafka serve``: payloads on stdout, commits on
SIGTERM and SIGINT, a restarted member resumes after the last message, two
members split the partitions, and ``groups`` shows members, owners, offsets,
log ends and lag."""

from __future__ import annotations

import signal
import subprocess

import pytest
import trio

from tests.helpers.broker_testing import PROCESS_TIMEOUT_S, READY_MARKER, child_env, child_process, trikafka_command
from trikafka.client import connect, latest_offset
from trikafka.wire import ErrorCode, build_message_set
from trikafka.zk import KazooZooKeeperClient
from trikafka.cli.serve import read_ready_file

TOPIC = "clicks"
PARTITIONS = 2


async def produce(port: int, partition: int, payloads: list[bytes]) -> None:
    async with await connect("127.0.0.1", port) as conn:
        [result] = await conn.produce_acked([(TOPIC, partition, build_message_set(payloads, magic=1))],
                                            acks=-1, timeout_ms=5000)
        assert result.error == ErrorCode.NO_ERROR, result


async def wait_for_registration(zk_chroot: str) -> None:
    async with KazooZooKeeperClient(zk_chroot) as zk:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            async for children in zk.watch_children(f"/brokers/topics/{TOPIC}"):
                if children:
                    return


async def run_cli(*args: str) -> subprocess.CompletedProcess:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        return await trio.run_process(trikafka_command(*args), capture_stdout=True, capture_stderr=True,
                                      check=False, env=child_env())


def consume_args(zk_chroot: str, *extra: str) -> list[str]:
    return ["consume", TOPIC, "--group", "pipeline", "--zookeeper", zk_chroot, "--commit-interval-ms", "200",
            *extra]


@pytest.mark.zookeeper
async def test_group_consume_commits_on_signals_resumes_and_groups_shows_the_lag(zk_chroot, tmp_path):
    serve = ["serve", "--zookeeper", zk_chroot, "--broker-id", "3", "--port", "0", "--num-partitions",
             str(PARTITIONS), "--log-dir", str(tmp_path / "logs"), "--ready-file", str(tmp_path / "port")]
    async with child_process(*serve) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = read_ready_file(str(tmp_path / "port"))[0]
        first = {p: [f"first-{p}-{i}".encode() for i in range(5)] for p in range(PARTITIONS)}
        for partition, payloads in first.items():
            await produce(port, partition, payloads)
        await wait_for_registration(zk_chroot)

        # A member prints every payload, then commits and leaves on SIGTERM.
        async with child_process(*consume_args(zk_chroot), stdout=subprocess.PIPE) as member:
            lines = await member.wait_for_lines(10)
            assert sorted(lines) == sorted(p for payloads in first.values() for p in payloads)
            for payloads in first.values():  # order kept within each partition
                assert [line for line in lines if line in payloads] == payloads
            member.signal(signal.SIGTERM)
            assert await member.wait() == 0
            assert b"SIGTERM: committing and leaving the group" in member.stderr

        async with KazooZooKeeperClient(zk_chroot) as zk:
            assert await zk.children("/consumers/pipeline/ids") == []
            assert await zk.children("/consumers/pipeline/owners/clicks") == []
            async with await connect("127.0.0.1", port) as conn:
                for partition in range(PARTITIONS):
                    committed, _stat = await zk.get(f"/consumers/pipeline/offsets/clicks/3-{partition}")
                    assert int(committed) == await latest_offset(conn, TOPIC, partition)

        # More messages; a new member resumes exactly after the committed ones.  SIGINT works too.
        second = [f"second-{i}".encode() for i in range(3)]
        await produce(port, 1, second)
        async with child_process(*consume_args(zk_chroot), stdout=subprocess.PIPE) as member:
            assert await member.wait_for_lines(3) == second
            # Nothing else may arrive: a marker produced now to every partition must be the very next
            # line from each, since a partition is delivered in order and a re-delivered message of it
            # would come before its marker.
            markers = [f"marker-{p}".encode() for p in range(PARTITIONS)]
            for partition, marker in enumerate(markers):
                await produce(port, partition, [marker])
            assert sorted((await member.wait_for_lines(3 + PARTITIONS))[3:]) == markers
            member.signal(signal.SIGINT)
            assert await member.wait() == 0

        listing = await run_cli("groups", "--zookeeper", zk_chroot)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.decode().splitlines() == ["group\tmembers", "pipeline\t0"]

        shown = await run_cli("groups", "pipeline", "--zookeeper", zk_chroot)
        assert shown.returncode == 0, shown.stderr
        rows = [line.split("\t") for line in shown.stdout.decode().splitlines()]
        assert rows[0] == ["group pipeline: 0 members"]
        header = rows.index(["topic", "partition", "owner", "committed", "log_end", "lag_bytes"])
        partitions = rows[header + 1:]
        assert [row[:3] for row in partitions] == [[TOPIC, "3-0", "-"], [TOPIC, "3-1", "-"]]
        for row in partitions:
            assert row[3] == row[4] and row[5] == "0"  # all consumed: committed == log end


@pytest.mark.zookeeper
async def test_two_group_members_split_the_partitions_and_groups_shows_owners(zk_chroot, tmp_path):
    serve = ["serve", "--zookeeper", zk_chroot, "--broker-id", "0", "--port", "0", "--num-partitions", "4",
             "--log-dir", str(tmp_path / "logs"), "--ready-file", str(tmp_path / "port")]
    async with child_process(*serve) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = read_ready_file(str(tmp_path / "port"))[0]
        sent = {p: [f"p{p}-{i}".encode() for i in range(4)] for p in range(4)}
        for partition, payloads in sent.items():
            await produce(port, partition, payloads)
        await wait_for_registration(zk_chroot)
        args = consume_args(zk_chroot)
        async with child_process(*args, "--consumer-id", "a", stdout=subprocess.PIPE) as a, \
                child_process(*args, "--consumer-id", "b", stdout=subprocess.PIPE) as b:
            with trio.fail_after(PROCESS_TIMEOUT_S):
                while bytes(a.stdout).count(b"\n") + bytes(b.stdout).count(b"\n") < 16:
                    await trio.sleep(0.05)
                shown = await run_cli("groups", "pipeline", "--zookeeper", zk_chroot)
                while "pipeline_a-0" not in shown.stdout.decode() or "pipeline_b-0" not in shown.stdout.decode():
                    await trio.sleep(0.2)  # the first rebalance may still be settling
                    shown = await run_cli("groups", "pipeline", "--zookeeper", zk_chroot)
            got_a = set(bytes(a.stdout).split())
            got_b = set(bytes(b.stdout).split())
            assert got_a | got_b == {p for payloads in sent.values() for p in payloads}
            assert shown.returncode == 0, shown.stderr
            text = shown.stdout.decode()
            assert "group pipeline: 2 members" in text
            assert 'pipeline_a\t{ "clicks": 1 }' in text and 'pipeline_b\t{ "clicks": 1 }' in text
            owners = [line.split("\t")[2] for line in text.splitlines() if line.startswith(f"{TOPIC}\t")]
            # assign(): threads sorted, 4 partitions over 2 threads: two each, a first.
            assert owners == ["pipeline_a-0", "pipeline_a-0", "pipeline_b-0", "pipeline_b-0"]
            a.signal(signal.SIGTERM)
            b.signal(signal.SIGTERM)
            assert await a.wait() == 0 and await b.wait() == 0


@pytest.mark.zookeeper
async def test_groups_of_a_group_that_does_not_exist_is_an_error_as_with_kafka(zk_chroot):
    """``groups G`` of a G nobody used: the one line ``groups G --kafka`` prints too, and status 1."""
    done = await run_cli("groups", "nosuchgroup", "--zookeeper", zk_chroot)
    assert (done.returncode, done.stdout, done.stderr) == (1, b"", b"trikafka: no group 'nosuchgroup'\n")
