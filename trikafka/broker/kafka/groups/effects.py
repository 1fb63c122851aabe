"""What one call on a group decided (docs/protocol.md §17.4), sans I/O: the JoinGroup and SyncGroup
answers now ready, whether the group's metadata must be written (§17.3), the members its deadlines
removed.  The Trio side (``membership.py``) and the simulation carry them out."""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .member import JoinAnswer, Member, SyncAnswer


@dataclass(slots=True)
class Effects:
    """What one call decided: answers now ready, whether to write the metadata, a rebalance done."""

    joins: dict[str, JoinAnswer] = field(default_factory=dict)
    syncs: dict[str, SyncAnswer] = field(default_factory=dict)
    store: bool = False
    rebalanced: bool = False
    expired: list[str] = field(default_factory=list)  # members removed by their deadline (session, rebalance)
    consumer_changed: bool = False  # the group's consumer-protocol state changed: write its records (§17.9)

    def merge(self, other: Effects) -> Effects:
        self.expired += other.expired
        self.joins.update(other.joins)
        self.syncs.update(other.syncs)
        self.store = self.store or other.store
        self.rebalanced = self.rebalanced or other.rebalanced
        self.consumer_changed = self.consumer_changed or other.consumer_changed
        return self

    def refuse(self, member: Member, error: ErrorCode, join: bool = True) -> None:
        """Answer ``member``'s waiting SyncGroup, and (``join``) its waiting JoinGroup, with ``error``;
        neither waits any more."""
        if join and member.awaiting_join:
            member.awaiting_join = False
            self.joins[member.member_id] = JoinAnswer(error, member.member_id)
        if member.awaiting_sync:
            member.awaiting_sync = False
            self.syncs[member.member_id] = SyncAnswer(error)
