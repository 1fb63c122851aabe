"""Topic names: the one rule every layer checks, and how names travel as bytes (docs/protocol.md §9.7, §1)."""

from __future__ import annotations

import re

TOPIC_NAME_MAX_CHARS = 255
_TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,%d}" % TOPIC_NAME_MAX_CHARS)


def is_valid_topic(name: object) -> bool:
    """The one topic-name rule (§9.7), for brokers, clients and the registry alike.

    1-255 ASCII characters from ``[A-Za-z0-9._-]``, and not ``.`` or ``..``: a
    topic name becomes a directory name and a ZooKeeper node name, so nothing
    else is allowed.  Each layer raises its own error around this check.
    """
    return isinstance(name, str) and _TOPIC_NAME_RE.fullmatch(name) is not None and name not in (".", "..")


TOPIC_ENCODING = "utf-8"
# Topic bytes that are not UTF-8 survive a decode/encode round trip unchanged.
TOPIC_ERRORS = "surrogateescape"
