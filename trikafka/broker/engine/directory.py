"""Which partitions a broker has, and the ``Partition`` that serves each (docs/protocol.md §5.1, §12.6, §16.6).

One ``PartitionDirectory`` per broker owns the topic-name rules' cache of
partition counts, the logs it adopted (each as its ``LocalPartition``), the
logs being created right now (one creation per log, in a worker thread:
mkdir and directory fsyncs must not block the loop), and the deletion of a
topic's logs.  A replicated topic's partitions are replication's: with
ZooKeeper the directory is built with ``replicas``, the ``ReplicationView``
replication keeps (``replication/view.py``); everything else is a local log.
Both listeners ask here.
"""

from __future__ import annotations

import functools
from typing import Callable

import trio

from trikafka.log.errors import InvalidTopicError
from trikafka.log.names import validate_topic

from .partition import LocalPartition, NoLog, Partition
from ..replication import serving as replicated
from ..seams import BrokerLog, Flusher, LogDirectory, Replicas, RunBlocking
from ..topic_settings import FORMAT_07, FORMAT_V2, RECORD_FORMAT
from .waiters import VisibleEndWaiters

# Valid topic names remembered so the hot path skips the regex; bounded because
# any client can send names (fetches of arbitrary valid topics create nothing).
MAX_CACHED_TOPICS = 100_000


class PartitionDirectory:
    """The broker's partitions: counts, logs (created on first write) and the ``Partition`` of each."""

    def __init__(self, *, log_manager: LogDirectory, flusher: Flusher, waiters: VisibleEndWaiters,
                 partitions: Callable[[str], int], max_topic_name_length: int, run_blocking: RunBlocking,
                 replicas: Replicas | None = None, acks_all_fsync: bool = True):
        self._log_manager = log_manager
        self._flusher = flusher
        self._acks_all_fsync = acks_all_fsync  # the broker's acks.all.fsync (§12.6), for every local log
        self._waiters = waiters
        self._partitions = partitions
        self._max_topic_chars = max_topic_name_length
        self._run_blocking = run_blocking  # how log creation leaves the loop (a worker thread)
        self._topic_partitions: dict[str, int] = {}
        self._local: dict[tuple[str, int], LocalPartition] = {}  # every log adopted, as its partition
        self._creating: dict[tuple[str, int], trio.Event] = {}  # logs being created right now
        self.replicas = replicas  # with ZooKeeper: replicated topics (§12)

    @property
    def log_manager(self) -> LogDirectory:
        """The broker's logs (the Kafka listener reads topics and formats through it)."""
        return self._log_manager

    def partitions_if_valid(self, topic: str) -> int | None:
        """``partitions(topic)`` for a name trikafka accepts, None for a rejected one."""
        count = self._topic_partitions.get(topic)
        if count is not None:
            return count
        if self.replicas is not None and (count := self.replicas.partition_count(topic)) is not None:
            return count  # not cached: replication's map is the cache
        try:
            validate_topic(topic)
        except InvalidTopicError:
            return None
        if len(topic) > self._max_topic_chars:
            return None
        count = self._partitions(topic)
        if len(self._topic_partitions) < MAX_CACHED_TOPICS:
            self._topic_partitions[topic] = count
        return count

    async def delete_topic_logs(self, topic: str) -> int:
        """Delete every log of ``topic`` on this broker (DeleteTopics, §16.4); how many.

        The logs leave the manager first, so no new request finds them, and are
        retired, so no new background pass takes them; each is closed and
        removed in a worker thread once the passes that hold it have ended.
        """
        logs = self._log_manager.remove_topic(topic)
        self.forget_partition_count(topic)
        for log in logs:
            self._local.pop((log.topic, log.partition), None)
            log.passes.retire()
        for log in logs:
            if log.passes.held:
                ended = trio.Event()
                log.passes.on_ended(ended.set)
                await ended.wait()
            await self._run_blocking(functools.partial(self._log_manager.delete_log, log))
        return len(logs)

    def topic_format(self, topic: str) -> str | None:
        """``"v2"`` or ``"0.7"`` (§16.6): a replicated topic's ``record.format`` setting, else what its
        partition 0's log stores; None for a topic with neither (both listeners ask here)."""
        if self.replicas is not None and (assignment := self.replicas.topics.get(topic)) is not None:
            return assignment.config.get(RECORD_FORMAT, FORMAT_07)
        local = self._local.get((topic, 0))
        log = local.log if local is not None else self._log_manager.get(topic, 0)
        return None if log is None else log.record_format

    def kafka_format(self, topic: str) -> bool:
        """Whether ``topic`` stores Kafka's v2 batches (§16.6): 0.7 requests answer WrongFormat on it."""
        return self.topic_format(topic) == FORMAT_V2

    def forget_partition_count(self, topic: str) -> None:
        """Drop the cached count of ``topic`` (CREATE_TOPIC may have raised it)."""
        self._topic_partitions.pop(topic, None)

    def adopt(self, log: BrokerLog) -> BrokerLog:
        """Start watching ``log`` (called once per log: loaded or created)."""
        self._local[(log.topic, log.partition)] = LocalPartition(log, self._flusher, ack_fsync=self._acks_all_fsync)
        log.add_visible_listener(self._waiters.on_visible)
        self._flusher.track(log)
        return log

    def existing_log(self, topic: str, partition: int) -> BrokerLog | None:
        """The log of ``topic``-``partition`` on this broker, None if it has none yet."""
        local = self._local.get((topic, partition))
        if local is not None:
            return local.log
        log = self._log_manager.get(topic, partition)
        return None if log is None else self.adopt(log)

    async def log_for_write(self, topic: str, partition: int) -> BrokerLog:
        """The log to append to, created if new; topic and partition already checked (§5.1 step 3).

        Returns without a checkpoint when the log exists.
        """
        key = (topic, partition)
        while (log := self.existing_log(topic, partition)) is None:
            creating = self._creating.get(key)
            if creating is not None:
                await creating.wait()  # someone else creates it; if that failed, try again
                continue
            self._log_manager.check_partition(topic, partition)
            creating = self._creating[key] = trio.Event()
            try:
                # Shielded: once the directory exists, the log is added, or its files
                # would stay open and unknown until a restart.
                with trio.CancelScope(shield=True):
                    new_log = await self._run_blocking(functools.partial(self._log_manager.make_log, topic,
                                                                         partition))
                    self._log_manager.add(new_log)
            finally:
                del self._creating[key]
                creating.set()
            return self.adopt(new_log)
        return log

    def partition(self, topic: str, partition: int) -> Partition:
        """The ``Partition`` that serves ``topic``-``partition`` here (checked already); creates nothing."""
        if self.replicas is not None and self.replicas.is_replicated(topic):
            return replicated.partition(self.replicas, topic, partition)
        key = (topic, partition)
        local = self._local.get(key)
        if local is None and self.existing_log(topic, partition) is not None:
            local = self._local[key]  # adopted just now
        return local if local is not None else NoLog(key)

    async def partition_for_write(self, topic: str, partition: int) -> Partition:
        """Like ``partition``, but an unreplicated partition's log is created if new (§5.1 step 3)."""
        found = self.partition(topic, partition)
        if isinstance(found, NoLog):
            await self.log_for_write(topic, partition)
            return self._local[found.key]
        return found
