"""Whole fetched message sets for a mirror: handed out undecoded, committed only once acknowledged."""

from __future__ import annotations

from typing import NamedTuple


class GroupBatch(NamedTuple):
    """A whole fetched message set, as ``GroupConsumer.next_batch`` hands it out.

    ``message_set`` holds the entries from ``offset`` to ``next_offset``
    exactly as the broker stored them (compressed wrappers included);
    ``count`` is how many messages they hold once unwrapped.
    """

    topic: str
    partition: str
    broker_id: int | None  # None: a replicated partition
    part: int
    offset: int
    next_offset: int
    message_set: bytes
    # Shadows tuple.count (what mypy reports); the name is public API, read by mirrors.
    count: int  # type: ignore[assignment]
