"""Every ```python block of README.md runs, in order, against a real broker and ZooKeeper.

The README addresses the defaults (ZooKeeper 127.0.0.1:2181, broker 127.0.0.1:9092);
the test points them at a ``trikafka serve`` child registered in a fresh ZooKeeper
chroot and a free port, and changes nothing else.  A block passes when its
program exits 0; the blocks build on each other (the group consumer reads what
the producers sent).
"""

from __future__ import annotations

import re
import signal
import sys

import pytest
import trio

from tests.helpers.broker_testing import READY_MARKER, REPO_ROOT, child_env, child_process
from trikafka.cli.serve import read_ready_file

pytestmark = pytest.mark.zookeeper

BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
README_ZOOKEEPER = "127.0.0.1:2181"
README_BROKER = "127.0.0.1:9092"
README_KAFKA = "127.0.0.1:9093"  # the Kafka listener beside the default port (docs/protocol.md §16.1)
BLOCK_TIMEOUT_S = 120.0


TOUR_RE = re.compile(r"\*\*Terminal 2: produce, then consume\.\*\*.*?^```console\n(.*?)^```$",
                     re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return BLOCK_RE.findall((REPO_ROOT / "README.md").read_text())


def test_the_readme_has_python_blocks_and_only_fenced_code():
    text = (REPO_ROOT / "README.md").read_text()
    assert len(python_blocks()) >= 3
    # An indented block would escape this test: every example is fenced with its language.
    assert not re.search(r"\n\n {4}\S", text)


async def test_every_python_block_of_the_readme_runs(tmp_path, zk_chroot):
    ready_file = tmp_path / "port"
    async with child_process("serve", "--zookeeper", zk_chroot, "--port", "0", "--log-dir", str(tmp_path / "data"),
                             "--ready-file", str(ready_file), cwd=tmp_path) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port, kafka_port = read_ready_file(str(ready_file))
        outputs = []
        for number, block in enumerate(python_blocks(), 1):
            program = (block.replace(README_ZOOKEEPER, zk_chroot).replace(README_KAFKA, f"127.0.0.1:{kafka_port}")
                       .replace(README_BROKER, f"127.0.0.1:{port}"))
            with trio.fail_after(BLOCK_TIMEOUT_S):
                done = await trio.run_process([sys.executable, "-c", program], cwd=tmp_path, env=child_env(),
                                              capture_stdout=True, capture_stderr=True, check=False)
            assert done.returncode == 0, f"README python block {number} failed:\n{done.stderr.decode()}"
            outputs.append(done.stdout.decode())
        broker.signal(signal.SIGINT)
        assert await broker.wait() == 0
    # What the blocks print: a delivered SendResult, the consumer reaching the last message, and
    # the in-process cluster's consumer reading all it was sent.
    assert any("SendResult(topic='greetings'" in out and "error=None" in out for out in outputs)
    assert any("b'the last one'" in out for out in outputs)  # the group consumer's block
    assert any("b'order 9'" in out for out in outputs)


async def test_the_tour_s_console_block_prints_what_it_shows(tmp_path):
    """The five-minute tour's commands, run as written beside a `trikafka serve` of the default data
    dir (on a free port, which the commands find, docs §7.1), print exactly the lines it shows."""
    (tour,) = TOUR_RE.findall((REPO_ROOT / "README.md").read_text())
    steps: list[tuple[str, list[str]]] = []
    for line in tour.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    ready_file = tmp_path / "port"
    async with child_process("serve", "--standalone", "--port", "0", "--log-dir", "trikafka-data",
                             "--ready-file", str(ready_file), cwd=tmp_path) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        for command, shown in steps:
            program = command.replace("trikafka ", f"{sys.executable} -m trikafka ")
            with trio.fail_after(BLOCK_TIMEOUT_S):
                done = await trio.run_process(["bash", "-c", f"{{ {program}; }} 2>&1"], cwd=tmp_path,
                                              env=child_env(), capture_stdout=True, check=False)
            assert done.returncode == 0, f"$ {command}\n{done.stdout.decode()}"
            assert done.stdout.decode().splitlines() == shown, f"$ {command}"
        broker.signal(signal.SIGINT)
        assert await broker.wait() == 0
