"""The ``trikafka`` command run as a child process, for the command-line tests."""

from __future__ import annotations

import subprocess

import trio

from tests.helpers.broker_testing import PROCESS_TIMEOUT_S, child_env, child_process, trikafka_command


def lines(*items: str) -> bytes:
    """``items`` as stdin for ``trikafka produce``: one message per line."""
    return "".join(item + "\n" for item in items).encode()


async def produce(port: int, topic: str, data: bytes, *flags: str) -> bytes:
    """Run ``trikafka produce`` with ``data`` on stdin; return its stderr."""
    async with child_process("produce", topic, "--broker", f"127.0.0.1:{port}", *flags,
                             stdin=subprocess.PIPE) as producer:
        await producer.send_stdin(data)
        assert await producer.wait() == 0, producer.stderr.decode()
    return bytes(producer.stderr)


async def cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """Run ``trikafka ARGS`` with ``stdin``; (exit status, stdout, stderr)."""
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process(trikafka_command(*args), stdin=stdin, capture_stdout=True,
                                      capture_stderr=True, check=False, env=child_env())
    return done.returncode, done.stdout.decode(), done.stderr.decode()
