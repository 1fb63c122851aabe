"""The ``trikafka`` command end to end: ``serve``, ``produce``, ``consume``, ``topics``
as separate processes on loopback, the way the README tour uses them."""

from __future__ import annotations

import signal
import subprocess

import pytest
import trio

from tests.helpers.broker_testing import child_process, serve_process
from tests.helpers.cli import lines, produce

FAST_TIMER_FLUSH = ("--set", "log.default.flush.scheduler.interval.ms=100")


async def consume(port: int, topic: str, *flags: str) -> list[bytes]:
    """Run ``trikafka consume`` to completion (give --max-messages); return its stdout lines."""
    async with child_process("consume", topic, "--broker", f"127.0.0.1:{port}", *flags,
                             stdout=subprocess.PIPE) as consumer:
        assert await consumer.wait() == 0, consumer.stderr.decode()
    return bytes(consumer.stdout).splitlines()


async def topics(port: int, *args: str, exit_status: int = 0) -> list[list[str]]:
    async with child_process("topics", "--broker", f"127.0.0.1:{port}", *args,
                             stdout=subprocess.PIPE) as listing:
        assert await listing.wait() == exit_status, listing.stderr.decode()
    return [row.split("\t") for row in bytes(listing.stdout).decode().splitlines()]


async def test_produce_then_consume_round_trips_every_line(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        sent = [f"line {i} \u00e9\t{'x' * (i % 50)}" for i in range(500)] + ["", "last"]
        stderr = await produce(port, "tour", lines(*sent), "--acks", "-1", "--batch", "64")
        assert b"sent 502 messages" in stderr
        got = await consume(port, "tour", "--from", "earliest", "--max-messages", str(len(sent)))
        assert got == [s.encode() for s in sent]
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_consume_follows_new_messages_until_interrupted(tmp_path):
    async with serve_process(tmp_path / "data", *FAST_TIMER_FLUSH) as (broker, port):
        await produce(port, "live", lines("before"))  # default acks=1: the flush timer makes it visible
        async with child_process("consume", "live", "--broker", f"127.0.0.1:{port}",
                                 stdout=subprocess.PIPE) as consumer:
            assert await consumer.wait_for_lines(1) == [b"before"]
            await produce(port, "live", lines("after one", "after two"))
            assert await consumer.wait_for_lines(3) == [b"before", b"after one", b"after two"]
            consumer.signal(signal.SIGINT)
            assert await consumer.wait() == 0
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_partitions_and_start_positions(tmp_path):
    async with serve_process(tmp_path / "data", "--num-partitions", "3") as (broker, port):
        await produce(port, "p", lines("zero-a", "zero-b"), "--acks", "-1", "--partition", "0")
        await produce(port, "p", lines("two"), "--acks", "-1", "--partition", "2")
        assert await consume(port, "p", "--partition", "2", "--max-messages", "1") == [b"two"]
        # A magic-1 entry is 4 + 6 header bytes + the payload: "zero-a" takes 16, so 16 starts at "zero-b".
        assert await consume(port, "p", "-p", "0", "--from", "16", "--max-messages", "1") == [b"zero-b"]
        async with child_process("consume", "p", "--broker", f"127.0.0.1:{port}", "--from", "latest",
                                 stdout=subprocess.PIPE) as consumer:
            await consumer.wait_for_stderr(b"from offset 32")  # it has asked where the end is
            await produce(port, "p", lines("new"), "--acks", "-1", "--partition", "0")
            assert await consumer.wait_for_lines(1) == [b"new"]  # not zero-a, zero-b or two
            consumer.signal(signal.SIGINT)
            assert await consumer.wait() == 0

        # The partition count comes from the broker (METADATA); a topic it does not
        # have is reported and makes the exit status 1.
        rows = await topics(port, "p", "absent", exit_status=1)
        assert rows[0] == ["topic", "partition", "broker", "start", "visible_end", "bytes"]
        assert {r[2] for r in rows[1:]} == {f"127.0.0.1:{port}"}
        sizes = {(r[0], r[1]): (int(r[3]), int(r[4]), int(r[5])) for r in rows[1:]}
        assert sizes == {("p", "0"): (0, 45, 45), ("p", "1"): (0, 0, 0), ("p", "2"): (0, 13, 13)}
        # No names: one line per topic the broker has, starting with its name.
        assert await topics(port) == [["p", "3 partitions", "58 bytes"]]
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0

    async with child_process("topics", "--log-dir", str(tmp_path / "data"), stdout=subprocess.PIPE) as listing:
        assert await listing.wait() == 0
    rows = [row.split("\t") for row in bytes(listing.stdout).decode().splitlines()]
    assert rows[0] == ["topic", "partition", "segments", "start", "end", "bytes"]
    assert rows[1:] == [["p", "0", "1", "0", "45", "45"], ["p", "2", "1", "0", "13", "13"]]


async def test_client_errors_are_one_line_and_a_nonzero_exit(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        async with child_process("produce", "bad/name", "--broker", f"127.0.0.1:{port}",
                                 stdin=subprocess.PIPE) as producer:
            await producer.send_stdin(lines("x"))
            assert await producer.wait() == 1
        assert b"INVALID_TOPIC" in producer.stderr
        async with child_process("topics", "absent", "--broker", f"127.0.0.1:{port}") as listing:
            assert await listing.wait() == 1
        assert listing.stderr.strip().splitlines() == [
            f"trikafka: topic 'absent' does not exist on 127.0.0.1:{port}".encode()]
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    async with child_process("consume", "t", "--broker", f"127.0.0.1:{port}") as orphan:
        assert await orphan.wait() == 1  # nobody listens on that port any more
    assert orphan.stderr.startswith(b"trikafka: ")


@pytest.mark.zookeeper
async def test_topics_lists_what_zookeeper_has_registered(tmp_path, zk_chroot, zk_admin):
    """``topics --zk`` lists every registered topic and asks each broker for offsets (§8.2)."""
    async with serve_process(tmp_path / "one", "--num-partitions", "2") as (first, port_one), \
            serve_process(tmp_path / "two") as (second, port_two):
        await produce(port_one, "clicks", lines("a", "b"), "--acks", "-1", "--partition", "1")
        await produce(port_two, "clicks", lines("c"), "--acks", "-1")
        await produce(port_two, "views", lines("v"), "--acks", "-1")
        chroot = zk_chroot[zk_chroot.index("/"):]

        def register() -> None:  # what the brokers' ZooKeeper registration writes
            for broker_id, port in ((0, port_one), (1, port_two)):
                zk_admin.create(f"{chroot}/brokers/ids/{broker_id}", b"creator:127.0.0.1:%d" % port, makepath=True)
            zk_admin.create(f"{chroot}/brokers/topics/clicks/0", b"2", makepath=True)
            zk_admin.create(f"{chroot}/brokers/topics/clicks/1", b"1", makepath=True)
            zk_admin.create(f"{chroot}/brokers/topics/views/1", b"1", makepath=True)

        await trio.to_thread.run_sync(register)
        async with child_process("topics", "--zookeeper", zk_chroot, stdout=subprocess.PIPE) as listing:
            assert await listing.wait() == 0, listing.stderr.decode()
        rows = [row.split("\t") for row in bytes(listing.stdout).decode().splitlines()]
        assert rows == [  # the partition column is the partition; the broker column ID:HOST:PORT
            ["topic", "partition", "broker", "start", "visible_end", "bytes"],
            ["clicks", "0", f"0:127.0.0.1:{port_one}", "0", "0", "0"],
            ["clicks", "0", f"1:127.0.0.1:{port_two}", "0", "11", "11"],
            ["clicks", "1", f"0:127.0.0.1:{port_one}", "0", "22", "22"],
            ["views", "0", f"1:127.0.0.1:{port_two}", "0", "11", "11"],
        ]
        async with child_process("topics", "--zk", zk_chroot, stdout=subprocess.PIPE) as hidden_alias:
            assert await hidden_alias.wait() == 0, hidden_alias.stderr.decode()
        assert [row.split("\t") for row in bytes(hidden_alias.stdout).decode().splitlines()] == rows
        for broker in (first, second):
            broker.signal(signal.SIGTERM)
            assert await broker.wait() == 0
