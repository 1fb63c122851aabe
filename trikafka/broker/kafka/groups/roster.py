"""Who is in a group (docs/protocol.md §17.4), sans I/O: its members, their static instance ids,
its leader and protocol type, the protocol they can agree on, and their sessions."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from trikafka.kafka.consumer_protocol import decode_subscription
from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.group_records import GroupValue, MemberValue

from .member import NO_DEADLINE, Member, Protocols


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

    def replace(self, old: Member, new: Member) -> None:
        """``new`` takes ``old``'s place (a static member back under a new member id, KIP-345), as leader too."""
        del self.members[old.member_id]
        self.add(new)
        if self.leader == old.member_id:
            self.leader = new.member_id

    def remove(self, member: Member) -> None:
        """Remove ``member``; a leader leaving hands over to the next member."""
        del self.members[member.member_id]
        if member.group_instance_id is not None and self.instances.get(member.group_instance_id) == member.member_id:
            del self.instances[member.group_instance_id]
        if self.leader == member.member_id:
            self.leader = next(iter(self.members), None)

    def named(self, member_id: str, instance_id: str | None) -> Member | ErrorCode:
        """The member a request names: FENCED_INSTANCE_ID when its instance id is another member's,
        UNKNOWN_MEMBER_ID when there is no such member (§17.4)."""
        owner = self.instances.get(instance_id) if instance_id is not None else None
        if owner is not None and owner != member_id:
            return ErrorCode.fenced_instance_id
        member = self.members.get(member_id)
        return ErrorCode.unknown_member_id if member is None else member

    def leaving(self, member_id: str, instance_id: str | None) -> Member | ErrorCode:
        """The member a LeaveGroup entry names (v3+: an empty member id names the instance's, §17.4)."""
        if instance_id is not None:
            current = self.instances.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        member = self.members.get(member_id)
        return ErrorCode.unknown_member_id if member is None else member

    def clear(self) -> None:
        self.members.clear()
        self.instances.clear()

    def load(self, value: GroupValue, now_ms: int) -> None:
        """The members a metadata record names (§17.3), each session running from ``now_ms``."""
        self.clear()
        self.protocol_type = value.protocol_type
        self.leader = value.leader
        for stored in value.members:
            member = Member(stored.member_id, stored.group_instance_id, stored.client_id, stored.client_host,
                            stored.session_timeout_ms, stored.rebalance_timeout_ms, value.protocol_type,
                            ((value.protocol or "", stored.subscription),), stored.assignment)
            member.touch(now_ms)
            self.add(member)

    def records(self, protocol: str | None) -> tuple[MemberValue, ...]:
        """The members as the metadata record names them (§17.2), with their metadata for ``protocol``."""
        return tuple(MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                 m.session_timeout_ms, m.metadata_for(protocol), m.assignment)
                     for m in self.members.values())

    def join_metadata(self, protocol: str | None) -> tuple[tuple[str, str | None, bytes], ...]:
        """What the leader's JoinGroup answer lists: each member's id, instance id and metadata for ``protocol``."""
        return tuple((m.member_id, m.group_instance_id, m.metadata_for(protocol)) for m in self.members.values())

    def session_deadlines(self) -> list[int]:
        """The running session deadlines: a member whose JoinGroup waits is timed by the rebalance instead."""
        return [m.session_deadline_ms for m in self.members.values()
                if not m.awaiting_join and m.session_deadline_ms != NO_DEADLINE]

    def expired(self, now_ms: int) -> list[Member]:
        """The members whose session deadline is at or before ``now_ms``."""
        return [m for m in self.members.values()
                if not m.awaiting_join and m.session_deadline_ms != NO_DEADLINE and m.session_deadline_ms <= now_ms]

    def subscribed_topics(self, protocol: str | None) -> set[str] | None:
        """The topics the members subscribe to with ``protocol``; None unless they are of the ``consumer``
        protocol type with subscriptions the broker can read."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(decode_subscription(member.metadata_for(protocol))[1].topics)
            except KafkaCodecError:
                return None
        return topics

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
