"""The broker's cleaner service: compaction of topics whose cleanup.policy has ``compact``.

Each of ``log.cleaner.threads`` workers loops: pick the dirtiest compacted log not
being cleaned (dirty ratio at least ``min.cleanable.dirty.ratio``), clean it in a
worker thread (``LogCleaner.clean``), install each cleaned segment on the event
loop as soon as it is swapped, and rest ``log.cleaner.backoff.ms`` when nothing
is dirty enough.  Reads and appends never wait for it; retention of a log waits
while that log is being cleaned.  A failing pass is logged and the log is left
alone until the next look: the broker keeps serving.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import TYPE_CHECKING, Callable, TypeVar

import trio

from trikafka.log.cleaner import CleanerStopped, CleanResult, CompactionPolicy, LogCleaner, parse_cleanup_policy
from trikafka.log.clean_scan import CleanerError
from trikafka.log.fs import FileSystem
from trikafka.log.segment import Segment
from trikafka.log.throttle import Throttler

from .config import BrokerConfig
from .seams import RunBlocking
from .topic_settings import LogOverrides

if TYPE_CHECKING:
    from trikafka.log.manager import LogManager

T = TypeVar("T")

logger = logging.getLogger(__name__)


def compaction_policy(config: BrokerConfig, topic: str, overrides: LogOverrides | None = None) -> CompactionPolicy:
    """The cleaning settings of ``topic``: the topic's ZooKeeper settings (``overrides``,
    docs/protocol.md §12.12.1) first, then the broker's per-topic maps, then its defaults."""
    compact, delete = parse_cleanup_policy(config.topic_cleanup_policy_map.get(topic, config.log_cleanup_policy))
    lag_ms = config.topic_min_compaction_lag_ms_map.get(topic, config.min_compaction_lag_ms)
    tombstone_ms = config.topic_delete_retention_ms_map.get(topic, config.delete_retention_ms)
    if overrides is not None:
        compact = compact if overrides.compact is None else overrides.compact
        delete = delete if overrides.delete is None else overrides.delete
        lag_ms = lag_ms if overrides.min_compaction_lag_ms is None else overrides.min_compaction_lag_ms
        tombstone_ms = tombstone_ms if overrides.delete_retention_ms is None else overrides.delete_retention_ms
    return CompactionPolicy(compact=compact, delete=delete, min_compaction_lag_ms=lag_ms,
                            delete_retention_ms=tombstone_ms,
                            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio)


class CleanerService:
    """Start with ``nursery.start(service.run)``; ``clean_once()`` is one pick-and-clean."""

    def __init__(self, log_manager: LogManager, config: BrokerConfig, fs: FileSystem, clock_ms: Callable[[], int],
                 run_blocking: RunBlocking | None = None):
        self._log_manager = log_manager
        self._config = config
        self._stop = threading.Event()
        self.cleaner = LogCleaner(fs, clock_ms, dedupe_buffer_bytes=config.log_cleaner_dedupe_buffer_size,
                                  throttler=Throttler(config.log_cleaner_io_max_bytes_per_second),
                                  should_stop=self._stop.is_set)
        # None: real worker threads, and segments are installed from them via trio.from_thread.
        self._run_blocking = run_blocking
        self.passes = 0
        self.results: list[CleanResult] = []  # the latest few, for tests and tools
        self.pass_done = trio.Event()  # set (and replaced) after every pass: tests wait on it
        self.overrides: dict[str, LogOverrides] = {}  # topic settings from ZooKeeper (topic_config.py)

    def reconfigure(self, config: BrokerConfig) -> None:
        """The broker's dynamic settings changed (§20.4): policies read ``config`` from now on."""
        self._config = config

    def policy(self, topic: str) -> CompactionPolicy:
        return compaction_policy(self._config, topic, self.overrides.get(topic))

    def deletes(self, topic: str) -> bool:
        """Whether retention (time and size rules) applies to ``topic``."""
        return self.policy(topic).delete

    def stop(self) -> None:
        """Make a pass in progress stop at its next segment or copy (shutdown)."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[CleanerService] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        if not self._config.log_cleaner_enable:
            return
        async with trio.open_nursery() as nursery:
            for _ in range(self._config.log_cleaner_threads):
                nursery.start_soon(self._worker)

    async def _worker(self) -> None:
        while True:
            result = await self.clean_once()
            if result is None:
                await trio.sleep(self._config.log_cleaner_backoff_ms / 1000)

    async def clean_once(self) -> CleanResult | None:
        """Clean the dirtiest eligible log once; None when no log is dirty enough."""
        # Each candidate's pass lease keeps its files while it is weighed (docs/protocol.md §16.4).
        with contextlib.ExitStack() as weighing:
            candidates = []
            for log in self._log_manager.logs():
                if log.cleaning or log.truncation.busy or log.failure is not None or not self.policy(log.topic).compact:
                    continue
                if (weighed := log.passes.take()) is not None:  # None: being deleted
                    weighing.enter_context(weighed)
                    candidates.append(log)
            if not candidates:
                return None
            ratios = await self._blocking(lambda: [self.cleaner.dirty_ratio(log, self.policy(log.topic))
                                                   for log in candidates])
        ratio, log = max(zip(ratios, candidates), key=lambda pair: pair[0])
        # Rechecked on the loop after the wait; the cleaning's own lease is refused for a log
        # being deleted meanwhile.
        if (ratio <= 0 or ratio < self._config.min_cleanable_dirty_ratio or log.cleaning or log.retention.busy
                or log.truncation.busy):
            return None
        lease = log.passes.take()
        if lease is None:
            return None
        log.cleaning = True
        try:
            if self._run_blocking is None:
                def install(segment: Segment) -> bool:  # the cleaning thread swaps on the loop
                    return trio.from_thread.run_sync(log.install_cleaned, segment)

                clean = functools.partial(self.cleaner.clean, log, self.policy(log.topic), install)
                result = await trio.to_thread.run_sync(clean)
            else:
                result = await self._run_blocking(
                    functools.partial(self.cleaner.clean, log, self.policy(log.topic), log.install_cleaned))
        except CleanerStopped:
            return None
        except (CleanerError, OSError) as exc:
            logger.error("cleaning %s-%d failed, left as it is: %s", log.topic, log.partition, exc)
            return None
        finally:
            log.cleaning = False
            lease.release()
            self.passes += 1
            self.pass_done.set()
            self.pass_done = trio.Event()
        logger.info("cleaned %s-%d: %d segment(s) rewritten, %d bytes newly padded, dirty ratio was %.2f",
                    log.topic, log.partition, len(result.segments), result.padded_bytes, ratio)
        self.results = (self.results + [result])[-16:]
        return result

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await (self._run_blocking or trio.to_thread.run_sync)(fn)
