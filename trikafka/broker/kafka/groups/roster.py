"""Who is in a group (docs/protocol.md §17.4), sans I/O: its members, their static instance ids,
its leader and protocol type, and the protocol they can agree on."""

from __future__ import annotations

from .member import Member, Protocols


class Roster:
    """A group's members; the group's state machine decides when they come and go."""

    def __init__(self) -> None:
        self.members: dict[str, Member] = {}
        self.instances: dict[str, str] = {}  # group instance id -> member id (static members, KIP-345)
        self.leader: str | None = None
        # The first member's; every later member must share it.  It stays when the last member
        # leaves (ListGroups still names an Empty group's kind, as Kafka does); the next first
        # member sets it again.
        self.protocol_type: str | None = None

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.instances[member.group_instance_id] = member.member_id

    def remove(self, member: Member) -> None:
        """Remove ``member``; a leader leaving hands over to the next member."""
        del self.members[member.member_id]
        if member.group_instance_id is not None and self.instances.get(member.group_instance_id) == member.member_id:
            del self.instances[member.group_instance_id]
        if self.leader == member.member_id:
            self.leader = next(iter(self.members), None)

    def clear(self) -> None:
        self.members.clear()
        self.instances.clear()

    def compatible(self, protocol_type: str, protocols: Protocols) -> bool:
        """Whether a member of ``protocol_type`` listing ``protocols`` may join (§17.4)."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        """The protocols every member lists."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The protocol most members prefer among those all list; ties go to the leader's preference."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader or "")
        order = [name for name, _ in leader.protocols] if leader is not None else sorted(candidates)
        return max(votes, key=lambda name: (votes[name], -order.index(name) if name in order else -len(order)))
