"""Topic ids (docs/protocol.md §17.9), sans I/O.

trikafka keeps no topic id: a topic's id is derived from its name, the same
on every broker and across restarts, so Kafka 4's consumer protocol and
Metadata (v10+) can name topics by id.  A topic deleted and created again keeps
its id.
"""

from __future__ import annotations

import uuid
from typing import Iterable

NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's "no id"


def topic_id(name: str) -> uuid.UUID:
    """The id of topic ``name``: uuid5 of the RFC 4122 URL namespace and ``trikafka-topic:<name>``."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "trikafka-topic:" + name)


def names_by_id(names: Iterable[str]) -> dict[uuid.UUID, str]:
    """The topics ``names`` by their ids."""
    return {topic_id(name): name for name in names}
