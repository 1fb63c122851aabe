"""A group consumer process SIGKILLed mid-stream: a dead consumer's znodes
linger until its session times out, and the duplicates are bounded by its
uncommitted range.

Consumer ``A`` runs in a subprocess (``tests/helpers/group_consumer_child.py``)
with autocommit every 0.3 s; consumer ``B`` runs in the test.  After ``A`` has
printed a seeded number of messages (some before ``B`` joins, some after), it
is SIGKILLed.  Its session lingers for the session timeout, then ``B`` takes
over everything.  Every message must be consumed; a message may come twice
only if ``A`` printed it above the offset committed when it died.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.helpers.group_world import GroupWorld, SessionLoss, group_config, open_kazoo_world, produce_everywhere
from tests.helpers.fault_seeds import fault_rng

REPO_ROOT = Path(__file__).resolve().parents[2]
LINE_TIMEOUT_S = 30.0


class ChildConsumer:
    """The subprocess and a line reader over its stdout."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""
        self.lines_read = 0

    async def read_line(self) -> str | None:
        """The next line, or None at EOF."""
        while b"\n" not in self._buffer:
            assert self.process.stdout is not None
            data = await self.process.stdout.receive_some(65536)
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.lines_read += 1
        return line.decode()


def record_child_line(world: GroupWorld, line: str) -> bool:
    """Record a ``msg`` line as a delivery by consumer ``A``; False for other lines."""
    parts = line.split(" ")
    if parts[0] != "msg":
        return False
    _, topic, partition, offset, next_offset, generation, payload = parts
    world.record("A", generation, topic, partition, int(offset), int(next_offset), payload.encode())
    return True


async def read_messages(world: GroupWorld, child: ChildConsumer, count: int) -> int:
    """Read until ``count`` more messages were printed (or A went quiet)."""
    seen = 0
    with trio.move_on_after(LINE_TIMEOUT_S / 3):
        while seen < count:
            line = await child.read_line()
            if line is None:
                break
            seen += record_child_line(world, line)
    return seen


@pytest.mark.zookeeper
async def test_consumer_process_sigkilled_mid_stream(zk_chroot, zookeeper_server, tmp_path) -> None:
    rng = fault_rng("sigkill")
    before_b, after_b = rng.randint(5, 40), rng.randint(5, 40)
    print(f"A is killed after {before_b} messages alone and {after_b} more beside B")
    async with open_kazoo_world(zk_chroot, zookeeper_server.connect_string, str(tmp_path)) as world:
        await world.add_topic("t")
        await world.start_broker(0, 3)
        await world.start_broker(1, 2)
        await produce_everywhere(world, "t", rng.randint(20, 40))
        command = [sys.executable, "-m", "tests.helpers.group_consumer_child", "--zookeeper", zk_chroot,
                   "--group", world.group, "--topic", "t", "--consumer-id", "A"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, cwd=str(REPO_ROOT), env=env)
        try:
            child = ChildConsumer(process)
            with trio.fail_after(LINE_TIMEOUT_S):
                ready = await child.read_line()
            assert ready is not None and ready.startswith("ready"), ready
            got_alone = await read_messages(world, child, before_b)
            await world.add_consumer("B", {"t": 1}, group_config(), credit=math.inf)
            got_beside = await read_messages(world, child, after_b)
            process.send_signal(signal.SIGKILL)
            await process.wait()
            # What A printed before it died, the application saw: read it all.
            while (line := await child.read_line()) is not None:
                record_child_line(world, line)
            world.losses.append(SessionLoss("A", "crash", await world.committed_offsets()))
            world.note(f"A killed after {got_alone} + {got_beside} messages")
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
        assert got_alone > 0, "A consumed nothing before B joined"
        await produce_everywhere(world, "t", rng.randint(5, 15))
        await world.settle()  # waits out A's session: then B owns every partition
        await world.drain()
        world.check_deliveries()
        stats = world.stats()
        print("stats", stats)
        b_after_kill = [d for d in world.deliveries if d.consumer == "B"]
        assert b_after_kill, "B never consumed anything"

