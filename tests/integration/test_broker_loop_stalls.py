"""Nothing blocks the event loop: a real broker on a real disk, its longest task step measured.

Hundreds of topics are created by concurrent producers while retention deletes
(and rolls) the segments of the topics created so far.  A Trio instrument
times every task step with the real clock.  The broker's blocking work
(mkdir, file creation, directory fsyncs, stats, unlinks, rolls) must all run
in worker threads, so no step may take long, even when the disk is slow.
"""

from __future__ import annotations

import itertools
import time

import trio

from tests.helpers.broker_testing import make_config, memory_client, messages
from trikafka.broker.server import serve
from trikafka.log.fs import OsFileSystem
from trikafka.wire import ErrorCode, ProduceAckedRequest, ProducePart

HOUR_MS = 3_600_000
TOPICS = 300
PRODUCERS = 8

# The disk.  A directory fsync normally takes a fraction of a millisecond
# here, which is lost in the noise of a shared machine; but now and then it
# waits behind a journal commit for much longer.  BusyDisk makes every
# SLOW_EVERY-th directory fsync take SLOW_FSYNC_S more, so a broker that
# fsyncs a directory on the loop (topic creation: two; retention: one per
# deleted segment plus a roll) certainly has steps that long.
SLOW_EVERY = 25
SLOW_FSYNC_S = 0.6

# The bound: under one slow directory fsync, so a single one on the loop
# fails the test.  A step that blocks on nothing parses a request, appends a
# few hundred bytes to a page-cache file or encodes a response: well under a
# millisecond.  On a shared two-core machine at load 6 to 9 we measured steps
# of up to 88 ms without any blocking call on the loop (the kernel preempting
# the loop's thread, or a worker thread that holds the GIL).  A broker that
# fsyncs on the loop has a longest step of at least one slow fsync, so the
# bound tells the two apart.
LONGEST_STEP_BOUND_S = 0.3


class BusyDisk(OsFileSystem):
    """The real file system, with every ``SLOW_EVERY``-th directory fsync slow."""

    def __init__(self) -> None:
        self._fsyncs = itertools.count(1)  # next() is atomic: worker threads share it

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        if next(self._fsyncs) % SLOW_EVERY == 0:
            time.sleep(SLOW_FSYNC_S)


class LongestStep(trio.abc.Instrument):
    """The longest task step seen, and the task that took it (real clock)."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.culprit = ""
        self.steps = 0
        self._started: float | None = None  # None: added in the middle of a step

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is None:
            return
        took = time.perf_counter() - self._started
        self.steps += 1
        if took > self.longest_s:
            self.longest_s, self.culprit = took, task.name


async def test_topic_creation_and_retention_never_stall_the_loop(tmp_path):
    now_ms = [time.time_ns() // 1_000_000]
    config = make_config(tmp_path, num_partitions=1, log_file_size=100, log_retention_hours=1,
                         log_flush_interval=1, retention_first_run_delay_s=3600)
    instrument = LongestStep()
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(lambda **kw: serve(config, fs=BusyDisk(), clock_ms=lambda: now_ms[0], **kw))
        clients = [await memory_client(broker) for _ in range(PRODUCERS)]

        async def producer(client, index: int) -> None:
            for n in range(index, TOPICS, PRODUCERS):
                for payload in (b"a" * 120, b"b" * 120):  # > log.file.size: the second one rolls
                    part = ProducePart(f"topic-{n}", 0, messages(payload))
                    frame = await client.call(ProduceAckedRequest(-1, 60_000, (part,)))
                    assert frame.error_code == ErrorCode.NO_ERROR

        async def retention() -> None:
            while True:
                now_ms[0] += 2 * HOUR_MS  # every segment so far is past log.retention.hours
                await broker.retention.run_once()
                await trio.sleep(0.01)

        trio.lowlevel.add_instrument(instrument)
        try:
            async with trio.open_nursery() as load:
                load.start_soon(retention)
                async with trio.open_nursery() as producers:
                    for i, client in enumerate(clients):
                        producers.start_soon(producer, client, i)
                load.cancel_scope.cancel()
            await broker.retention.run_once()  # one whole pass over every log, at least
        finally:
            trio.lowlevel.remove_instrument(instrument)
        assert len(broker.log_manager.topics()) == TOPICS
        assert broker.retention.segments_deleted >= TOPICS
        broker.shutdown()
    print(f"longest step {instrument.longest_s * 1000:.1f} ms ({instrument.culprit}) of {instrument.steps} steps")
    assert instrument.longest_s < LONGEST_STEP_BOUND_S, (instrument.longest_s, instrument.culprit)
