"""The broker's watcher of per-topic settings (docs/protocol.md §12.12.1) on the fake and the real ZooKeeper,
and a compact-policy topic created by ``trikafka topics create --config`` compacted by a running broker."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest
import trio

from tests.helpers.broker_testing import PROCESS_TIMEOUT_S, READY_MARKER, child_process
from tests.helpers.cli import lines, produce
from trikafka.broker.config import BrokerConfig
from trikafka.broker.topic_config import TopicConfigWatcher, TopicOverrides
from trikafka.broker.topic_settings import LogOverrides
from trikafka.log.config import HOUR_MS
from trikafka.testing.fakefs import FakeFileSystem
from trikafka.log.manager import LogManager
from trikafka.zk.replication_store import create_topic
from trikafka.zk.replication_values import PartitionState, TopicAssignment
from trikafka.zk.topic_config_store import create_topic_config, update_topic_config
from trikafka.cli.serve import read_ready_file

WAIT_S = 20.0


async def _until(watcher: TopicConfigWatcher, predicate) -> None:
    with trio.fail_after(WAIT_S):
        while not predicate():
            await watcher.changed.wait()


async def test_settings_are_applied_replaced_and_put_back(zk_harness, zk_clock):
    config = BrokerConfig(log_retention_hours=5)
    manager = LogManager("/data", config.log_config(), FakeFileSystem())
    manager.open()
    log = manager.get_or_create("kv", 0)
    cleaner = SimpleNamespace(overrides={})
    async with zk_harness.client() as admin, zk_harness.client() as broker_zk:
        await create_topic_config(admin, "kv", {"cleanup.policy": "compact", "retention.ms": "1000"})
        async with trio.open_nursery() as nursery:
            watcher = await nursery.start(TopicConfigWatcher(broker_zk, TopicOverrides(config, manager, cleaner)).run)
            # what was stored before the broker started is in force once the watcher is ready
            assert cleaner.overrides["kv"] == LogOverrides(compact=True, delete=False, retention_ms=1000)
            assert log.config.retention_ms == 1000

            def change(new):
                return lambda current, replicated: new

            await update_topic_config(admin, "kv", change({"cleanup.policy": "compact,delete",
                                                             "delete.retention.ms": "soon"}))
            await _until(watcher, lambda: cleaner.overrides.get("kv", LogOverrides()).delete)
            assert cleaner.overrides["kv"] == LogOverrides(compact=True, delete=True)  # the bad key is ignored
            assert log.config.retention_ms == 5 * HOUR_MS  # the broker's own retention is back

            # a replicated topic's znode: its config applies, and wins over a plain config of the same name
            await create_topic_config(admin, "both", {"cleanup.policy": "compact"})
            await create_topic(admin, "both", TopicAssignment(((1,),), {"cleanup.policy": "delete",
                                                                        "retention.bytes": "100"}),
                               [PartitionState(1, 0, (1,), 0)])
            await _until(watcher, lambda: watcher.applied.get("both") == LogOverrides(
                compact=False, delete=True, retention_bytes=100))

            await admin.delete("/trikafka/config/topics/kv")
            await _until(watcher, lambda: "kv" not in cleaner.overrides)
            assert "kv" not in watcher.applied
            nursery.cancel_scope.cancel()


SERVE = ("--set", "log.file.size=3000", "--set", "log.cleaner.backoff.ms=20", "--set", "min.cleanable.dirty.ratio=0.01",
         "--set", "log.default.flush.scheduler.interval.ms=20")


@pytest.mark.zookeeper
async def test_a_topic_created_compacted_by_the_cli_is_compacted_by_the_broker(zk_chroot, tmp_path,
                                                                              no_kazoo_thread_leaks):
    ready = tmp_path / "port"
    async with child_process("serve", "--zookeeper", zk_chroot, "--broker-id", "1", "--port", "0",
                             "--log-dir", str(tmp_path / "data"), "--ready-file", str(ready), *SERVE) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = read_ready_file(str(ready))[0]
        async with child_process("topics", "create", "kv", "--partitions", "1", "--config", "cleanup.policy=compact",
                                 "--zookeeper", zk_chroot, stdout=subprocess.PIPE) as create:
            assert await create.wait() == 0, create.stderr.decode()
        assert b"topic 'kv' has 1 partition on" in create.stdout
        await broker.wait_for_stderr(b"topic kv: settings from ZooKeeper: {'cleanup.policy': 'compact'}")
        sent = [f"user{k}:round {r} {'v' * 20}" for r in range(20) for k in range(10)]
        await produce(port, "kv", lines(*sent), "--acks", "-1", "--key-separator", ":", "--batch", "50")
        await broker.wait_for_stderr(b"trikafka.broker.cleaner: cleaned kv-0")  # the broker's own policy: delete
        await produce(port, "kv", lines("end:done"), "--acks", "-1", "--key-separator", ":")
        async with child_process("consume", "kv", "--broker", f"127.0.0.1:{port}", "--print-key",
                                 "--key-separator", "=", stdout=subprocess.PIPE) as consumer:
            with trio.fail_after(PROCESS_TIMEOUT_S):
                while b"end=done\n" not in consumer.stdout:
                    await consumer._stdout_changed.wait()
        got = bytes(consumer.stdout).decode().splitlines()
        assert len(got) < len(sent)
        assert dict(line.split("=", 1) for line in got[:-1]) == {f"user{k}": f"round 19 {'v' * 20}" for k in range(10)}


async def test_a_standalone_broker_keeps_create_topic_settings_and_compacts(tmp_path):
    """The issue-17 contract without ZooKeeper: `topics create --config ... --broker` (CREATE_TOPIC
    carries the settings, docs/protocol.md §9.5); a bad key is refused and creates nothing; the
    settings survive a restart."""
    ready = tmp_path / "port"
    data = tmp_path / "data"
    async with child_process("serve", "--standalone", "--broker-id", "1", "--port", "0", "--log-dir", str(data),
                             "--ready-file", str(ready), *SERVE) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = read_ready_file(str(ready))[0]
        async with child_process("topics", "create", "bad", "--partitions", "1", "--config", "cleanup.policy=sometimes",
                                 "--broker", f"127.0.0.1:{port}") as refused:
            assert await refused.wait() == 2
        assert b"cleanup.policy" in refused.stderr and not (data / "bad-0").exists()
        async with child_process("topics", "create", "kv", "--partitions", "1", "--config", "cleanup.policy=compact",
                                 "--broker", f"127.0.0.1:{port}", stdout=subprocess.PIPE) as create:
            assert await create.wait() == 0, create.stderr.decode()
        assert b"topic 'kv' has 1 partition on" in create.stdout
        assert b'"kv":{"cleanup.policy":"compact"}' in (data / ".trikafka-topic-settings.json").read_bytes()
    # A new process on the same log dir: the stored setting is in force again.
    async with child_process("serve", "--standalone", "--broker-id", "1", "--port", "0", "--log-dir", str(data),
                             "--ready-file", str(ready), *SERVE) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port = read_ready_file(str(ready))[0]
        sent = [f"user{k}:round {r} {'v' * 20}" for r in range(20) for k in range(10)]
        await produce(port, "kv", lines(*sent), "--acks", "-1", "--key-separator", ":", "--batch", "50")
        await broker.wait_for_stderr(b"trikafka.broker.cleaner: cleaned kv-0")  # the broker's own policy: delete
