"""KIP-890 part 1's verification guards of one partition (docs/protocol.md §19.5.7).

A guard stands for one check with the transaction coordinator of a producer's
transactional batch.  It is recorded when the check starts, cleared by the
producer's next marker or transactional batch on the partition, and an append
of a batch that opens a transaction must present the guard still recorded: a
marker that landed between the coordinator's answer and the append has
cleared it, so the batch cannot open a transaction that already ended.  In
memory only, on the leader; nothing here is written.  No I/O.
"""

from __future__ import annotations


class VerificationGuard:
    """One verification of one producer on one partition; compared by identity only."""

    __slots__ = ("producer_id",)

    def __init__(self, producer_id: int):
        self.producer_id = producer_id

    def __repr__(self) -> str:
        return f"VerificationGuard(producer_id={self.producer_id}, id={id(self):#x})"


class VerificationGuards:
    """The guard recorded for each producer id of one partition (§19.5.7)."""

    __slots__ = ("_guards",)

    def __init__(self) -> None:
        self._guards: dict[int, VerificationGuard] = {}

    def __len__(self) -> int:
        return len(self._guards)

    def start(self, producer_id: int) -> VerificationGuard:
        """The guard of a verification of ``producer_id`` that starts now: the one already recorded
        (a verification of the producer still in flight), else a new one, recorded."""
        guard = self._guards.get(producer_id)
        if guard is None:
            guard = self._guards[producer_id] = VerificationGuard(producer_id)
        return guard

    def clear(self, producer_id: int) -> None:
        """The producer's marker or transactional batch was appended: its guard no longer admits."""
        self._guards.pop(producer_id, None)

    def admits(self, producer_id: int, guard: VerificationGuard | None) -> bool:
        """Whether ``guard`` is the one recorded for ``producer_id``."""
        return guard is not None and self._guards.get(producer_id) is guard
