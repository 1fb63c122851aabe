"""OFFSETS by time asks every segment's modification time: those stats never run on the event loop."""

from __future__ import annotations

import trio

from trikafka.broker.server import inline_blocking
from trikafka.client import connect
from trikafka.testing import FakeFileSystem
from trikafka.testing.broker import in_process_config, start_in_memory
from trikafka.testing.network import InMemoryNetwork
from trikafka.wire import build_message_set


class StatsOnlyOffLoop(FakeFileSystem):
    """A file system that fails any ``mtime_ms`` asked outside a blocking call."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.off_loop = False
        self.stats_on_loop = 0

    def mtime_ms(self, path: str) -> int:
        if not self.off_loop:
            self.stats_on_loop += 1
        return super().mtime_ms(path)


async def test_offsets_by_time_stats_segments_only_in_blocking_calls(autojump_clock):
    fs = StatsOnlyOffLoop()

    async def marked_blocking(fn):
        fs.off_loop = True
        try:
            return await inline_blocking(fn)
        finally:
            fs.off_loop = False

    network = InMemoryNetwork()
    async with trio.open_nursery() as nursery:
        broker = await start_in_memory(nursery, in_process_config(log_file_size=200), fs,
                                       run_blocking=marked_blocking)
        network.add(broker)
        async with await connect(broker.host, broker.port, open_stream=network.open_stream) as conn:
            for n in range(20):  # several segments
                await conn.produce_acked([("t", 0, build_message_set([b"message %d" % n]))])
            before = fs.stats_on_loop
            found = await conn.offsets("t", 0, 10**12, 100)  # every segment is older than this
            latest = await conn.offsets("t", 0, -1, 1)
        assert len(found) > 2 and found[0] == latest[0]
        assert fs.stats_on_loop == before  # every stat of the answer happened off the loop
        broker.shutdown()
