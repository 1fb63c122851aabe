"""The compaction contracts of the ``trikafka`` command, as separate processes:
``serve --set log.cleaner.backoff.ms=N --set min.cleanable.dirty.ratio=R``,
``produce T --key-separator :`` (``key:`` alone deletes the key) and
``consume T --print-key --key-separator :``."""

from __future__ import annotations

import subprocess

import trio

from tests.helpers.broker_testing import PROCESS_TIMEOUT_S, child_process, serve_process
from tests.helpers.cli import lines, produce

SERVE = ("--set", "log.cleanup.policy=compact", "--set", "log.file.size=3000", "--set", "log.cleaner.backoff.ms=20",
         "--set", "min.cleanable.dirty.ratio=0.01", "--set", "log.default.flush.scheduler.interval.ms=20")


async def test_keyed_produce_compaction_and_keyed_consume(tmp_path):
    async with serve_process(tmp_path / "data", *SERVE) as (broker, port):
        sent, expected = [], {}
        for round_ in range(20):
            for k in range(10):
                sent.append(f"user{k}:round {round_} value {'v' * 20}")
                expected[f"user{k}"] = f"round {round_} value {'v' * 20}"
        sent.append("user3:")  # a tombstone
        expected["user3"] = ""
        await produce(port, "kv", lines(*sent), "--acks", "-1", "--key-separator", ":")
        await broker.wait_for_stderr(b"trikafka.broker.cleaner: cleaned kv-0")
        await produce(port, "kv", lines("end:done"), "--acks", "-1", "--key-separator", ":")
        async with child_process("consume", "kv", "--broker", f"127.0.0.1:{port}", "--print-key",
                                 "--key-separator", "=", stdout=subprocess.PIPE) as consumer:
            with trio.fail_after(PROCESS_TIMEOUT_S):
                while b"end=done\n" not in consumer.stdout:
                    await consumer._stdout_changed.wait()
        got = bytes(consumer.stdout).decode().splitlines()
        assert got[-1] == "end=done" and len(got) < len(sent)
        final = dict(line.split("=", 1) for line in got[:-1])
        assert final == expected
        async with child_process("produce", "kv", "--broker", f"127.0.0.1:{port}", "--key-separator", ":",
                                 stdin=subprocess.PIPE) as bad:
            await bad.send_stdin(lines("no separator here"))
            assert await bad.wait() == 2
        assert b"without the key separator" in bad.stderr and bad.stderr.count(b"\n") == 1
