"""The promises the Kafka-groups world holds the group coordinator to (docs/simulation.md).

1. **No two live members own a partition in one generation**: the SyncGroup
   answers the members acted on never give one partition to two members in
   the same generation.
2. **Committed offsets only move forward**: each partition's committed offset,
   as the coordinator applies its records, is at least every one applied
   before (this world has no user reset).
3. **Acknowledged commits survive a failover**: a coordinator loaded from the
   committed records answers, for each partition, at least the largest offset
   any commit was acknowledged with.
4. **At least once**: every offset below a partition's committed offset was
   consumed by some member.
5. **The group settles**: once the faults stop, every live member is in the
   group's current generation, Stable, and the partitions are all owned
   (``kafka_groups.KafkaGroupsWorld`` judges it at the end of the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checker import Violation

OWNERSHIP = "no two live members own a partition in one generation"
FORWARD = "committed offsets only move forward"
SURVIVE = "acknowledged commits survive a coordinator failover"
AT_LEAST_ONCE = "every offset below a committed offset was consumed"
SETTLES = "the group settles"


@dataclass
class GroupPromises:
    """What members were assigned, consumed and told, checked as it happens."""

    owners: dict[tuple[int, int], str] = field(default_factory=dict)  # (generation, partition) -> member
    committed: dict[int, int] = field(default_factory=dict)  # partition -> largest committed offset applied
    acknowledged: dict[int, int] = field(default_factory=dict)  # partition -> largest offset acknowledged
    consumed_below: dict[int, int] = field(default_factory=dict)  # partition -> every offset below was consumed
    consumed_above: dict[int, set[int]] = field(default_factory=dict)  # partition -> offsets consumed past it

    def own(self, member: str, generation: int, partitions: tuple[int, ...]) -> Violation | None:
        for partition in partitions:
            known = self.owners.setdefault((generation, partition), member)
            if known != member:
                return Violation(OWNERSHIP, f"partition {partition}: {known} and {member} both own it in "
                                 f"generation {generation}")
        return None

    def consume(self, partition: int, start: int, end: int) -> None:
        above = self.consumed_above.setdefault(partition, set())
        above.update(range(start, end))
        low = self.consumed_below.get(partition, 0)
        while low in above:
            above.discard(low)
            low += 1
        self.consumed_below[partition] = low

    def apply(self, partition: int, offset: int) -> Violation | None:
        """The coordinator applied a committed offset of ``partition``."""
        before = self.committed.get(partition, -1)
        if offset < before:
            return Violation(FORWARD, f"partition {partition}: committed offset {offset} after {before}")
        self.committed[partition] = offset
        consumed = self.consumed_below.get(partition, 0)
        if offset > consumed:
            return Violation(AT_LEAST_ONCE, f"partition {partition}: committed offset {offset}, but offset "
                             f"{consumed} was never consumed")
        return None

    def acknowledge(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            self.acknowledged[partition] = max(offset, self.acknowledged.get(partition, -1))

    def loaded(self, broker: int, fetched: dict[int, int]) -> Violation | None:
        """A new coordinator's OffsetFetch answers after its load."""
        for partition, acked in sorted(self.acknowledged.items()):
            if fetched.get(partition, -1) < acked:
                return Violation(SURVIVE, f"partition {partition}: commit of {acked} acknowledged, coordinator "
                                 f"{broker} loaded {fetched.get(partition, -1)}")
        return None
