"""The flush scheduler (docs/protocol.md §7.2) runs a flush one way, whether its fsync runs in a
worker thread (the broker's own way) or through a test double's ``run_blocking`` (``DOUBLE``):
flushes asked for during an fsync coalesce into one more; an fsync error is raised by ``run``; a
flush that started finishes before ``run`` returns.  With worker threads a flush is no task, its
completion a callback on the loop, also when it waits for a roll or for an fsync slot."""

from __future__ import annotations

import threading

import pytest
import trio

from trikafka.broker.flusher import MAX_CONCURRENT_FSYNCS, FlushScheduler
from trikafka.log.clock import ManualClock
from trikafka.log.config import LogConfig
from trikafka.log.errors import LogFailedError
from trikafka.log.flushing import FlushTicket, RollTicket
from trikafka.log.log import Log
from trikafka.log.manager import LogManager
from trikafka.testing import FakeFileSystem
from trikafka.wire.messageset import build_message_set

SET = build_message_set([b"x" * 40])
# The two ways an fsync leaves the loop: the scheduler's own worker threads, and a ``run_blocking``
# handed in (a test double's way; this one runs the call in a worker thread too).
THREADS, DOUBLE = None, trio.to_thread.run_sync
BOTH_WAYS = pytest.mark.parametrize("run_blocking", [THREADS, DOUBLE], ids=["threads", "run_blocking"])


def _manager(fs: FakeFileSystem) -> LogManager:
    manager = LogManager("/data", LogConfig(flush_interval_messages=10_000), fs, clock_ms=ManualClock(1_000),
                         partitions=1, roll_on_append=False)
    manager.open()
    return manager


class _Tasks(trio.abc.Instrument):
    """The tasks spawned, and those that took a step, while it is installed."""

    def __init__(self) -> None:
        self.spawned: list[str] = []
        self.stepped: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.stepped.append(task.name)


def _record_fsyncs(monkeypatch, hold_first: bool | int) -> tuple[threading.Event, threading.Event, list[int]]:
    """Record each flush's size; the first ``hold_first`` fsyncs (True: one) wait in their worker
    threads until ``release`` is set, ``entered`` is set once they all wait: (entered, release, sizes)."""
    entered, release = threading.Event(), threading.Event()
    sizes: list[int] = []
    lock = threading.Lock()
    fsync = FlushTicket.fsync

    def recorded_fsync(ticket: FlushTicket) -> None:  # in a worker thread
        with lock:
            sizes.append(ticket.size)
            held = len(sizes) <= hold_first
            if len(sizes) == hold_first:
                entered.set()
        if held:
            release.wait(10)
        fsync(ticket)

    monkeypatch.setattr(FlushTicket, "fsync", recorded_fsync)
    return entered, release, sizes


async def _start_a_held_flush(nursery: trio.Nursery, monkeypatch, run_blocking=THREADS
                              ) -> tuple[FlushScheduler, Log, threading.Event, list[int]]:
    """A scheduler whose first flush, of one append, waits in its fsync until the returned event is
    set: (scheduler, log, release, each fsync's size)."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    entered, release, sizes = _record_fsyncs(monkeypatch, hold_first=True)
    scheduler = await nursery.start(FlushScheduler(manager, run_blocking=run_blocking).run)
    log.append(SET)
    scheduler.request_flush(log)
    await trio.to_thread.run_sync(entered.wait, 10)
    return scheduler, log, release, sizes


async def test_an_acks_all_flush_spawns_no_task_takes_no_step_of_its_own_and_makes_the_bytes_visible():
    """An acks -1 flush costs the loop the completion's callback and the waiter's wake, nothing to
    start it: it starts when the round of steps that asked for it ends."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager).run)
        log.append(SET)
        tasks = _Tasks()
        trio.lowlevel.add_instrument(tasks)
        try:
            await scheduler.flush(log)
        finally:
            trio.lowlevel.remove_instrument(tasks)
        assert log.visible_end == len(SET)
        assert tasks.spawned == []
        # This task (its checkpoint; its wake, unless the fsync was done by then) and the fsync's
        # completion (a ``run_sync_soon`` callback): no other task.
        me = trio.lowlevel.current_task().name
        assert set(tasks.stepped) == {me, "<TrioToken.run_sync_soon task>"}, tasks.stepped
        assert len(tasks.stepped) <= 3, tasks.stepped
        assert scheduler.flushes_completed == 1
        nursery.cancel_scope.cancel()


async def test_a_flush_started_on_an_idle_loop_wakes_it_for_the_task_that_runs_a_doubles_call():
    """Started outside any task as the loop is about to sleep, a flush whose call runs in a task (a test
    double's ``run_blocking``) wakes the loop for it, instead of leaving it to the next I/O."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    flushed = trio.Event()
    log.add_visible_listener(lambda _: flushed.set())
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager, run_blocking=DOUBLE).run)
        log.append(SET)
        with trio.fail_after(5):
            scheduler.request_flush(log)
            await flushed.wait()  # parks at once: no task is runnable when this round ends
        assert log.visible_end == len(SET)
        nursery.cancel_scope.cancel()


@BOTH_WAYS
async def test_appends_before_the_loops_next_step_share_the_flush_asked_for_first(monkeypatch, run_blocking):
    """Group commit: another connection's acks -1 append right after this one's (or a pipelined
    request's) goes in the same fsync, not in one more after it."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    _, _, sizes = _record_fsyncs(monkeypatch, hold_first=False)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager, run_blocking=run_blocking).run)
        for _ in range(2):
            log.append(SET)
            scheduler.request_flush(log)
        await scheduler.wait_idle(log)
        assert sizes == [2 * len(SET)]
        assert log.visible_end == 2 * len(SET)
        nursery.cancel_scope.cancel()


@BOTH_WAYS
async def test_flushes_asked_for_during_an_fsync_coalesce_into_one_more(monkeypatch, run_blocking):
    async with trio.open_nursery() as nursery:
        scheduler, log, release, sizes = await _start_a_held_flush(nursery, monkeypatch, run_blocking)
        for _ in range(3):
            log.append(SET)
            scheduler.request_flush(log)
        release.set()
        await scheduler.wait_idle(log)
        assert sizes == [len(SET), 4 * len(SET)]
        assert log.visible_end == 4 * len(SET)
        nursery.cancel_scope.cancel()


@BOTH_WAYS
async def test_a_flush_holds_its_log_s_pass_lease_and_a_retired_log_is_flushed_no_more(monkeypatch, run_blocking):
    """A deletion (docs/protocol.md §16.4) waits for the fsync in flight; once the log is retired, a
    flush asked for (a pending deadline, an acks -1 produce) flushes nothing."""
    async with trio.open_nursery() as nursery:
        scheduler, log, release, sizes = await _start_a_held_flush(nursery, monkeypatch, run_blocking)
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


@BOTH_WAYS
@pytest.mark.parametrize("stopped_meanwhile", [False, True], ids=["running", "stopped"])
async def test_a_failing_fsync_is_raised_by_run(monkeypatch, run_blocking, stopped_meanwhile):
    """Also when the scheduler is stopped while the fsync runs."""
    fs = FakeFileSystem(seed=1)
    manager = _manager(fs)
    log = manager.get_or_create("t", 0)
    entered, release, _ = _record_fsyncs(monkeypatch, hold_first=True)
    fs.inject_error("fsync", "t-0")
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            scheduler = await nursery.start(FlushScheduler(manager, run_blocking=run_blocking).run)
            log.append(SET)
            scheduler.request_flush(log)
            await trio.to_thread.run_sync(entered.wait, 10)
            if stopped_meanwhile:
                nursery.cancel_scope.cancel()
            release.set()
            await trio.sleep_forever()  # ends when ``run`` raises
    assert failure.group_contains(LogFailedError, depth=None)
    assert log.visible_end == 0


@BOTH_WAYS
async def test_run_returns_only_once_a_started_flush_is_complete(monkeypatch, run_blocking):
    async with trio.open_nursery() as nursery:
        _, log, release, _ = await _start_a_held_flush(nursery, monkeypatch, run_blocking)
        nursery.cancel_scope.cancel()  # the scheduler stops while the fsync runs
        release.set()
    assert log.flushing.flush_ticket is None  # handed back, not left dangling
    assert log.visible_end == len(SET)


async def _take_every_slot(nursery: trio.Nursery, monkeypatch) -> tuple[FlushScheduler, list[Log],
                                                                       threading.Event, list[int]]:
    """A threaded scheduler with a flush of one append in each fsync slot, each waiting in its
    worker thread until the returned event is set, and one more log, not flushed yet: (scheduler,
    logs with that one last, release, each fsync's size)."""
    manager = _manager(FakeFileSystem(seed=1))
    logs = [manager.get_or_create(f"t{i}", 0) for i in range(MAX_CONCURRENT_FSYNCS + 1)]
    entered, release, sizes = _record_fsyncs(monkeypatch, hold_first=MAX_CONCURRENT_FSYNCS)
    scheduler = await nursery.start(FlushScheduler(manager).run)
    for log in logs[:-1]:
        log.append(SET)
        scheduler.request_flush(log)
    await trio.to_thread.run_sync(entered.wait, 10)
    return scheduler, logs, release, sizes


async def test_a_flush_that_finds_every_fsync_slot_taken_is_no_task_and_starts_when_one_frees(monkeypatch):
    async with trio.open_nursery() as nursery:
        scheduler, logs, release, sizes = await _take_every_slot(nursery, monkeypatch)
        last = logs[-1]
        last.append(SET + SET)
        spawns = _Tasks()
        trio.lowlevel.add_instrument(spawns)
        try:
            scheduler.request_flush(last)
            await trio.testing.wait_all_tasks_blocked()
            assert scheduler.in_flight(last) and len(sizes) == MAX_CONCURRENT_FSYNCS  # waits for a slot
            release.set()
            for log in logs:
                await scheduler.wait_idle(log)
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert spawns.spawned == []
        assert sizes[-1] == 2 * len(SET) and last.visible_end == 2 * len(SET)
        assert all(log.visible_end == len(SET) for log in logs[:-1])
        nursery.cancel_scope.cancel()


async def test_a_flush_asked_for_during_a_roll_is_no_task_and_starts_when_the_roll_ends(monkeypatch):
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    _, _, sizes = _record_fsyncs(monkeypatch, hold_first=False)
    rolling, roll_release = threading.Event(), threading.Event()
    roll = RollTicket.run

    def held_roll(ticket: RollTicket) -> None:  # in a worker thread
        rolling.set()
        roll_release.wait(10)
        roll(ticket)

    monkeypatch.setattr(RollTicket, "run", held_roll)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager).run)
        log.append(SET)
        nursery.start_soon(scheduler.roll_while, log, iter([True, False]).__next__)
        await trio.to_thread.run_sync(rolling.wait, 10)
        spawns = _Tasks()
        trio.lowlevel.add_instrument(spawns)
        try:
            scheduler.request_flush(log)
            await trio.testing.wait_all_tasks_blocked()
            assert scheduler.restructuring(log) and scheduler.in_flight(log)  # the flush waits for the roll
            roll_release.set()
            await scheduler.wait_idle(log)
            assert not scheduler.restructuring(log)
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert spawns.spawned == []
        assert sizes == []  # the roll fsynced everything; the new segment has nothing to flush
        assert log.visible_end == len(SET) and log.segments.starts == (0, len(SET))
        log.append(SET)
        await scheduler.flush(log)  # the flush after the roll's left the log as it should
        assert sizes == [len(SET)] and log.visible_end == 2 * len(SET)
        nursery.cancel_scope.cancel()


async def test_a_flush_waiting_for_a_slot_when_run_ends_is_dropped_and_the_started_ones_finish(monkeypatch):
    async with trio.open_nursery() as nursery:
        scheduler, logs, release, sizes = await _take_every_slot(nursery, monkeypatch)
        logs[-1].append(SET)
        scheduler.request_flush(logs[-1])
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.in_flight(logs[-1])  # waits for a slot
        nursery.cancel_scope.cancel()  # the scheduler stops with every slot's fsync in its thread
        with trio.CancelScope(shield=True):
            await trio.testing.wait_all_tasks_blocked()  # ``run`` has ended what had not started
        release.set()
    assert not scheduler.in_flight(logs[-1]) and logs[-1].visible_end == 0  # dropped: LogManager.close() flushes
    assert len(sizes) == MAX_CONCURRENT_FSYNCS
    assert all(log.visible_end == len(SET) and log.flushing.flush_ticket is None for log in logs[:-1])


@BOTH_WAYS
async def test_a_roll_after_the_scheduler_stopped_still_runs(run_blocking):
    """A roll asked for as the broker stops (its scheduler's ``run`` over) is not left waiting."""
    manager = _manager(FakeFileSystem(seed=1))
    log = manager.get_or_create("t", 0)
    async with trio.open_nursery() as nursery:
        scheduler = await nursery.start(FlushScheduler(manager, run_blocking=run_blocking).run)
        nursery.cancel_scope.cancel()
    log.append(SET)
    with trio.fail_after(10):
        await scheduler.roll_while(log, iter([True, False]).__next__)
    assert log.segments.starts == (0, len(SET)) and log.visible_end == len(SET)
