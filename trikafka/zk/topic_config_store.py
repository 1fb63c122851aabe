"""Per-topic settings in ZooKeeper (docs/protocol.md §12.12.1): one place per topic.

A replicated topic keeps its settings in the ``config`` of its topic znode
(``/trikafka/topics/<t>``), a plain topic in ``/trikafka/config/topics/<t>``.
``update_topic_config`` changes either with a versioned set, reading again
when someone else wrote first.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Callable

from . import paths
from .client import ZooKeeperClient
from .errors import BadVersionError, NodeExistsError, NoNodeError
from .replication_values import VALUE_VERSION, ReplicationValueError, TopicAssignment


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's settings as stored, where they live and the version they were read at."""

    config: dict[str, str]
    replicated: bool
    version: int


def encode_topic_config(config: dict[str, str]) -> bytes:
    """The value of ``/trikafka/config/topics/<t>``."""
    return json.dumps({"version": VALUE_VERSION, "config": dict(config)}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


def decode_topic_config(raw: bytes) -> dict[str, str]:
    """The settings in a ``/trikafka/config/topics/<t>`` value; raises ReplicationValueError."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReplicationValueError(f"topic config: not JSON ({exc})") from None
    config = obj.get("config", {}) if isinstance(obj, dict) else None
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise ReplicationValueError("topic config: config must map strings to strings")
    return dict(config)


async def read_topic_settings(zk: ZooKeeperClient, topic: str) -> TopicSettings | None:
    """The topic's settings from the replicated topic znode, else from its config znode; None if neither."""
    try:
        data, stat = await zk.get(paths.replicated_topic(topic))
        return TopicSettings(TopicAssignment.decode(data).config, True, stat.version)
    except NoNodeError:
        pass
    try:
        data, stat = await zk.get(paths.topic_config(topic))
    except NoNodeError:
        return None
    return TopicSettings(decode_topic_config(data), False, stat.version)


async def create_topic_config(zk: ZooKeeperClient, topic: str, config: dict[str, str]) -> None:
    """Create a plain topic's config znode; NodeExistsError if it exists."""
    await zk.ensure_path(paths.TOPIC_CONFIGS)
    await zk.create(paths.topic_config(topic), encode_topic_config(config))


async def update_topic_config(zk: ZooKeeperClient, topic: str,
                              change: Callable[[dict[str, str], bool], dict[str, str]]) -> TopicSettings:
    """Replace the topic's settings by ``change(current, replicated)``, a versioned read-modify-write.

    A plain topic without a config znode gets one.  ``change`` may run more
    than once (another writer moved first) and may raise to give up.
    """
    while True:
        try:
            data, stat = await zk.get(paths.replicated_topic(topic))
        except NoNodeError:
            pass
        else:
            assignment = TopicAssignment.decode(data)
            new = change(dict(assignment.config), True)
            try:
                written = await zk.set(paths.replicated_topic(topic),
                                       dataclasses.replace(assignment, config=new).encode(), stat.version)
            except (BadVersionError, NoNodeError):
                continue
            return TopicSettings(new, True, written.version)
        try:
            data, stat = await zk.get(paths.topic_config(topic))
        except NoNodeError:
            new = change({}, False)
            try:
                await create_topic_config(zk, topic, new)
            except NodeExistsError:
                continue
            return TopicSettings(new, False, 0)
        new = change(decode_topic_config(data), False)
        try:
            written = await zk.set(paths.topic_config(topic), encode_topic_config(new), stat.version)
        except (BadVersionError, NoNodeError):
            continue
        return TopicSettings(new, False, written.version)
