"""The directory of logs: startup recovery, topic creation, clean shutdown (spec §7.1, §7.3).

Startup order, each step durable before the next:

1. if ``<log_dir>/.kafka_cleanshutdown`` exists, remove it and fsync
   ``log_dir``, before anything else is written (a crash after this point must
   recover, so the marker must not come back);
2. load every ``<topic>-<partition>`` directory, scanning the newest segment
   of each when the marker was absent.

Clean shutdown is the reverse: flush every log, close it, then create the
marker, fsync it and fsync ``log_dir``.  A failed log blocks the marker.

Creating a log blocks (mkdir, its format file, segment 0, directory fsyncs), so it comes
in two halves: ``make_log`` (any thread) and ``add`` (the loop's thread);
``get_or_create`` runs both on the caller's thread.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Mapping

from .clock import wall_clock_ms
from .config import LogConfig
from .errors import LogClosedError, LogError, LogLoadError, WrongPartitionError
from .fs import FileSystem, OsFileSystem
from .log import Log
from .names import BROKER_FILES, CLEAN_SHUTDOWN_MARKER, parse_partition_dir_name, partition_dir_name, validate_topic
from .record_format import FORMAT_V2, record_format, write_record_format

logger = logging.getLogger("trikafka.log")


class LogManager:
    """Every log under ``log_dir``; ``open()`` must run before anything else."""

    def __init__(self, log_dir: str, config: LogConfig | None = None, fs: FileSystem | None = None,
                 clock_ms: Callable[[], int] = wall_clock_ms,
                 topic_configs: Mapping[str, LogConfig] | None = None,
                 partitions: Callable[[str], int] | int = 1, roll_on_append: bool = True):
        self.log_dir = log_dir
        self.config = config if config is not None else LogConfig()
        self.fs: FileSystem = fs if fs is not None else OsFileSystem()
        self.clock_ms = clock_ms
        self._topic_configs = dict(topic_configs or {})
        self._built_topic_configs = dict(self._topic_configs)  # what override_topic_config(t, None) restores
        self._partitions = partitions
        self._logs: dict[tuple[str, int], Log] = {}
        self._topic_logs: dict[str, int] = {}  # topic -> how many of its logs this broker has
        # One more than the highest partition each topic has a directory for, or was
        # created with: a topic's count never drops below it (docs/protocol.md §9.6).
        self._created_counts: dict[str, int] = {}
        self._roll_on_append = roll_on_append  # False: the caller rolls off the loop (Log.append)
        self._topic_listeners: list[Callable[[str], None]] = []
        self._opened = False
        self._closed = False
        self.recovered: bool | None = None  # after open(): whether crash recovery ran

    # -- configuration ---------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.config)

    def reconfigure(self, config: LogConfig, topic_configs: Mapping[str, LogConfig]) -> None:
        """New settings the manager is built with (the broker's dynamic settings, docs/protocol.md
        §20.4): every log takes its config from them.  Configs given by ``override_topic_config``
        are dropped: their owner gives them again, built on the new settings.  No disk access."""
        self.config = config
        self._built_topic_configs = dict(topic_configs)
        self._topic_configs = dict(topic_configs)
        for (topic, _partition), log in self._logs.items():
            log.config = self.config_for(topic)

    def override_topic_config(self, topic: str, config: LogConfig | None) -> None:
        """Give ``topic``'s logs, present and future, ``config`` (None: the one the manager was
        built with).  No disk access; retention and rolls read it at their next look."""
        if config is None:
            self._topic_configs.pop(topic, None)
            if topic in self._built_topic_configs:
                self._topic_configs[topic] = self._built_topic_configs[topic]
        else:
            self._topic_configs[topic] = config
        for (log_topic, _partition), log in self._logs.items():
            if log_topic == topic:
                log.config = self.config_for(topic)

    def configured_partitions(self, topic: str) -> int:
        """The count the settings give ``topic`` (``topic.partition.count.map`` or the default)."""
        count = self._partitions(topic) if callable(self._partitions) else self._partitions
        assert count >= 1, (topic, count)
        return count

    def partitions_for(self, topic: str) -> int:
        """``partitions(topic)``: the configured count, or more if the topic was created
        with more or has directories beyond it; a Kafka-format topic's own count only
        (docs/protocol.md §9.6)."""
        created = self._created_counts.get(topic, 0)
        if created and self.config_for(topic).record_format == FORMAT_V2.name:
            return created  # the settings' count is the default of its creation, never a floor
        return max(self.configured_partitions(topic), created)

    def raise_partition_count(self, topic: str, partitions: int) -> None:
        """CREATE_TOPIC: ``topic`` has at least ``partitions`` from now on (its logs are
        created next; each directory keeps the count across restarts).  No disk access."""
        self._check_open()
        validate_topic(topic)
        if partitions < 1:
            raise WrongPartitionError(f"a topic needs at least 1 partition, not {partitions}")
        self._created_counts[topic] = max(self._created_counts.get(topic, 0), partitions)

    # -- startup -------------------------------------------------------------------------

    def open(self) -> None:
        """Delete a clean-shutdown marker or recover, then load every log (spec §7.3)."""
        if self._opened:
            raise LogError("LogManager.open() called twice")
        fs = self.fs
        self._make_log_dir()
        marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER)
        clean = fs.exists(marker)
        if clean:
            fs.remove(marker)
            fs.fsync_dir(self.log_dir)
        self.recovered = not clean
        self._opened = True
        for name in sorted(fs.listdir(self.log_dir)):
            path = os.path.join(self.log_dir, name)
            if not fs.is_dir(path):
                if name not in BROKER_FILES:
                    logger.warning("ignoring %s: not a partition directory", path)
                continue
            topic, partition = parse_partition_dir_name(name)
            if (topic, partition) in self._logs:
                raise LogLoadError(f"{path}: partition {topic}-{partition} appears twice")
            self._register(Log.open(fs, path, topic, partition, self.config_for(topic), self.clock_ms,
                                    needs_recovery=not clean, roll_on_append=self._roll_on_append))

    def _make_log_dir(self) -> None:
        """Create ``log_dir`` and any missing ancestors, each entry made durable."""
        missing = []
        path = os.path.abspath(self.log_dir)
        while not self.fs.exists(path):
            missing.append(path)
            path = os.path.dirname(path)
        if missing:
            self.fs.makedirs(self.log_dir)
        for path in reversed(missing):
            self.fs.fsync_dir(os.path.dirname(path))

    # -- lookup and creation ---------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        """The log of a topic-partition, or None if this broker has none (no validation)."""
        return self._logs.get((topic, partition))

    def check_partition(self, topic: str, partition: int) -> None:
        """Raise ``InvalidTopicError`` (spec §9.7) or ``WrongPartitionError`` unless
        this broker may hold a log for ``topic``-``partition``; touches no disk."""
        self._check_open()
        validate_topic(topic)
        count = self.partitions_for(topic)
        if not isinstance(partition, int) or not 0 <= partition < count:
            raise WrongPartitionError(f"partition {partition} of topic {topic!r} is outside [0, {count})")

    def get_or_create(self, topic: str, partition: int) -> Log:
        """The log of a topic-partition, created on first use (spec §5.1 step 3).

        Checks first (``check_partition``), so nothing touches the disk for a
        rejected name.  A new log gets its directory and an empty segment 0,
        both durable before this returns.  Blocks while it creates.
        """
        self.check_partition(topic, partition)
        log = self._logs.get((topic, partition))
        if log is None:
            log = self.make_log(topic, partition)
            self.add(log)
        return log

    def create_topic(self, topic: str, partitions: int) -> list[Log]:
        """Create the missing logs of partitions ``0 .. partitions-1`` of ``topic`` on this
        thread (blocking); returns them.  The count is raised first, so the topic
        listeners already see the final count.  (The broker takes the same steps with
        each creation in a worker thread: ``TopicAdmin``.)"""
        self.raise_partition_count(topic, partitions)
        return [self.get_or_create(topic, p) for p in range(partitions) if self.get(topic, p) is None]

    def make_log(self, topic: str, partition: int) -> Log:
        """Create the directory and empty segment 0 of a checked topic-partition this
        manager has no log for, both durable, and return the new log (not yet added).
        The log stores the record format of the topic's ``LogConfig.record_format``.

        Blocking (mkdir, a file creation, two directory fsyncs) and thread-safe:
        it changes nothing in the manager, so the broker runs it in a worker
        thread, then ``add(log)`` on its loop.
        """
        self._check_open()
        path = os.path.join(self.log_dir, partition_dir_name(topic, partition))
        self.fs.makedirs(path)
        # The format file is durable in the directory before the directory is in the log dir:
        # no crash leaves a Kafka-format partition that loads as 0.7 (docs/protocol.md §16.6).
        write_record_format(self.fs, path, record_format(self.config_for(topic).record_format))
        self.fs.fsync_dir(self.log_dir)
        # Loading an empty directory creates segment 0 and fsyncs the directory.
        return Log.open(self.fs, path, topic, partition, self.config_for(topic), self.clock_ms,
                        needs_recovery=False, roll_on_append=self._roll_on_append)

    def add(self, log: Log) -> None:
        """Start managing ``log`` (from ``make_log``); the first log of a topic tells the topic listeners."""
        self._check_open()
        if (log.topic, log.partition) in self._logs:
            raise LogError(f"{log} is already managed")
        new_topic = log.topic not in self._topic_logs
        self._register(log)
        if new_topic:
            for callback in tuple(self._topic_listeners):
                callback(log.topic)

    def _register(self, log: Log) -> None:
        self._logs[(log.topic, log.partition)] = log
        self._topic_logs[log.topic] = self._topic_logs.get(log.topic, 0) + 1
        self._created_counts[log.topic] = max(self._created_counts.get(log.topic, 0), log.partition + 1)

    def remove_topic(self, topic: str) -> list[Log]:
        """Stop managing every log of ``topic`` and forget its count and settings (DeleteTopics,
        docs/protocol.md §16.4); the logs, still open, for the caller to close and delete
        (``delete_log``).  No disk access."""
        self._check_open()
        removed = [log for (t, _p), log in self._logs.items() if t == topic]
        for log in removed:
            del self._logs[(log.topic, log.partition)]
        self._topic_logs.pop(topic, None)
        self._created_counts.pop(topic, None)
        self._topic_configs.pop(topic, None)
        if topic in self._built_topic_configs:
            self._topic_configs[topic] = self._built_topic_configs[topic]
        return removed

    def delete_log(self, log: Log) -> None:
        """Close ``log`` and remove its directory, durably (blocking: a worker thread's work)."""
        log.close()
        for name in self.fs.listdir(log.dir_path):
            self.fs.remove(os.path.join(log.dir_path, name))
        self.fs.remove_dir(log.dir_path)
        self.fs.fsync_dir(self.log_dir)

    def add_topic_listener(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(topic)`` when a topic gets its first log on this broker (ZK registration)."""
        self._topic_listeners.append(callback)

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def topics(self) -> set[str]:
        return set(self._topic_logs)

    # -- shutdown ----------------------------------------------------------------------------

    def close(self, clean: bool = True) -> bool:
        """Flush (when ``clean``) and close every log; write the marker if all went well.

        Returns whether the clean-shutdown marker was written.  It is not when
        ``clean`` is False, or when any log failed or could not be flushed:
        the next startup then recovers.  Blocks on fsyncs; run it in a worker
        thread once nothing else touches the logs.
        """
        if self._closed:
            return False
        self._closed = True
        problems = []
        for log in self._logs.values():
            try:
                if clean and log.failure is None:
                    log.flush()
            except LogError as exc:
                problems.append(str(exc))
            if log.failure is not None:
                problems.append(log.failure)
            try:
                log.close()
            except LogError as exc:
                problems.append(str(exc))
        if not clean or not self._opened:
            return False
        if problems:
            logger.error("no clean-shutdown marker written: %s", "; ".join(problems))
            return False
        self.fs.create_file(os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER))
        self.fs.fsync_dir(self.log_dir)
        return True

    def _check_open(self) -> None:
        if not self._opened:
            raise LogError("LogManager.open() has not run")
        if self._closed:
            raise LogClosedError("LogManager is closed")
