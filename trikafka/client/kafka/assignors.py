"""Client-side partition assignors of the consumer protocol (docs/protocol.md §17.8).

The group's leader runs one over every member's subscription and hands each
member its ``Assignment`` through SyncGroup; the coordinator only relays the
bytes.  ``ASSIGNORS`` is the table by protocol name, the name each member
offers in JoinGroup.  Both assignors here are eager: a member gives up its
partitions before rejoining.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from trikafka.kafka.consumer_protocol import Assignment, Subscription


@dataclass(frozen=True)
class GroupMember:
    """One member as JoinGroup's answer names it to the leader."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription


class Assignor(Protocol):
    """An assignment strategy: ``assign`` maps every member id to its partitions."""

    name: str

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[GroupMember]) -> dict[str, Assignment]:
        """``partition_counts``: each known topic's partition count (a topic absent from it is skipped)."""
        ...


def member_order(members: Sequence[GroupMember]) -> list[GroupMember]:
    """Static members by instance id, then dynamic ones by member id (KIP-345: a static member
    keeps its place, so its partitions, across restarts)."""
    static = sorted((m for m in members if m.group_instance_id is not None),
                    key=lambda m: (m.group_instance_id or "", m.member_id))
    dynamic = sorted((m for m in members if m.group_instance_id is None), key=lambda m: m.member_id)
    return static + dynamic


def _assignments(members: Sequence[GroupMember],
                 chosen: Mapping[str, Mapping[str, list[int]]]) -> dict[str, Assignment]:
    return {m.member_id: Assignment({topic: tuple(ids) for topic, ids in sorted(chosen.get(m.member_id, {}).items())})
            for m in members}


class RangeAssignor:
    """Per topic, contiguous runs of partitions over the members subscribed to it."""

    name = "range"

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[GroupMember]) -> dict[str, Assignment]:
        """Each topic's partitions in order, ``count // n`` each and one more for the first ``count % n``."""
        chosen: dict[str, dict[str, list[int]]] = {}
        topics = sorted({t for m in members for t in m.subscription.topics})
        for topic in topics:
            count = partition_counts.get(topic)
            if count is None:
                continue
            subscribed = [m for m in member_order(members) if topic in m.subscription.topics]
            share, extra = divmod(count, len(subscribed))
            start = 0
            for index, member in enumerate(subscribed):
                length = share + (1 if index < extra else 0)
                if length:
                    chosen.setdefault(member.member_id, {})[topic] = list(range(start, start + length))
                start += length
        return _assignments(members, chosen)


class RoundRobinAssignor:
    """Every subscribed partition, sorted by (topic, partition), dealt to the members in turn."""

    name = "roundrobin"

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[GroupMember]) -> dict[str, Assignment]:
        """A member not subscribed to a partition's topic is passed over for that partition."""
        ordered = member_order(members)
        topics = sorted({t for m in members for t in m.subscription.topics} & set(partition_counts))
        chosen: dict[str, dict[str, list[int]]] = {}
        turn = 0
        for topic in topics:
            for partition in range(partition_counts[topic]):
                while topic not in ordered[turn % len(ordered)].subscription.topics:
                    turn += 1
                member = ordered[turn % len(ordered)]
                chosen.setdefault(member.member_id, {}).setdefault(topic, []).append(partition)
                turn += 1
        return _assignments(members, chosen)


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor())}
DEFAULT_ASSIGNORS = ("range", "roundrobin")  # Kafka's Java client offers range first, then cooperative-sticky
