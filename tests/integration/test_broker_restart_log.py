"""What a restart of a broker with many partitions writes at INFO: one line a phase with its counts
(logs loaded, partitions given a leader, partitions led, coordinator partitions loaded), never a
line a partition; the per-partition lines are at DEBUG."""

from __future__ import annotations

import signal

import trio
from confluent_kafka import Consumer, TopicPartition

from tests.helpers.broker_testing import READY_MARKER, child_process
from tests.helpers.kafka_processes import ZK_FLAGS, START_TIMEOUT_S
from trikafka.cli.serve import read_ready_file

PARTITIONS = 40  # and __consumer_offsets' 50: 90 logs
INFO_LINES_AT_MOST = 25  # before: about 3 a partition


def info_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if " INFO " in line or line.startswith("trikafka: ")]


def commit_an_offset(bootstrap: str) -> None:
    """A group commit: the coordinator creates and loads __consumer_offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-log"})
    try:
        consumer.commit(offsets=[TopicPartition("events", 0, 0)], asynchronous=False)
    finally:
        consumer.close()


async def test_a_restart_with_many_partitions_writes_a_line_a_phase(tmp_path, zk_chroot):
    ready_file = tmp_path / "port"

    def serve(port: int, kafka_port: int) -> tuple[str, ...]:
        return ("serve", "--zookeeper", zk_chroot, "--broker-id", "0", *ZK_FLAGS, "--port", str(port),
                "--kafka-port", str(kafka_port), "--log-dir", str(tmp_path / "data"), "--ready-file", str(ready_file))

    async with child_process(*serve(0, 0)) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port, kafka_port = read_ready_file(str(ready_file))
        assert kafka_port is not None
        bootstrap = f"127.0.0.1:{kafka_port}"
        async with child_process("topics", "create", "events", "--partitions", str(PARTITIONS),
                                 "--replication-factor", "1", "--kafka", bootstrap) as create:
            assert await create.wait() == 0, create.stderr.decode()
        await trio.to_thread.run_sync(commit_an_offset, bootstrap)
        broker.signal(signal.SIGKILL)  # the restart recovers every log, without a checkpoint in most
        await broker.wait()
    ready_file.unlink()
    # __consumer_offsets' logs are created as its partitions get leaders; the kill may come before
    # the last ones exist, so the line is checked against what the restart finds on disk.
    logs_on_disk = sum(1 for entry in (tmp_path / "data").iterdir() if entry.is_dir())
    assert logs_on_disk > PARTITIONS
    # The same ports, as a restarted broker has: its previous session's registration, which names
    # them, is then known for its own and waited out (§8), not taken for another broker's.
    async with child_process(*serve(port, kafka_port)) as broker:
        with trio.fail_after(START_TIMEOUT_S):
            await broker.wait_for_stderr(READY_MARKER)
        bootstrap = f"127.0.0.1:{read_ready_file(str(ready_file))[1]}"
        await trio.to_thread.run_sync(commit_an_offset, bootstrap)  # leaders elected, a coordinator loaded
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    lines = info_lines(broker.stderr)
    assert len(lines) <= INFO_LINES_AT_MOST, "\n".join(lines)
    assert any(f"loaded ({logs_on_disk} logs, recovery ran)" in line for line in lines), "\n".join(lines)
    assert not any("recovery scans all" in line for line in lines)
