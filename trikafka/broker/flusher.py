"""The flush scheduler (docs/protocol.md §7.2): fsync off the event loop, visibility after it.

Three things ask for a flush of a log:

* the message-count rule: an append returns ``flush_due`` once
  ``log.flush.interval`` messages are unflushed;
* the deadline: a log's first append that no flush has captured yet starts a
  wait of its flush interval (``topic.flush.intervals.ms``, else
  ``log.default.flush.interval.ms``, which defaults to
  ``log.default.flush.scheduler.interval.ms``); the log is flushed when it
  ends.  The flush starts a little before the deadline, by the lead it
  needs to *finish* by then: the fsync time plus the loop's wake-up
  lateness, each estimated on Trio's clock as TCP estimates a round trip
  (RFC 6298: a moving mean plus a multiple of the moving mean deviation, so
  the slow cases are covered too), never more than half the interval.  So a
  message is visible about its interval after it arrived, not an interval
  plus one fsync plus a late wake-up.  An idle broker does nothing: the
  scheduler sleeps until the earliest deadline (a heap with at most one
  entry per log) and is woken only when an append
  brings a nearer one (``Log.add_dirty_listener``).  This is the one
  flush-age rule, on Trio's clock: intervals are durations, and tests drive
  them with a mock clock;
* acknowledged produces with acks=-1, which need their bytes visible.

Rolls (§7.2) go through here too: before an append, ``roll_if_due``
rolls the log when it must, with the old segment's fsync in a worker thread
(``Flushing.begin_roll`` / ``RollTicket.run`` / ``Flushing.complete_roll``); appends to
that log wait for it, appends to other logs go on.  The partition that
appends (``partition.LocalPartition``) asks only when its bounds say a roll
may be due, or one is in flight (``restructuring``).

A flush captures the unflushed size (``Flushing.begin_flush``), runs ``fsync``
off the event loop while the loop keeps appending, then advances the visible
end to the *captured* size (``Flushing.complete_flush``), never further: bytes
appended during the fsync wait for the next flush.  At most one flush per log
is in flight; requests that arrive meanwhile coalesce into one more flush
after it (group commit).  A flush runs one way, and not as a task of its own,
nor with a task step of its own to start it: the flushes asked for start when
the loop's current round of task steps has ended, before it next waits for
I/O (a Trio instrument's ``before_io_wait``), so what any task appends in
the round of the first request (every connection woken by the same poll, a
connection's pipelined requests) is in the same flush.  A flush asked for during a roll
(or truncation) of its log starts when that ends; one that finds every slot
taken (``MAX_CONCURRENT_FSYNCS`` blocking calls at once, flushes, rolls and
truncations alike) starts when a slot is handed to it, in the order asked.
Every blocking call of the scheduler leaves the loop through one seam, "start
this call and call me back on the loop" (``StartBlocking``): a worker thread
whose result comes back as a ``run_sync_soon`` callback (the broker: the
acks -1 answer that waits for a flush costs no task spawn and no task switch
after the fsync), or, for a test double's ``run_blocking`` (an in-memory fs
with a mock clock: ``trikafka.testing``, the simulation), a shielded task
that awaits the double and calls back.  Everything else (the capture, the
pass lease of docs/protocol.md §16.4, the completion, the coalesced flush
after it) is the same code whichever runs the call.  A flush that started
always finishes and the log never keeps a dangling ticket: its call cannot
be abandoned, and ``run`` waits for it before it returns; one asked for and
not started when ``run`` ends is dropped (``LogManager.close()`` flushes).
An fsync error is raised by ``run`` and brings the broker down (0.7 halts on
I/O errors).
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import logging
import math
import time
from typing import Any, Callable, TypeVar

import trio

from trikafka.log.flushing import FlushTicket
from trikafka.log.passes import Lease

from .seams import BrokerLog, LogDirectory, RunBlocking

logger = logging.getLogger(__name__)

T = TypeVar("T")
# What a blocking call off the loop hands back: returns its value or raises its error.
Unwrap = Callable[[], Any]
# The seam by which the scheduler's blocking calls leave the loop: ``start(fn, done)`` starts
# ``fn()`` and returns; ``done(unwrap)`` is called on the loop once ``fn`` returned, never
# before ``start`` returned.
StartBlocking = Callable[[Callable[[], Any], Callable[[Unwrap], None]], None]

# fsyncs of different logs may overlap; more threads than this only queue in the kernel.
MAX_CONCURRENT_FSYNCS = 8
# The estimators behind a flush's lead (RFC 6298's gains): weight of the newest
# sample in the mean and in the mean deviation, and how many deviations to add.
LEAD_MEAN_GAIN = 1 / 8
LEAD_DEVIATION_GAIN = 1 / 4
LEAD_DEVIATIONS = 4


class FlushScheduler:
    """Schedules and runs log flushes; start with ``nursery.start(scheduler.run)``."""

    def __init__(self, log_manager: LogDirectory, *, run_blocking: RunBlocking | None = None,
                 observe_flush_s: Callable[[float], None] | None = None):
        self._log_manager = log_manager
        # The one seam by which a blocking call leaves the loop (``StartBlocking``): a worker
        # thread, or a test double's ``run_blocking`` (a mock clock and an in-memory fs) in a task.
        self._start_blocking: StartBlocking = (
            _start_in_thread if run_blocking is None else functools.partial(self._start_in_task, run_blocking))
        self._running = False  # while ``run`` runs: flushes are started
        self._failure: BaseException | None = None  # a flush's error, raised by ``run``
        # A log is in _in_flight from its flush's request until the flush ended: first asked for
        # (in _to_start, for ``_start_flushes``), then maybe waiting for a roll (_after_roll) or
        # for an fsync slot (_slots), then started (_started) until its completion.
        self._in_flight: dict[BrokerLog, trio.Event] = {}
        self._to_start: list[BrokerLog] = []
        self._round_end = _RoundEnd(self._start_flushes)  # installed while ``run`` runs
        self._token: trio.lowlevel.TrioToken | None = None
        self._after_roll: set[BrokerLog] = set()
        self._started: set[BrokerLog] = set()
        self._again: set[BrokerLog] = set()  # asked for again while in flight: one more flush after it
        self._slots = _Slots(MAX_CONCURRENT_FSYNCS)
        self._rolls: dict[BrokerLog, trio.Event] = {}  # logs with a roll (or truncation) in flight
        self._idle: dict[BrokerLog, trio.Event] = {}  # truncations waiting for a log to be idle
        self._idle_listening: set[BrokerLog] = set()  # logs whose idle listener is ours
        self._nursery: trio.Nursery | None = None
        # The deadline rule: when each log's unflushed wait began, and a heap of
        # (deadline, tie-breaker, log) with at most one entry per log (_queued).
        self._dirty_since: dict[BrokerLog, float] = {}
        self._deadlines: list[tuple[float, int, BrokerLog]] = []
        self._queued: set[BrokerLog] = set()
        self._ties = itertools.count()
        self._sleep: trio.CancelScope | None = None
        # How long an fsync takes and how late the loop wakes for a deadline
        # (epoll rounds its timeout up to a whole millisecond), in Trio seconds:
        # a flush starts early by the sum of their estimates (lead_s).
        self._fsync_s = _Estimate()
        self._wake_late_s = _Estimate()
        self.flushes_completed = 0
        self._observe_flush_s = observe_flush_s or (lambda seconds: None)  # metrics: each flush's fsync time
        self.wakeups = 0  # times the deadline loop woke up (an idle broker: none)

    async def run(self, *, task_status: trio.TaskStatus[FlushScheduler] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush logs at their deadlines and host the flushes until cancelled; raises a threaded
        flush's error."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._running = True
            self._token = trio.lowlevel.current_trio_token()
            trio.lowlevel.add_instrument(self._round_end)
            try:
                task_status.started(self)
                while True:
                    with trio.CancelScope(deadline=self._deadlines[0][0] if self._deadlines else math.inf) as sleep:
                        self._sleep = sleep
                        await trio.sleep_forever()
                    self._sleep = None
                    if self._failure is not None:
                        failure, self._failure = self._failure, None
                        raise failure
                    self.wakeups += 1
                    now_s = trio.current_time()
                    if sleep.cancelled_caught:  # woken by the deadline, not by an earlier one set meanwhile
                        self._wake_late_s.add(max(0.0, now_s - sleep.deadline))
                    self._flush_due_logs(now_s)
            finally:
                trio.lowlevel.remove_instrument(self._round_end)
                self._running = False
                self._sleep = None
                for log in [log for log in self._in_flight if log not in self._started]:
                    self._in_flight.pop(log).set()  # asked for, never started: LogManager.close() flushes
                self._to_start, self._after_roll = [], set()
                # A flush that started always finishes (its ticket is handed back).
                with trio.CancelScope(shield=True):
                    for done in list(self._in_flight.values()):
                        await done.wait()
                self._nursery = None
                if self._failure is not None:  # a flush that failed as the scheduler stopped
                    raise self._failure

    def _flush_due_logs(self, now_s: float) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_s:
            _, _, log = heapq.heappop(deadlines)
            since_s = self._dirty_since.get(log)
            if since_s is not None:
                deadline_s = self._deadline_s(log, since_s)
                if deadline_s > now_s:  # flushed and dirtied again since this entry was pushed
                    heapq.heappush(deadlines, (deadline_s, next(self._ties), log))
                    continue
                self.request_flush(log)
            self._queued.discard(log)

    def track(self, log: BrokerLog) -> None:
        """Apply the deadline rule to ``log`` (once per log: loaded or created)."""
        log.add_dirty_listener(self._on_dirty)

    def _on_dirty(self, log: BrokerLog) -> None:
        """The first append no flush has captured: ``log``'s interval starts now."""
        now_s = trio.current_time()
        self._dirty_since[log] = now_s
        if log in self._queued:
            return  # its entry is due no later than this deadline; it re-queues itself
        self._queued.add(log)
        deadline_s = self._deadline_s(log, now_s)
        heapq.heappush(self._deadlines, (deadline_s, next(self._ties), log))
        if self._sleep is not None and deadline_s < self._sleep.deadline:
            self._sleep.deadline = deadline_s  # wake earlier; otherwise no wakeup at all

    def _deadline_s(self, log: BrokerLog, dirty_since_s: float) -> float:
        """When a flush of ``log``, dirty since ``dirty_since_s``, must start to end within its interval."""
        interval_s = log.config.flush_interval_ms / 1000
        return dirty_since_s + interval_s - min(self.lead_s, interval_s / 2)

    @property
    def lead_s(self) -> float:
        """How much earlier than its interval a deadline flush starts now (before the half-interval cap)."""
        return self._fsync_s.bound + self._wake_late_s.bound

    def request_flush(self, log: BrokerLog) -> None:
        """Ask for a flush of ``log`` soon; never blocks, coalesces with one in flight."""
        if log in self._in_flight:
            self._again.add(log)
            return
        if not self._running:
            return  # not running (shutdown): LogManager.close() flushes everything
        self._in_flight[log] = trio.Event()
        self._to_start.append(log)  # started by ``_start_flushes`` at the end of this round of steps

    def _start_flushes(self, timeout_s: float) -> None:
        """Start the flushes asked for (the loop's ``before_io_wait``, outside any task: what any task
        appended in this round of steps is in them), the loop about to wait up to ``timeout_s``.

        Trio chose ``timeout_s`` before this hook, so whatever wakes a task here must also wake the
        loop's I/O wait, or the woken task would wait for it.  A flush whose fsync started in a
        worker thread wakes nothing; anything else here (a flush with nothing to flush, a failure,
        a test double's task) may: then the loop is woken by a ``run_sync_soon`` that does nothing.
        """
        woke = False
        try:
            while self._to_start:
                to_start, self._to_start = self._to_start, []
                for log in to_start:
                    self._start(log)
                    woke = woke or not (log in self._started and self._start_blocking is _start_in_thread)
        except BaseException as exc:  # e.g. no thread could start: the broker goes down, through ``run``
            self._fail(exc)
            woke = True
        if woke and timeout_s > 0 and self._token is not None:
            self._token.run_sync_soon(_nothing)

    def _start(self, log: BrokerLog) -> None:
        """Start the flush of ``log`` asked for: now, or when the roll in flight ends (``_roll_ended``)
        or an fsync slot is handed to it."""
        if not self._running:
            return  # dropped (set done) when ``run`` ended
        if log in self._rolls:
            self._after_roll.add(log)  # a roll fsyncs the old segment; then flush the new one
            return
        self._slots.acquire(functools.partial(self._start_fsync, log))

    def _start_fsync(self, log: BrokerLog) -> None:
        """Start the flush of ``log``, holding an fsync slot: capture the unflushed size and start
        its fsync, completed by a callback on the loop."""
        if not self._running:  # ``run`` ended while this waited for the slot: dropped
            self._slots.release()
            return
        # No lease: the log is being deleted (its pending deadline outlives it) or was shut down
        # (LogManager.close() flushed it): nothing to flush.
        lease = log.passes.take()
        self._dirty_since.pop(log, None)  # the capture covers everything appended so far
        if lease is None:
            self._slots.release()
            self._flush_ended(log)
            return
        try:
            ticket = log.flushing.begin_flush()
        except BaseException as exc:  # the log refuses a flush (failed, busy): the broker goes down
            self._slots.release()
            lease.release()
            self._in_flight.pop(log).set()
            self._fail(exc)
            return
        if ticket is None:  # nothing unflushed
            self._slots.release()
            lease.release()
            self._flush_ended(log)
            return
        self._started.add(log)
        started_s, started_trio_s = time.perf_counter(), trio.current_time()

        def finish(unwrap: Unwrap) -> None:  # on the loop, once the fsync returned
            self._slots.release()
            self._started.discard(log)
            try:
                with lease:
                    unwrap()
                    self._flushed(log, ticket, started_s, started_trio_s)
            except BaseException as exc:  # an fsync error brings the broker down, through ``run``
                self._in_flight.pop(log).set()
                self._fail(exc)
                return
            self._flush_ended(log)

        self._start_blocking(ticket.fsync, finish)

    def _flush_ended(self, log: BrokerLog) -> None:
        """A flush of ``log`` ended: flush again if asked meanwhile, else wake its waiters."""
        if log in self._again and self._running:
            self._again.discard(log)
            self._start(log)
            return
        self._again.discard(log)
        self._in_flight.pop(log).set()

    def _roll_ended(self, log: BrokerLog) -> None:
        """A roll or truncation of ``log`` ended: start the flush that waited for it."""
        if log in self._after_roll:
            self._after_roll.discard(log)
            self._start(log)

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        if self._sleep is not None:
            self._sleep.cancel()

    async def flush(self, log: BrokerLog) -> None:
        """Request a flush of ``log`` and wait until it (and any coalesced one) is done."""
        self.request_flush(log)
        await self.wait_idle(log)

    async def wait_idle(self, log: BrokerLog) -> None:
        """Return once no flush of ``log`` is in flight (callers then act without a checkpoint)."""
        await trio.lowlevel.checkpoint()
        while (done := self._in_flight.get(log)) is not None:
            await done.wait()

    def in_flight(self, log: BrokerLog) -> bool:
        return log in self._in_flight

    @property
    def log_clock_ms(self) -> Callable[[], int]:
        """The clock the logs' age rule reads (the log manager's): ``LocalPartition``'s roll bounds."""
        return self._log_manager.clock_ms

    def restructuring(self, log: BrokerLog) -> bool:
        """Whether a roll or truncation of ``log`` is in flight (appends must wait: ``roll_if_due``)."""
        return log in self._rolls

    async def roll_if_due(self, log: BrokerLog) -> None:
        """Roll ``log`` off the event loop if its next append must roll (§7.2).

        Returns without a checkpoint once no roll is due or in flight, so the
        caller's append that follows cannot race another roll.  (Should the
        age rule turn due in between, the append does not roll on the loop:
        the broker's logs have ``roll_on_append=False``.)
        """
        await self.roll_while(log, log.roll_due)

    async def roll_while(self, log: BrokerLog, due: Callable[[], bool], *, under: Lease | None = None) -> None:
        """Roll ``log`` off the event loop while ``due()`` says so (retention asks too).

        Returns without a checkpoint after ``due()`` said no, or once ``log`` is
        retired (being deleted: no roll), unless the caller's pass holds its lease
        ``under`` (docs/protocol.md §16.4).  A roll waits for a flush in flight
        (one ticket per log); the roll itself is shielded, like a flush, so the
        log never keeps a dangling ticket.
        """
        while True:
            rolling = self._rolls.get(log)
            if rolling is not None:
                await rolling.wait()
                continue
            if not due():
                return
            flushing = self._in_flight.get(log)
            if flushing is not None or log.flush_in_flight:
                if flushing is None:  # a flush outside the scheduler (shutdown, tools)
                    await trio.lowlevel.checkpoint()
                else:
                    await flushing.wait()
                continue
            lease = log.passes.take(under)
            if lease is None:
                return
            with lease:
                ticket = log.flushing.begin_roll()
                self._dirty_since.pop(log, None)  # the roll fsyncs everything appended so far
                if ticket is None:
                    return
                done = self._rolls[log] = trio.Event()
                try:
                    with trio.CancelScope(shield=True):
                        await self._off_loop(ticket.run)
                        log.flushing.complete_roll(ticket)
                finally:
                    del self._rolls[log]
                    done.set()
                    self._roll_ended(log)

    async def truncate(self, log: BrokerLog, offset: int) -> None:
        """Cut ``log`` at the message boundary ``offset``, its blocking part off the loop.

        A follower's truncation by leader epoch (docs/protocol.md §12.4.3).  It
        waits for a flush or roll in flight, and flushes and rolls wait for it
        (it holds the same one-structural-change-per-log slot as a roll).  A log
        being deleted (retired, §16.4) is not cut.
        """
        while True:
            busy = self._rolls.get(log) or self._in_flight.get(log)
            if busy is not None:
                await busy.wait()
                continue
            if log.flush_in_flight:  # a flush outside the scheduler (shutdown, tools)
                await trio.lowlevel.checkpoint()
                continue
            lease = log.passes.take()
            if lease is None:
                return
            ticket = log.truncation.begin(offset)
            if ticket is not None:
                break
            lease.release()
            # A retention pass or a cleaning holds the log: the log says when it is idle.
            if log not in self._idle_listening:
                self._idle_listening.add(log)
                log.add_idle_listener(self._on_idle)
            idle = self._idle.setdefault(log, trio.Event())
            await idle.wait()
        done = self._rolls[log] = trio.Event()
        try:
            with lease, trio.CancelScope(shield=True):
                try:
                    await self._off_loop(ticket.run)
                finally:
                    log.truncation.complete(ticket)
        finally:
            del self._rolls[log]
            done.set()
            self._roll_ended(log)

    def _on_idle(self, log: BrokerLog) -> None:
        idle = self._idle.pop(log, None)
        if idle is not None:
            idle.set()

    # KeyboardInterrupt cannot land between the call's start and the wait for its result,
    # where it would leave the result to a task that no longer waits for it.
    @trio.lowlevel.enable_ki_protection
    async def _off_loop(self, fn: Callable[[], T]) -> T:
        """``fn()`` off the loop (``_start_blocking``), holding an fsync slot: a roll's or a truncation's.

        The call cannot be abandoned: a cancelled caller still waits for a slot and for ``fn``
        to return.
        """
        task = trio.lowlevel.current_task()
        returned: list[Callable[[], T]] = []

        def done(unwrap: Callable[[], T]) -> None:  # on the loop
            self._slots.release()
            returned.append(unwrap)
            trio.lowlevel.reschedule(task)

        # ``_start_blocking`` never calls back before it returned, so not before this task parks.
        self._slots.acquire(functools.partial(self._start_blocking, fn, done))
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return returned[0]()

    def _start_in_task(self, run_blocking: RunBlocking, fn: Callable[[], Any], done: Callable[[Unwrap], None]) -> None:
        """The ``StartBlocking`` of a test double's ``run_blocking``: await it in a task of ``run``'s
        nursery (a system task's when it does not run: a roll as the broker stops), shielded as a
        worker thread cannot be cancelled, then call back."""

        async def call() -> None:
            with trio.CancelScope(shield=True):
                try:
                    value = await run_blocking(fn)
                except BaseException as exc:  # handed over: ``unwrap()`` raises it where the result is used
                    done(functools.partial(_reraise, exc))
                    return
            done(lambda: value)

        if self._nursery is not None:
            self._nursery.start_soon(call)
        else:
            trio.lowlevel.spawn_system_task(call)

    def _flushed(self, log: BrokerLog, ticket: FlushTicket, started_s: float, started_trio_s: float) -> None:
        """``ticket``'s fsync returned: make what it covered visible (raises its error)."""
        self._observe_flush_s(time.perf_counter() - started_s)
        self._fsync_s.add(trio.current_time() - started_trio_s)
        log.flushing.complete_flush(ticket)
        self.flushes_completed += 1


def _start_in_thread(fn: Callable[[], Any], done: Callable[[Unwrap], None]) -> None:
    """The broker's ``StartBlocking``: ``fn()`` in one of Trio's cached worker threads, ``done``
    as a ``run_sync_soon`` callback.

    ``trio.to_thread.run_sync`` without what an fsync does not use (a task parked for the result,
    a copy of the context, a thread name set and reset around each call, a checkpoint before the
    thread starts): every flush of an acks -1 answer pays for this hop.
    """
    token = trio.lowlevel.current_trio_token()

    def deliver(result: Any) -> None:  # in the worker thread (Any: trio's outcome.Outcome of fn())
        token.run_sync_soon(done, result.unwrap)

    trio.lowlevel.start_thread_soon(fn, deliver)


def _reraise(exc: BaseException) -> Any:
    raise exc


def _nothing() -> None:
    """A ``run_sync_soon`` callback whose only effect is to end the loop's I/O wait."""


class _RoundEnd(trio.abc.Instrument):
    """Calls ``hook(timeout_s)`` each time the loop has run its runnable tasks and is about to wait
    for I/O (for up to ``timeout_s``; 0 while a task is runnable)."""

    __slots__ = ("_hook",)

    def __init__(self, hook: Callable[[float], None]):
        self._hook = hook

    def before_io_wait(self, timeout: float) -> None:
        self._hook(timeout)


class _Slots:
    """At most ``count`` blocking calls off the loop at once; calls that find none free get one
    in the order they asked.  Invariant: a call waits only while no slot is free (or while a
    release hands them out)."""

    __slots__ = ("_free", "_waiting", "_handing_out")

    def __init__(self, count: int):
        self._free = count
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()
        self._handing_out = False

    def acquire(self, then: Callable[[], None]) -> None:
        """Call ``then()`` holding a slot: now if one is free, else once one is handed to it.
        ``then`` gives the slot back with ``release``."""
        if self._free and not self._waiting:
            self._free -= 1
            then()
            return
        self._waiting.append(then)
        self._hand_out()

    def release(self) -> None:
        """Give a slot back: to the first call waiting, if any."""
        self._free += 1
        if self._waiting:
            self._hand_out()

    def _hand_out(self) -> None:
        # A loop, not recursion: a ``then`` may release at once (nothing to flush) or acquire
        # again (a coalesced flush), however many calls wait.
        if self._handing_out:
            return
        self._handing_out = True
        try:
            while self._free and self._waiting:
                self._free -= 1
                self._waiting.popleft()()
        finally:
            self._handing_out = False


class _Estimate:
    """A duration estimated from samples the way RFC 6298 estimates a round trip."""

    __slots__ = ("mean", "deviation", "samples")

    def __init__(self) -> None:
        self.mean = self.deviation = 0.0
        self.samples = 0

    def add(self, sample: float) -> None:
        self.samples += 1
        if self.samples == 1:  # the first sample is the mean (the deviation grows from what follows)
            self.mean = sample
            return
        self.deviation += LEAD_DEVIATION_GAIN * (abs(sample - self.mean) - self.deviation)
        self.mean += LEAD_MEAN_GAIN * (sample - self.mean)

    @property
    def bound(self) -> float:
        """A duration that few samples exceed: the mean plus a few mean deviations."""
        return self.mean + LEAD_DEVIATIONS * self.deviation
