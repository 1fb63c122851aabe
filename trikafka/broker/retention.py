"""The retention deleter (spec §10.6): every ``log.cleanup.interval.mins``, first run after 60 s.

Each run applies the time and size rules to every log (``Log.apply_retention``).
A log's retention waits until no flush of that log is in flight and then runs
without a checkpoint, so a flush never captures a segment that retention is
removing, and a roll done by retention never races a flush ticket.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import trio

logger = logging.getLogger(__name__)


class RetentionDeleter:
    """Start with ``nursery.start(deleter.run)``; ``run_once()`` is one cleanup pass."""

    def __init__(self, log_manager: Any, flusher: Any, *, interval_s: float, first_run_delay_s: float,
                 clock_ms: Callable[[], int], deletes: Callable[[str], bool] = lambda topic: True):
        self._log_manager = log_manager
        self._flusher = flusher
        self._interval_s = interval_s
        self._first_run_delay_s = first_run_delay_s
        self._clock_ms = clock_ms
        self._deletes = deletes  # False for compact-only topics (cleanup.policy without delete)
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
            if not self._deletes(log.topic):
                continue
            await self._flusher.wait_idle(log)
            count = log.apply_retention(self._clock_ms())  # no checkpoint since wait_idle
            if count:
                logger.info("retention deleted %d segment(s) of %s-%d", count, log.topic, log.partition)
            deleted += count
        self.runs += 1
        self.segments_deleted += deleted
        return deleted
