"""What a group consumer owns: its partitions, where it stands in each, and the znodes it wrote for them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trikafka.zk import paths

from .fetcher import FetchTarget, PartitionKey
from .registry import parse_partition_name


def owner_path(group: str, key: PartitionKey) -> str:
    """``/consumers/<group>/owners/<topic>/<b>-<p>`` of ``key`` (docs/protocol.md §8.1)."""
    broker_id, part = parse_partition_name(key[1])
    return paths.consumer_owner(group, key[0], broker_id, part)


def offset_path(group: str, key: PartitionKey) -> str:
    """``/consumers/<group>/offsets/<topic>/<b>-<p>`` of ``key`` (docs/protocol.md §8.1)."""
    broker_id, part = parse_partition_name(key[1])
    return paths.consumer_offset(group, key[0], broker_id, part)


def key_of(path: str) -> PartitionKey:
    """The partition an owner or offsets node path names."""
    parts = path.rsplit("/", 2)
    return parts[-2], parts[-1]


class Ownership:
    """The partitions this consumer owns, their positions and commit state.

    Changed only by the rebalancer and the commits (under the consumer's lock)
    and, for positions and unacknowledged batches, by the delivering iterator.
    Every ownership change bumps ``generation``: whatever was fetched before it
    is stale.
    """

    def __init__(self) -> None:
        self.owned: frozenset[PartitionKey] = frozenset()
        self.generation = 0
        self.threads: dict[PartitionKey, str] = {}  # the consumer thread id each owner node names
        # Offset after the last message handed out (None: no committed offset yet).
        self.positions: dict[PartitionKey, int | None] = {}
        self.committed: dict[PartitionKey, int | None] = {}
        # Starts of batches handed out by next_batch and not acknowledged, in order.
        self.unacked: dict[PartitionKey, list[int]] = {}
        self.offset_nodes: set[PartitionKey] = set()  # offsets nodes known to exist
        self.unrecorded: set[PartitionKey] = set()  # owner nodes created, not yet in ``owned``
        # Versions of the owner nodes our fenced multis check (owned and unrecorded
        # keys): a successor that takes over our consumer id replaces them with
        # strictly larger versions.
        self.owner_versions: dict[PartitionKey, int] = {}

    def new_generation(self) -> None:
        """Everything fetched so far is stale."""
        self.generation += 1

    def drop(self) -> None:
        """Own nothing any more (the session or the consumer id is lost)."""
        self.generation += 1
        self.owned = frozenset()
        self.threads.clear()
        self.positions.clear()
        self.committed.clear()
        self.unacked.clear()
        self.offset_nodes.clear()
        self.unrecorded.clear()
        self.owner_versions.clear()

    def forget(self, keys: Iterable[PartitionKey]) -> None:
        """``keys`` are released (or taken from us): drop everything about them."""
        keys = set(keys)
        self.owned = self.owned - keys
        for key in keys:
            self.threads.pop(key, None)
            self.owner_versions.pop(key, None)
            self.positions.pop(key, None)
            self.committed.pop(key, None)
            self.unacked.pop(key, None)
            self.offset_nodes.discard(key)

    def forget_unrecorded(self, keys: Iterable[PartitionKey]) -> None:
        """Owner nodes of an interrupted claim, ``keys``, are deleted."""
        keys = set(keys)
        self.unrecorded -= keys
        for key in keys:
            self.owner_versions.pop(key, None)

    def created(self, keys: Iterable[PartitionKey], version: int) -> None:
        """The owner nodes of ``keys`` are this session's, at ``version``."""
        self.owner_versions.update(dict.fromkeys(keys, version))

    def unrecord(self, keys: Iterable[PartitionKey]) -> None:
        """Owner nodes of ``keys`` exist but are not in ``owned`` (yet): ``add`` records
        them, or the next rebalance releases them."""
        self.unrecorded.update(keys)

    def committed_to(self, written: Iterable[tuple[PartitionKey, int]], released: Iterable[PartitionKey]) -> None:
        """A commit multi went through: offsets ``written``, owner nodes ``released`` deleted."""
        for key, position in written:
            self.committed[key] = position
            self.offset_nodes.add(key)
        for key in released:
            self.owner_versions.pop(key, None)

    def flip_offset_node(self, key: PartitionKey) -> None:
        """The offsets node of ``key`` appeared or vanished under a commit."""
        self.offset_nodes.symmetric_difference_update({key})

    def add(self, gain: Mapping[PartitionKey, str], starts: Mapping[PartitionKey, int | None],
            present: set[PartitionKey]) -> None:
        """Claimed partitions ``gain`` (key -> thread id) become owned, starting at
        their committed offsets ``starts``; ``present`` have an offsets node."""
        self.unrecorded -= gain.keys()
        self.owned = self.owned | gain.keys()
        self.threads.update(gain)
        for key, start in starts.items():
            self.positions[key] = start
            self.committed[key] = start
            if key in present:
                self.offset_nodes.add(key)

    def fetch_targets(self) -> list[FetchTarget]:
        """One fetch target per owned partition, at its position, for this generation."""
        targets = []
        for key in sorted(self.owned):
            broker_id, part = parse_partition_name(key[1])
            targets.append(FetchTarget(self.generation, key, broker_id, part, self.positions.get(key)))
        return targets

    def hand_out(self, key: PartitionKey, start: int, end: int) -> None:
        """A batch from ``start`` to ``end`` was handed out; commits stay at ``start`` until acknowledged."""
        self.positions[key] = end
        self.unacked.setdefault(key, []).append(start)

    def acknowledge(self, key: PartitionKey, start: int) -> None:
        """The batch of ``key`` starting at ``start`` is handled: commits may pass it."""
        pending = self.unacked.get(key)
        if pending is not None and start in pending:
            pending.remove(start)
            if not pending:
                del self.unacked[key]

    def committable(self, key: PartitionKey) -> int | None:
        """What a commit writes: the first unacknowledged batch's start, else the position."""
        pending = self.unacked.get(key)
        return pending[0] if pending else self.positions.get(key)
