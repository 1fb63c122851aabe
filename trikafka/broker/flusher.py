"""The flush scheduler (spec §10.4): fsync off the event loop, visibility after it.

Three things ask for a flush of a log:

* the message-count rule: an append returns ``flush_due`` once
  ``log.flush.interval`` messages are unflushed;
* the timer: every ``log.default.flush.scheduler.interval.ms``, any log whose
  last flush is at least its interval old (``topic.flush.intervals.ms`` or
  ``log.default.flush.interval.ms``) is flushed;
* acknowledged produces with acks=-1, which need their bytes visible.

Rolls (spec §10.3) go through here too: before an append, ``roll_if_due``
rolls the log when it must, with the old segment's fsync in a worker thread
(``Log.begin_roll`` / ``RollTicket.run`` / ``Log.complete_roll``); appends to
that log wait for it, appends to other logs go on.

A flush captures the unflushed size (``Log.begin_flush``), runs ``fsync`` in a
worker thread while the event loop keeps appending, then advances the visible
end to the *captured* size (``Log.complete_flush``), never further: bytes
appended during the fsync wait for the next flush.  At most one flush per log
is in flight; requests that arrive meanwhile coalesce into one more flush
after it (group commit).  The fsync+complete step is shielded from
cancellation, so a flush that started always finishes and the log never keeps
a dangling ticket.  An fsync error propagates and brings the broker down
(0.7 halts on I/O errors; spec §10.4, anchors A3).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable

import trio
import trio_util

logger = logging.getLogger(__name__)

# fsyncs of different logs may overlap; more threads than this only queue in the kernel.
MAX_CONCURRENT_FSYNCS = 8


class FlushScheduler:
    """Schedules and runs log flushes; start with ``nursery.start(scheduler.run)``."""

    def __init__(self, log_manager: Any, *, scheduler_interval_ms: int,
                 run_blocking: Callable[..., Awaitable[Any]] | None = None,
                 observe_flush_s: Callable[[float], None] | None = None):
        self._log_manager = log_manager
        self._scheduler_interval_s = scheduler_interval_ms / 1000
        # How a blocking call leaves the loop: a worker thread, or (tests with
        # a mock clock and an in-memory fs) an inline call the clock can see.
        self._run_blocking = run_blocking or self._in_thread
        self._in_flight: dict[Any, trio.Event] = {}
        self._again: set[Any] = set()
        self._last_flush_s: dict[Any, float] = {}
        self._limiter = trio.CapacityLimiter(MAX_CONCURRENT_FSYNCS)
        self._rolls: dict[Any, trio.Event] = {}  # logs with a roll in flight
        self._nursery: trio.Nursery | None = None
        self.flushes_completed = 0
        self._observe_flush_s = observe_flush_s or (lambda seconds: None)  # metrics: each flush's fsync time

    async def run(self, *, task_status: trio.TaskStatus[FlushScheduler] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the timer and host the flush tasks until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            started_s = trio.current_time()
            for log in self._log_manager.logs():
                self._last_flush_s.setdefault(log, started_s)
            task_status.started(self)
            try:
                async for _ in trio_util.periodic(self._scheduler_interval_s):
                    self._flush_stale_logs()
            finally:
                self._nursery = None

    def _flush_stale_logs(self) -> None:
        now_s = trio.current_time()
        for log in self._log_manager.logs():
            last_s = self._last_flush_s.setdefault(log, now_s)
            if log.end_offset == log.visible_end:
                continue  # nothing unflushed: 0.7's flush would do nothing either
            # Trio time, not the log's wall clock: intervals are durations, and
            # tests drive them with a mock clock.
            if (now_s - last_s) * 1000 >= log.config.flush_interval_ms:
                self.request_flush(log)

    def track(self, log: Any) -> None:
        """Start the flush-interval clock of a new ``log`` now (0.7 starts it when the log is created)."""
        self._last_flush_s.setdefault(log, trio.current_time())

    def request_flush(self, log: Any) -> None:
        """Ask for a flush of ``log`` soon; never blocks, coalesces with one in flight."""
        if log in self._in_flight:
            self._again.add(log)
            return
        nursery = self._nursery
        if nursery is None:
            return  # not running (shutdown): LogManager.close() flushes everything
        self._in_flight[log] = trio.Event()
        nursery.start_soon(self._flush_log, log)

    async def flush(self, log: Any) -> None:
        """Request a flush of ``log`` and wait until it (and any coalesced one) is done."""
        self.request_flush(log)
        await self.wait_idle(log)

    async def wait_idle(self, log: Any) -> None:
        """Return once no flush of ``log`` is in flight (callers then act without a checkpoint)."""
        await trio.lowlevel.checkpoint()
        while (done := self._in_flight.get(log)) is not None:
            await done.wait()

    def in_flight(self, log: Any) -> bool:
        return log in self._in_flight

    async def roll_if_due(self, log: Any) -> None:
        """Roll ``log`` off the event loop if its next append must roll (§10.3).

        Returns without a checkpoint once no roll is due or in flight, so the
        caller's append that follows cannot race another roll.  A roll waits
        for a flush in flight (one ticket per log); the roll itself is
        shielded, like a flush, so the log never keeps a dangling ticket.
        """
        while True:
            rolling = self._rolls.get(log)
            if rolling is not None:
                await rolling.wait()
                continue
            if not log.roll_due():
                return
            flushing = self._in_flight.get(log)
            if flushing is not None or log.flush_in_flight:
                if flushing is None:  # a flush outside the scheduler (shutdown, tools)
                    await trio.lowlevel.checkpoint()
                else:
                    await flushing.wait()
                continue
            ticket = log.begin_roll()
            if ticket is None:
                return
            done = self._rolls[log] = trio.Event()
            try:
                with trio.CancelScope(shield=True):
                    await self._run_blocking(ticket.run)
                    log.complete_roll(ticket)
            finally:
                del self._rolls[log]
                done.set()

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        return await trio.to_thread.run_sync(fn, limiter=self._limiter)

    async def _flush_log(self, log: Any) -> None:
        done = self._in_flight[log]
        try:
            with trio.CancelScope(shield=True):
                while True:
                    self._again.discard(log)
                    await self._flush_once(log)
                    if log not in self._again:
                        break
        finally:
            del self._in_flight[log]
            done.set()

    async def _flush_once(self, log: Any) -> None:
        while (rolling := self._rolls.get(log)) is not None:
            await rolling.wait()  # a roll fsyncs the old segment; then flush the new one
        self._last_flush_s[log] = trio.current_time()
        ticket = log.begin_flush()
        if ticket is None:
            return  # nothing unflushed
        started_s = time.perf_counter()
        await self._run_blocking(ticket.fsync)
        self._observe_flush_s(time.perf_counter() - started_s)
        log.complete_flush(ticket)
        self.flushes_completed += 1
