"""The broker's view of per-topic settings stored in ZooKeeper (docs/protocol.md §12.12.1).

One service of the broker's tree (with ZooKeeper)::

    TopicConfigWatcher.run
    ├── children of /trikafka/config/topics   plain topics' settings
    │   └── one data watch per topic
    └── children of /trikafka/topics          replicated topics' znodes (their ``config``)
        └── one data watch per topic

Each change is applied on the event loop, without blocking: the cleaner's
per-topic overrides (``cleanup.policy``, ``min.compaction.lag.ms``,
``delete.retention.ms``, read at its next look; retention asks the cleaner
whether a topic deletes) and the topic's ``LogConfig`` (``retention.ms``,
``retention.bytes``).  A removed znode or key puts the broker's own setting
back; a value the broker cannot parse is logged and that key ignored.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Callable

import trio

from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError, InvalidPathError
from trikafka.zk.replication_values import ReplicationValueError, TopicAssignment
from trikafka.zk.topic_config_store import decode_topic_config, update_topic_config

from .config import BrokerConfig
from .topic_settings import LOG_KEYS, LogOverrides, TopicConfigError, log_overrides

if TYPE_CHECKING:
    from trikafka.log.manager import LogManager

    from .cleaner import CleanerService
    from .zookeeper import BrokerZooKeeper

logger = logging.getLogger(__name__)


def _replicated_config(raw: bytes) -> dict[str, str]:
    return TopicAssignment.decode(raw).config


class TopicConfigWatcher:
    """Start with ``nursery.start(watcher.run)``: ready once every stored setting is applied."""

    _nursery: trio.Nursery  # run()'s: one watch task per topic starts in it

    def __init__(self, zk: ZooKeeperClient, overrides: TopicOverrides):
        self._zk = zk
        self.overrides = overrides  # what it applies; dynamic settings rebase it (§20.4)
        self._plain: dict[str, dict[str, str]] = {}
        self._replicated: dict[str, dict[str, str]] = {}
        self.applied = self.overrides.applied  # what is in force, per topic
        self.changed = trio.Event()  # set (and replaced) after each applied change: tests wait on it

    async def run(self, *, task_status: trio.TaskStatus["TopicConfigWatcher"] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._watch_root, paths.TOPIC_CONFIGS, paths.topic_config, self._plain,
                                decode_topic_config)
            await nursery.start(self._watch_root, paths.REPLICATED_TOPICS, paths.replicated_topic,
                                self._replicated, _replicated_config)
            task_status.started(self)

    async def _watch_root(self, root: str, path_of: Callable[[str], str], store: dict[str, dict[str, str]],
                          decode: Callable[[bytes], dict[str, str]], *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        watching: set[str] = set()
        started = False
        async for children in self._zk.watch_children(root):
            for topic in children or ():
                if topic in watching:
                    continue
                watching.add(topic)  # watched for good: a znode deleted and made again fires the same watch
                try:
                    path = path_of(topic)
                except InvalidPathError:
                    logger.warning("ignoring %s/%s: not a topic name", root, topic)
                    continue
                await self._nursery.start(self._watch_topic, topic, path, store, decode)
            if not started:
                task_status.started()
                started = True

    async def _watch_topic(self, topic: str, path: str, store: dict[str, dict[str, str]],
                           decode: Callable[[bytes], dict[str, str]], *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        async for value in self._zk.watch_data(path):
            if value is None:
                store.pop(topic, None)
            else:
                try:
                    store[topic] = decode(value[0])
                except ReplicationValueError as exc:
                    logger.error("%s: %s; the broker's own settings stay", path, exc)
                    store.pop(topic, None)
            self._apply(topic)
            if not started:
                task_status.started()
                started = True

    def _apply(self, topic: str) -> None:
        stored = self._replicated.get(topic, self._plain.get(topic, {}))  # a replicated topic's znode wins
        if self.overrides.apply(topic, stored):
            logger.info("topic %s: settings from ZooKeeper: %s", topic,
                        {k: v for k, v in stored.items() if k in LOG_KEYS} or "none (the broker's own)")
            self.changed.set()
            self.changed = trio.Event()


class TopicOverrides:
    """Puts a topic's stored settings in force on this broker: the cleaner's and the log manager's."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, cleaner: CleanerService):
        self._config = config
        self._log_manager = log_manager
        self._cleaner = cleaner
        self._retention_overridden: set[str] = set()
        self.applied: dict[str, LogOverrides] = {}  # what is in force, per topic

    def apply(self, topic: str, stored: dict[str, str]) -> bool:
        """Apply ``stored`` (bad keys logged and skipped); whether anything changed."""
        overrides = _parse_leniently(topic, stored)
        if overrides == self.applied.get(topic, LogOverrides()):
            return False
        if overrides == LogOverrides():
            self.applied.pop(topic, None)
            self._cleaner.overrides.pop(topic, None)
        else:
            self.applied[topic] = overrides
            self._cleaner.overrides[topic] = overrides
        if overrides.changes_log_config:
            self._override_log_config(topic, overrides)
            self._retention_overridden.add(topic)
        elif topic in self._retention_overridden:
            self._log_manager.override_topic_config(topic, None)
            self._retention_overridden.discard(topic)
        return True

    def _override_log_config(self, topic: str, overrides: LogOverrides) -> None:
        base = self._config.log_config(topic)
        self._log_manager.override_topic_config(topic, dataclasses.replace(
            base, retention_ms=base.retention_ms if overrides.retention_ms is None else overrides.retention_ms,
            retention_bytes=(base.retention_bytes if overrides.retention_bytes is None
                             else overrides.retention_bytes),
            segment_bytes=base.segment_bytes if overrides.segment_bytes is None else overrides.segment_bytes,
            record_format=base.record_format if overrides.record_format is None else overrides.record_format,
            max_message_size=(base.max_message_size if overrides.max_message_bytes is None
                              else overrides.max_message_bytes)))

    def rebase(self, config: BrokerConfig) -> None:
        """The broker's settings changed (§20.4): the topics' log configs again, on ``config``
        (``LogManager.reconfigure`` ran first and dropped them)."""
        self._config = config
        for topic, overrides in self.applied.items():
            if overrides.changes_log_config:
                self._override_log_config(topic, overrides)


def _parse_leniently(topic: str, stored: dict[str, str]) -> LogOverrides:
    """The topic's log overrides, each bad key logged and left out."""
    good = {}
    for key in LOG_KEYS:
        if key in stored:
            try:
                log_overrides({key: stored[key]})
            except TopicConfigError as exc:
                logger.error("topic %s: ignoring the stored setting %s", topic, exc)
                continue
            good[key] = stored[key]
    return log_overrides(good)


async def watch_topic_configs(zookeeper: BrokerZooKeeper, overrides: TopicOverrides, *,
                              task_status: trio.TaskStatus[TopicConfigWatcher] = trio.TASK_STATUS_IGNORED) -> None:
    """Run a :class:`TopicConfigWatcher` on the registered broker's session (``zookeeper``: a BrokerZooKeeper),
    putting what it reads in force through ``overrides``."""
    await TopicConfigWatcher(zookeeper.coordinator, overrides).run(task_status=task_status)


class ZooKeeperTopicSettings:
    """A topic's settings on a broker with ZooKeeper (``TopicSettingsStore``): CREATE_TOPIC's go into
    the topic's settings znode (every broker's watcher applies them); a replicated topic's are read
    from its assignment, so none is read, forgotten or updated here."""

    def __init__(self, zk: ZooKeeperClient):
        self._zk = zk

    async def store(self, topic: str, settings: dict[str, str]) -> bool:
        """False when ZooKeeper could not be written."""
        try:
            await update_topic_config(self._zk, topic, lambda current, replicated: {**current, **settings})
        except ZooKeeperClientError as exc:
            logger.error("topic %s: settings not stored in ZooKeeper: %s", topic, exc)
            return False
        return True

    def read(self, topic: str) -> dict[str, str]:
        return {}

    async def forget(self, topic: str) -> None:
        return None

    async def update(self, topic: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        raise AssertionError(f"{topic!r}: with ZooKeeper, Alter*Configs goes through the registry")
