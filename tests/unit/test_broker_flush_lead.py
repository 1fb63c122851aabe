"""The deadline flusher starts a flush early by the fsync time it has seen, so data is visible at its interval."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.broker_testing import make_config, memory_client, messages
from trikafka.log.flushing import FlushTicket
from trikafka.testing import FakeFileSystem, start_in_memory
from trikafka.wire import ProducePart, ProduceRequest

INTERVAL_S = 0.1


def slow_fsync(fsync_s):
    """A ``run_blocking`` whose log fsyncs take ``fsync_s`` (or ``fsync_s()``) of Trio time."""
    async def run(fn):
        if isinstance(getattr(fn, "__self__", None), FlushTicket):
            await trio.sleep(fsync_s() if callable(fsync_s) else fsync_s)
        result = fn()
        await trio.lowlevel.checkpoint()
        return result
    return run


async def visible_delays(nursery, tmp_path, fsync_s, rounds):
    """For each of ``rounds`` lone appends: how long after it the log's visible end advanced."""
    config = make_config(tmp_path, log_flush_interval=100_000, num_partitions=1,
                         log_default_flush_interval_ms=int(INTERVAL_S * 1000)).replace(log_dir="/data")
    broker = await start_in_memory(nursery, config, FakeFileSystem(seed=1), run_blocking=slow_fsync(fsync_s))
    client = await memory_client(broker)
    delays = []
    for i in range(rounds):
        await client.send(ProduceRequest(ProducePart("t", 0, messages(b"%d" % i))))
        await client.offsets("t", 0, -1)  # handled in order: appended now
        appended_at, log = trio.current_time(), broker.log_manager.get("t", 0)
        visible = trio.Event()
        log.add_visible_listener(lambda _: visible.set())
        await visible.wait()
        delays.append(trio.current_time() - appended_at)
        await trio.sleep(1)
    return delays, broker.flusher


async def test_a_flush_starts_early_by_the_fsync_time_it_has_seen(nursery, tmp_path, autojump_clock):
    delays, flusher = await visible_delays(nursery, tmp_path, fsync_s=0.004, rounds=40)
    assert delays[0] == pytest.approx(INTERVAL_S + 0.004)  # nothing seen yet: starts at the deadline
    # A steady fsync: the lead is its time from then on, and the data is visible at its interval.
    assert flusher.lead_s == pytest.approx(0.004)
    assert delays[1:] == [pytest.approx(INTERVAL_S)] * (len(delays) - 1)


async def test_a_varying_fsync_time_adds_its_deviation_to_the_lead(nursery, tmp_path, autojump_clock):
    fsync_times = iter([0.002, 0.006] * 20)
    delays, flusher = await visible_delays(nursery, tmp_path, fsync_s=lambda: next(fsync_times), rounds=40)
    # Mean 4 ms, mean deviation 2 ms: the lead covers the slow fsyncs, so no data waits past its interval.
    assert flusher.lead_s == pytest.approx(0.004 + 4 * 0.002, abs=0.001)
    assert max(delays[10:]) <= INTERVAL_S


async def test_the_lead_never_exceeds_half_the_interval(nursery, tmp_path, autojump_clock):
    delays, flusher = await visible_delays(nursery, tmp_path, fsync_s=0.08, rounds=10)
    assert flusher.lead_s > INTERVAL_S / 2  # a disk slower than half the interval ...
    assert delays[-1] == pytest.approx(INTERVAL_S / 2 + 0.08)  # ... still waits half of it
