"""``trikafka mirror``: copy topics from source clusters into a target cluster.

On each source cluster the mirror is an ordinary member of a 0.7 consumer
group (whitelist subscription), so its offsets and lag live in the source's
ZooKeeper and ``trikafka groups`` shows them.  Each fetched message set goes
to the target as it is (``Producer.send_message_set``: no decompression, no
recompression) and is acknowledged to the group consumer only once the
target acknowledged it; commits never pass an unacknowledged set, so a crash
repeats at most the uncommitted tail.  One set at a time per source keeps the
order of every source partition.  Sending is retried until it works (target
brokers restarting) or the mirror stops; the group consumer retries fetches
itself (source brokers restarting).
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field

import trio

from trikafka.group import GroupConfig, GroupConsumer, whitelist
from trikafka.producer import Producer
from trikafka.zk import KazooZooKeeperClient

from .topics import TargetTopics

log = logging.getLogger(__name__)

DEFAULT_GROUP = "trikafka-mirror"


@dataclass
class MirrorConfig:
    """What to mirror where.  ``acks`` is 1 or -1 (the target's flush)."""

    sources: list[str]
    target: str
    whitelist: str
    group: str = DEFAULT_GROUP
    consumer_id: str | None = None  # default: the host name, stable across restarts
    acks: int = 1
    commit_interval_s: float = 1.0
    retry_backoff_s: float = 0.1
    retry_backoff_max_s: float = 2.0
    zk_session_timeout_s: float = 6.0
    fetch_max_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("give at least one source cluster")
        if self.acks not in (1, -1):
            raise ValueError(f"the mirror needs acks 1 or -1, not {self.acks!r}")
        whitelist(self.whitelist)  # a bad regex fails here, before any connection


@dataclass
class MirrorStats:
    """Counters of one mirror run, per source connect string."""

    batches: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    send_failures: int = 0

    @property
    def total_messages(self) -> int:
        return sum(self.messages.values())


async def run_mirror(config: MirrorConfig, stats: MirrorStats | None = None, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Mirror until cancelled; on the way out every source commits what the target acknowledged."""
    stats = stats if stats is not None else MirrorStats()
    consumer_id = config.consumer_id or socket.gethostname()
    async with KazooZooKeeperClient(config.target, session_timeout_s=config.zk_session_timeout_s) as target_zk:
        async with Producer(coordinator=target_zk, acks=config.acks, close_timeout_s=5.0) as producer:
            topics = TargetTopics(target_zk)
            async with trio.open_nursery() as nursery:
                for source in config.sources:
                    await nursery.start(_mirror_source, config, source, consumer_id, producer, topics, stats)
                task_status.started()


async def _mirror_source(config: MirrorConfig, source: str, consumer_id: str, producer: Producer,
                         topics: TargetTopics, stats: MirrorStats, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    group_config = GroupConfig(autocommit_interval_s=config.commit_interval_s,
                               zk_session_timeout_s=config.zk_session_timeout_s,
                               fetch_max_bytes=config.fetch_max_bytes)
    async with KazooZooKeeperClient(source, session_timeout_s=config.zk_session_timeout_s) as source_zk:
        async with GroupConsumer(source_zk, config.group, whitelist(config.whitelist), consumer_id=consumer_id,
                                 config=group_config) as consumer:
            task_status.started()
            for name in (stats.batches, stats.messages, stats.bytes):
                name.setdefault(source, 0)
            while True:
                batch = await consumer.next_batch()
                await topics.ensure(batch.topic, source_zk)
                delay_s = config.retry_backoff_s
                while True:
                    result = await producer.send_message_set(batch.topic, batch.part, batch.message_set)
                    if result.error is None:
                        break
                    stats.send_failures += 1
                    log.warning("mirroring %s/%s at %d: %s; retrying in %.2f s", batch.topic, batch.partition,
                                batch.offset, result.error, delay_s)
                    await trio.sleep(delay_s)
                    delay_s = min(delay_s * 2, config.retry_backoff_max_s)
                    await topics.ensure(batch.topic, source_zk)
                consumer.acknowledge(batch)
                stats.batches[source] += 1
                stats.messages[source] += batch.count
                stats.bytes[source] += len(batch.message_set)


__all__ = ["DEFAULT_GROUP", "MirrorConfig", "MirrorStats", "run_mirror"]
