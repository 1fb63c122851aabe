"""The server-side assignors of Kafka 4's consumer groups (docs/protocol.md §17.9), sans I/O.

An assignor takes each member's subscribed topics (by name), the topics' ids
and partition counts, and the last target assignment, and answers each
member's new target: partitions by topic id.
"""

from __future__ import annotations

import uuid
from typing import Callable, Mapping

Assignment = dict[uuid.UUID, frozenset[int]]
TopicsMetadata = Mapping[str, tuple[uuid.UUID, int]]  # name -> (topic id, partition count)
Subscriptions = Mapping[str, frozenset[str]]  # member id -> the topic names it subscribes to (known topics)
Assignor = Callable[[Subscriptions, TopicsMetadata, Mapping[str, Assignment]], dict[str, Assignment]]


def _collect(owned: dict[str, list[tuple[str, int]]], topics: TopicsMetadata) -> dict[str, Assignment]:
    """Each member's (topic name, partition) list as partitions by topic id."""
    result: dict[str, Assignment] = {}
    for member_id, partitions in owned.items():
        by_id: dict[uuid.UUID, set[int]] = {}
        for name, index in partitions:
            by_id.setdefault(topics[name][0], set()).add(index)
        result[member_id] = {topic_id: frozenset(indexes) for topic_id, indexes in by_id.items()}
    return result


def uniform(subscriptions: Subscriptions, topics: TopicsMetadata,
            previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky (§17.9): a partition stays with its last owner while that member
    subscribes to its topic and holds no more than its share; the rest go to the eligible member
    holding fewest (ties: the lowest member id)."""
    names_by_id = {topic_id: name for name, (topic_id, _) in topics.items()}
    subscribed = sorted({name for names in subscriptions.values() for name in names})
    every = [(name, index) for name in subscribed for index in range(topics[name][1])]
    owned: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in subscriptions}
    kept: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in subscriptions}
    valid = set(every)
    for member_id, assignment in previous.items():
        if member_id not in subscriptions:
            continue
        for topic_id, indexes in assignment.items():
            name = names_by_id.get(topic_id)
            if name is None or name not in subscriptions[member_id]:
                continue
            kept[member_id] += sorted((name, index) for index in indexes if (name, index) in valid)
    members = len(subscriptions)
    if members == 0:
        return {}
    floor, extra = divmod(len(every), members)
    # Members keeping the most come first: the first `extra` may keep one more than the floor.
    order = sorted(subscriptions, key=lambda m: (-len(kept[m]), m))
    taken: set[tuple[str, int]] = set()
    for rank, member_id in enumerate(order):
        share = floor + (1 if rank < extra else 0)
        owned[member_id] = kept[member_id][:share]
        taken.update(owned[member_id])
    for name, index in every:
        if (name, index) in taken:
            continue
        eligible = [m for m in subscriptions if name in subscriptions[m]]
        if not eligible:
            continue
        chosen = min(eligible, key=lambda m: (len(owned[m]), m))
        owned[chosen].append((name, index))
    return _collect(owned, topics)


def range_(subscriptions: Subscriptions, topics: TopicsMetadata,
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, its partitions in contiguous runs over the subscribed members sorted by member
    id; the first ``partitions % members`` get one more (§17.9)."""
    owned: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in subscriptions}
    for name in sorted({name for names in subscriptions.values() for name in names}):
        members = sorted(m for m in subscriptions if name in subscriptions[m])
        count = topics[name][1]
        each, extra = divmod(count, len(members))
        start = 0
        for rank, member_id in enumerate(members):
            size = each + (1 if rank < extra else 0)
            owned[member_id] += [(name, index) for index in range(start, start + size)]
            start += size
    return _collect(owned, topics)


# The assignors a member may name in `server_assignor`; the first is the default.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
