"""A standalone broker's per-topic settings, kept in its log dir (docs/protocol.md §9.5).

Without ZooKeeper there is no ``/trikafka/config/topics``; settings sent with
CREATE_TOPIC are applied on this broker (``topic_config.TopicOverrides``) and
kept in ``<log-dir>/.trikafka-topic-settings.json`` so a restart keeps them.
The file is replaced atomically (temporary file, fsync, rename, directory
fsync); every read and write is blocking and runs where the caller says
(a worker thread for the broker).
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Callable

import trio

from trikafka.log.fs import FileSystem
from trikafka.log.names import TOPIC_SETTINGS_FILE

from .seams import RunBlocking

if TYPE_CHECKING:
    from .topic_config import TopicOverrides

logger = logging.getLogger(__name__)

FILE_VERSION = 1


def encode_settings_file(topics: dict[str, dict[str, str]]) -> bytes:
    """The file's bytes (compact JSON, keys sorted)."""
    return json.dumps({"version": FILE_VERSION, "topics": topics}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


def decode_settings_file(data: bytes) -> dict[str, dict[str, str]]:
    """Topic -> settings; ValueError for anything that is not the documented shape."""
    obj = json.loads(data.decode("utf-8"))
    topics = obj.get("topics") if isinstance(obj, dict) else None
    if not isinstance(topics, dict) or not all(
            isinstance(t, str) and isinstance(c, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in c.items()) for t, c in topics.items()):
        raise ValueError("not a topic settings file")
    return {t: dict(c) for t, c in topics.items()}


class LocalTopicSettings:
    """The settings file of one log dir, and the overrides it puts in force."""

    def __init__(self, fs: FileSystem, log_dir: str, overrides: TopicOverrides,
                 run_blocking: RunBlocking):
        self._fs = fs
        self._path = os.path.join(log_dir, TOPIC_SETTINGS_FILE)
        self._overrides = overrides
        self._run_blocking = run_blocking
        self.topics: dict[str, dict[str, str]] = {}
        # One change of the file at a time: each starts from the topics the last one wrote, and no
        # two writers share the temporary file.
        self._lock = trio.Lock()

    def load(self) -> None:
        """Read the file (blocking) and apply every topic's settings; a bad file is logged and ignored."""
        if self._fs.exists(self._path):
            try:
                self.topics = decode_settings_file(self._fs.read_file(self._path))
            except (ValueError, UnicodeDecodeError) as exc:
                logger.error("ignoring %s: %s", self._path, exc)
        for topic, settings in self.topics.items():
            self._overrides.apply(topic, settings)

    async def store(self, topic: str, settings: dict[str, str]) -> bool:
        """Keep ``settings`` for ``topic`` (durably, off the loop), then put them in force; True."""
        await self.update(topic, lambda current: dict(settings))
        return True

    async def update(self, topic: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace ``topic``'s settings by ``change(current)`` (which may raise to give up), keep them
        (durably, off the loop) and put them in force; the settings kept."""
        async with self._lock:
            settings = change(self.read(topic))
            if self.topics.get(topic) == settings:
                return settings
            topics = {**self.topics, topic: dict(settings)}
            await self._run_blocking(lambda: self._write(encode_settings_file(topics)))
            self.topics = topics
            self._overrides.apply(topic, settings)
            return settings

    def read(self, topic: str) -> dict[str, str]:
        """A copy of ``topic``'s stored settings (empty: none)."""
        return dict(self.topics.get(topic, {}))

    async def forget(self, topic: str) -> None:
        """Drop ``topic``'s settings (durably, off the loop) and put the broker's own back in force."""
        async with self._lock:
            if topic not in self.topics:
                return
            topics = {t: s for t, s in self.topics.items() if t != topic}
            await self._run_blocking(lambda: self._write(encode_settings_file(topics)))
            self.topics = topics
            self._overrides.apply(topic, {})

    def _write(self, data: bytes) -> None:
        temp = self._path + ".tmp"
        self._fs.write_synced(temp, data)
        self._fs.rename(temp, self._path)
        self._fs.fsync_dir(os.path.dirname(self._path) or ".")
