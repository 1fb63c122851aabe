"""The flush scheduler with worker threads (the broker's own way, docs/protocol.md §7.2): a flush is
no task, its fsync runs in a worker thread and its completion as a callback on the loop; flushes
asked for during an fsync coalesce into one more; an fsync error is raised by ``run``; a flush
that started finishes before ``run`` returns."""

from __future__ import annotations

import threading

import pytest
import trio

from trikafka.broker.flusher import FlushScheduler
from trikafka.log.clock import ManualClock
from trikafka.log.config import LogConfig
from trikafka.log.errors import LogFailedError
from trikafka.log.flushing import FlushTicket
from trikafka.log.log import Log
from trikafka.log.manager import LogManager
from trikafka.testing import FakeFileSystem
from trikafka.wire.messageset import build_message_set

SET = build_message_set([b"x" * 40])


def _manager(fs: FakeFileSystem) -> LogManager:
    manager = LogManager("/data", LogConfig(flush_interval_messages=10_000), fs, clock_ms=ManualClock(1_000),
                         partitions=1, roll_on_append=False)
    manager.open()
    return manager


class _Spawns(trio.abc.Instrument):
    """The tasks spawned while it is installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


def _record_fsyncs(monkeypatch, hold_first: bool) -> tuple[threading.Event, threading.Event, list[int]]:
    """Record each flush's size; with ``hold_first`` the first fsync waits in its worker thread
    until ``release`` is set: (entered, release, sizes)."""
    entered, release = threading.Event(), threading.Event()
    sizes: list[int] = []
    fsync = FlushTicket.fsync

    def recorded_fsync(ticket: FlushTicket) -> None:  # in the worker thread
        sizes.append(ticket.size)
        if hold_first and len(sizes) == 1:
            entered.set()
            release.wait(10)
        fsync(ticket)

    monkeypatch.setattr(FlushTicket, "fsync", recorded_fsync)
    return entered, release, sizes


async def _start_a_held_flush(nursery: trio.Nursery, monkeypatch) -> tuple[FlushScheduler, Log, threading.Event,
                                                                        list[int]]:
    """A threaded scheduler whose first flush, of one append, waits in its fsync until the returned
    event is set: (scheduler, log, release, each fsync's size)."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    entered, release, sizes = _record_fsyncs(monkeypatch, hold_first=True)
    scheduler = await nursery.start(FlushScheduler(manager).run)
    log.append(SET)
    scheduler.request_flush(log)
    await trio.to_thread.run_sync(entered.wait, 10)
    return scheduler, log, release, sizes


async def test_an_acks_all_flush_spawns_no_task_and_makes_the_bytes_visible():
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager).run)
        log.append(SET)
        spawns = _Spawns()
        trio.lowlevel.add_instrument(spawns)
        try:
            await scheduler.flush(log)
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert log.visible_end == len(SET)
        assert spawns.names == []
        assert scheduler.flushes_completed == 1
        nursery.cancel_scope.cancel()


async def test_appends_before_the_loops_next_step_share_the_flush_asked_for_first(monkeypatch):
    """Group commit: another connection's acks -1 append right after this one's (or a pipelined
    request's) goes in the same fsync, not in one more after it."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    _, _, sizes = _record_fsyncs(monkeypatch, hold_first=False)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager).run)
        for _ in range(2):
            log.append(SET)
            scheduler.request_flush(log)
        await scheduler.wait_idle(log)
        assert sizes == [2 * len(SET)]
        assert log.visible_end == 2 * len(SET)
        nursery.cancel_scope.cancel()


async def test_flushes_asked_for_during_an_fsync_coalesce_into_one_more(monkeypatch):
    async with trio.open_nursery() as nursery:
        scheduler, log, release, sizes = await _start_a_held_flush(nursery, monkeypatch)
        for _ in range(3):
            log.append(SET)
            scheduler.request_flush(log)
        release.set()
        await scheduler.wait_idle(log)
        assert sizes == [len(SET), 4 * len(SET)]
        assert log.visible_end == 4 * len(SET)
        nursery.cancel_scope.cancel()


async def test_a_threaded_flush_holds_its_log_s_pass_lease_and_a_retired_log_is_flushed_no_more(monkeypatch):
    """A deletion (docs/protocol.md §16.4) waits for the fsync in the worker thread; once the log is
    retired, a flush asked for (a pending deadline, an acks -1 produce) flushes nothing."""
    async with trio.open_nursery() as nursery:
        scheduler, log, release, sizes = await _start_a_held_flush(nursery, monkeypatch)
        assert log.passes.held == 1
        log.passes.retire()
        ended = trio.Event()
        log.passes.on_ended(ended.set)
        for _ in range(2):  # the second flush asked for during the fsync is refused its lease
            log.append(SET)
            scheduler.request_flush(log)
        release.set()
        await ended.wait()
        await scheduler.flush(log)
        assert sizes == [len(SET)] and log.visible_end == len(SET) and log.passes.held == 0
        nursery.cancel_scope.cancel()


async def test_a_failing_threaded_fsync_is_raised_by_run():
    fs = FakeFileSystem(seed=1)
    manager = _manager(fs)
    log = manager.get_or_create("t", 0)
    fs.inject_error("fsync", "t-0")
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            scheduler = await nursery.start(FlushScheduler(manager).run)
            log.append(SET)
            scheduler.request_flush(log)
            await trio.sleep_forever()  # ends when ``run`` raises
    assert failure.group_contains(LogFailedError, depth=None)
    assert log.visible_end == 0


async def test_run_returns_only_once_a_started_flush_is_complete(monkeypatch):
    async with trio.open_nursery() as nursery:
        _, log, release, _ = await _start_a_held_flush(nursery, monkeypatch)
        nursery.cancel_scope.cancel()  # the scheduler stops while the fsync runs
        release.set()
    assert log.flushing.flush_ticket is None  # handed back, not left dangling
    assert log.visible_end == len(SET)
