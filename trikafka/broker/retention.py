"""The retention deleter (spec §7.4): every ``log.cleanup.interval.mins``, first run after 60 s.

Each run applies the time and size rules to every log, one log at a time, as
a retention ticket (``trikafka.log.retention``) whose blocking parts run off
the loop: the segments' stats, then (after the segments left the log) their
unlinks and directory fsyncs.  When the rules would delete every segment, the
log is rolled first through the flush scheduler, so the roll's fsyncs are off
the loop too and never race a flush ticket.  A flush never captures a segment
that retention removes: retention never removes the last segment.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Callable

import trio

from trikafka.log.log import Log
from trikafka.log.passes import Lease

from .seams import RunBlocking

if TYPE_CHECKING:
    from trikafka.log.manager import LogManager

    from .flusher import FlushScheduler

logger = logging.getLogger(__name__)


class RetentionDeleter:
    """Start with ``nursery.start(deleter.run)``; ``run_once()`` is one cleanup pass."""

    def __init__(self, log_manager: LogManager, flusher: FlushScheduler, *, interval_s: float, first_run_delay_s: float,
                 clock_ms: Callable[[], int], deletes: Callable[[str], bool] = lambda topic: True,
                 run_blocking: RunBlocking = trio.to_thread.run_sync):
        self._log_manager = log_manager
        self._flusher = flusher
        self._interval_s = interval_s
        self._first_run_delay_s = first_run_delay_s
        self._clock_ms = clock_ms
        self._deletes = deletes  # False for compact-only topics (cleanup.policy without delete)
        self._run_blocking = run_blocking
        self.runs = 0
        self.segments_deleted = 0

    async def run(self, *, task_status: trio.TaskStatus[RetentionDeleter] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        next_run = trio.current_time() + self._first_run_delay_s
        while True:
            await trio.sleep_until(next_run)
            await self.run_once()
            next_run += self._interval_s

    async def run_once(self) -> int:
        """Apply retention to every log now; returns the number of segments deleted."""
        deleted = 0
        for log in list(self._log_manager.logs()):
            if not self._deletes(log.topic) or log.cleaning or log.truncation.busy:
                continue  # compact-only; or being cleaned or truncated (segments change): next pass
            lease = log.passes.take()
            if lease is None:
                continue  # deleted while an earlier log's pass awaited (or shut down)
            with lease:
                count = await self.apply(log, lease)
            if count:
                logger.info("retention deleted %d segment(s) of %s-%d", count, log.topic, log.partition)
            deleted += count
        self.runs += 1
        self.segments_deleted += deleted
        return deleted

    async def apply(self, log: Log, lease: Lease) -> int:
        """One retention pass over ``log``, which ``lease`` holds (docs/protocol.md §16.4); its I/O runs
        through ``run_blocking``.

        Shielded: a pass that started finishes, so the log never keeps a
        dangling ticket, and segments that left the log are always unlinked.
        """
        with trio.CancelScope(shield=True):
            ticket = log.retention.begin(self._clock_ms())
            await self._run_blocking(ticket.stat)
            await self._flusher.roll_while(log, functools.partial(log.retention.needs_roll, ticket), under=lease)
            count = log.retention.drop(ticket)
            if count or ticket.touch_path is not None or ticket.error is not None:
                await self._run_blocking(ticket.remove)
            log.retention.complete(ticket)
        return count
