"""One consumer group's state machine (docs/protocol.md §17.4, §17.5), sans I/O.

Every method takes the time it happens at (``now_ms``, monotonic; the group
has no clock) and returns what it decided: JoinGroup and SyncGroup answers
that are now ready (``Effects``), and whether the group's metadata must be
written (§17.3).  Each deadline is kept with what it times: a session on its
member, the join phase's and the pending member ids' by the ``Rebalance``;
``next_deadline_ms`` says when ``tick`` must next run.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import NO_TIMESTAMP, GroupValue

from .committed import CommittedOffsets
from .consumer_group import ConsumerGroup, ConsumerSettings
from .effects import Effects
from .member import NO_DEADLINE, JoinAnswer, Member, Protocols, SyncAnswer
from .rebalance import Rebalance
from .roster import Roster


CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


class GroupState(enum.Enum):
    """Kafka's group states (§17.4); the value is the name DescribeGroups and ListGroups answer."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker settings a group follows (§17.4, §17.6)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    consumer: ConsumerSettings = ConsumerSettings()  # Kafka 4's consumer groups' (§17.9)


class Group:
    """One group: its committed offsets, its stored metadata, and its live membership."""

    def __init__(self, group_id: str, settings: GroupSettings | None = None):
        self.group_id = group_id
        self.settings = settings or GroupSettings()
        self.state = GroupState.EMPTY
        self.offsets = CommittedOffsets()
        self.metadata: GroupValue | None = None  # the last metadata record of the partition
        self.metadata_log_offset = -1
        self.generation = 0
        self.protocol: str | None = None
        self.roster = Roster()
        self.rebalance = Rebalance(self.roster, self.settings.initial_rebalance_delay_ms)
        # The group's Kafka 4 consumer-protocol state (§17.9), None for a group that never had one.
        self.consumer: ConsumerGroup | None = None

    def consumer_or_new(self, loading: bool = False) -> ConsumerGroup:
        """The group's consumer-protocol state, a new one (reading records at a load: ``loading``)
        when it has none."""
        if self.consumer is None:
            self.consumer = ConsumerGroup(self.group_id, self.settings.consumer, loading)
        return self.consumer

    @property
    def is_classic(self) -> bool:
        """Whether the classic protocol holds the group now: it has classic members or rebalances."""
        return bool(self.roster.members) or self.state not in (GroupState.EMPTY, GroupState.DEAD)

    @property
    def has_members(self) -> bool:
        """Whether the group has members of either protocol (§17.7's live mark, §17.9)."""
        return bool(self.roster.members) or self.is_consumer

    @property
    def group_type(self) -> str:
        """ListGroups v5's type (§17.6, §17.9): ``consumer`` while Kafka 4's protocol holds the group's
        id (it has its records and no classic member), else ``classic``."""
        return CONSUMER_GROUP_TYPE if self.consumer is not None and not self.is_classic else CLASSIC_GROUP_TYPE

    @property
    def listed_state(self) -> str:
        """The state ListGroups and the metrics name (§17.6): a consumer group's own (§17.9), else the
        classic one's."""
        if self.group_type == CONSUMER_GROUP_TYPE and self.consumer is not None:
            return self.consumer.state
        return self.state.value

    @property
    def is_consumer(self) -> bool:
        """Whether Kafka 4's consumer protocol holds the group now: it has members of it (§17.9)."""
        return self.consumer is not None and bool(self.consumer.members)

    # ----------------------------------------------------------------- records (§17.3)

    def apply_metadata(self, value: GroupValue | None, log_offset: int) -> None:
        if self.metadata_log_offset > log_offset:
            return
        self.metadata = value
        self.metadata_log_offset = log_offset

    def activate(self, now_ms: int) -> None:
        """After a load: the membership the last metadata record names, every session from now (§17.3)."""
        if self.consumer is not None:
            self.consumer.activate(now_ms)
        value = self.metadata
        if value is None:
            self.roster.clear()
            self.state = GroupState.EMPTY
            return
        self.generation = value.generation
        self.protocol = value.protocol
        self.roster.load(value, now_ms)
        self.state = GroupState.STABLE if self.roster.members else GroupState.EMPTY

    def metadata_value(self, wall_ms: int) -> GroupValue:
        """The metadata record of the group as it is now (§17.2)."""
        return GroupValue(self.roster.protocol_type or "", self.generation, self.protocol, self.roster.leader, wall_ms,
                          self.roster.records(self.protocol))

    @property
    def forgettable(self) -> bool:
        """Nothing of the group remains: no offset, no metadata, no member (given or pending), no commit
        being written."""
        if self.state is GroupState.DEAD:
            return not self.offsets.pending
        return (not self.offsets and self.metadata is None and not self.roster.members
                and not self.rebalance.pending_ids and self.state is GroupState.EMPTY
                and (self.consumer is None or self.consumer.forgettable))

    @property
    def members(self) -> dict[str, Member]:
        """The members, by member id (the roster's; read, never changed, outside the group)."""
        return self.roster.members

    @property
    def leader(self) -> str | None:
        return self.roster.leader

    @property
    def protocol_type(self) -> str | None:
        return self.roster.protocol_type

    # ----------------------------------------------------------------- JoinGroup

    def join(self, now_ms: int, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols: Protocols,
             require_known_member_id: bool) -> tuple[str, JoinAnswer | None, Effects]:
        """A JoinGroup: the member's id, and its answer now, or None when it waits for the rebalance
        (its answer then comes in an ``Effects.joins`` under that member id)."""
        joining = Member("", instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                         protocol_type, protocols)  # named below, once its member id is decided
        settings = self.settings
        if not settings.min_session_timeout_ms <= session_timeout_ms <= settings.max_session_timeout_ms:
            return member_id, JoinAnswer(ErrorCode.invalid_session_timeout, member_id), Effects()
        if self.state is GroupState.DEAD:
            return member_id, JoinAnswer(ErrorCode.coordinator_not_available, member_id), Effects()
        if self.is_consumer or not self.roster.compatible(protocol_type, protocols):  # §17.9: one type per group id
            return member_id, JoinAnswer(ErrorCode.inconsistent_group_protocol, member_id), Effects()
        if not member_id:
            return self._join_new(now_ms, joining, require_known_member_id)
        if instance_id is not None and self.roster.instances.get(instance_id, member_id) != member_id:
            return member_id, JoinAnswer(ErrorCode.fenced_instance_id, member_id), Effects()
        if self.rebalance.take_id(member_id):
            return member_id, None, self._add_and_rebalance(now_ms, joining.named(member_id))
        known = self.roster.members.get(member_id)
        if known is None:
            return member_id, JoinAnswer(ErrorCode.unknown_member_id, member_id), Effects()
        return (member_id, *self._join_known(now_ms, known, joining))

    def _join_new(self, now_ms: int, joining: Member,
                  require_known_member_id: bool) -> tuple[str, JoinAnswer | None, Effects]:
        new_id = f"{joining.client_id}-{uuid.uuid4()}"
        instance_id = joining.group_instance_id
        if instance_id is not None and instance_id in self.roster.instances:
            old = self.roster.members[self.roster.instances[instance_id]]
            return (new_id, *self._replace_static(now_ms, old, new_id, joining))
        if require_known_member_id and instance_id is None:  # KIP-394
            self.rebalance.give_id(new_id, now_ms + joining.session_timeout_ms)
            return new_id, JoinAnswer(ErrorCode.member_id_required, new_id), Effects()
        return new_id, None, self._add_and_rebalance(now_ms, joining.named(new_id))

    def _replace_static(self, now_ms: int, old: Member, new_id: str,
                        joining: Member) -> tuple[JoinAnswer | None, Effects]:
        """KIP-345: a static member comes back under a new member id, keeping its assignment."""
        effects = Effects()
        effects.refuse(old, ErrorCode.fenced_instance_id)
        changed = old.protocols != joining.protocols
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host, joining.session_timeout_ms,
                        joining.rebalance_timeout_ms, old.protocol_type, joining.protocols, old.assignment)
        self.roster.replace(old, member)
        member.touch(now_ms)
        if self.state is GroupState.STABLE and not changed:
            effects.store = True  # the new member id is written before the member is answered
            return self._join_answer(member), effects
        member.awaiting_join = True
        return None, effects.merge(self._prepare_rebalance(now_ms))

    def _join_known(self, now_ms: int, member: Member, joining: Member) -> tuple[JoinAnswer | None, Effects]:
        member.touch(now_ms)
        changed = member.protocols != joining.protocols
        member.protocols = joining.protocols
        member.session_timeout_ms = joining.session_timeout_ms
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            member.awaiting_join = True
            return None, self._try_complete_join(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_answer(member), Effects()  # the answer it missed, again
        if self.state is GroupState.STABLE and not changed and member.member_id != self.roster.leader:
            return self._join_answer(member), Effects()
        member.awaiting_join = True
        return None, self._prepare_rebalance(now_ms)

    def _add_and_rebalance(self, now_ms: int, member: Member) -> Effects:
        member.touch(now_ms)
        member.awaiting_join = True
        self.roster.add(member)
        if self.roster.leader is None:
            self.roster.leader = member.member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            self.rebalance.member_added(now_ms)
            return self._try_complete_join(now_ms)
        return self._prepare_rebalance(now_ms)

    # ----------------------------------------------------------------- rebalance

    def _prepare_rebalance(self, now_ms: int) -> Effects:
        effects = Effects()
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.roster.members.values():  # the leader's assignment will not come for this generation
                effects.refuse(member, ErrorCode.rebalance_in_progress, join=False)
        self.rebalance.begin(now_ms, first=self.state is GroupState.EMPTY)
        self.state = GroupState.PREPARING_REBALANCE
        return effects.merge(self._try_complete_join(now_ms))

    def _try_complete_join(self, now_ms: int) -> Effects:
        if self.state is not GroupState.PREPARING_REBALANCE or not self.rebalance.due(now_ms):
            return Effects()
        return self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> Effects:
        """Every member rejoined, or the rebalance timeout passed: the next generation (§17.4)."""
        effects = Effects(rebalanced=True, expired=self.rebalance.complete(now_ms))
        self.generation += 1
        if not self.roster.members:
            self.state = GroupState.EMPTY
            self.protocol = self.roster.leader = None
            effects.store = True  # the Empty generation is written; no one waits for it
            return effects
        self.state = GroupState.COMPLETING_REBALANCE
        self.protocol = self.roster.select_protocol()
        if self.roster.leader not in self.roster.members:
            self.roster.leader = next(iter(self.roster.members))
        for member in self.roster.members.values():
            member.assignment = b""
            effects.joins[member.member_id] = self._join_answer(member)
        return effects  # the metadata is written with the leader's assignment (SyncGroup)

    def _join_answer(self, member: Member) -> JoinAnswer:
        members = self.roster.join_metadata(self.protocol) if member.member_id == self.roster.leader else ()
        return JoinAnswer(ErrorCode.none, member.member_id, self.generation, self.roster.protocol_type, self.protocol,
                          self.roster.leader or "", members)

    def _member_check(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | Member:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        member = self.roster.named(member_id, instance_id)
        if isinstance(member, Member) and generation != self.generation:
            return ErrorCode.illegal_generation
        return member

    # ----------------------------------------------------------------- SyncGroup, Heartbeat, LeaveGroup

    def sync(self, now_ms: int, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol: str | None,
             assignments: dict[str, bytes]) -> tuple[SyncAnswer | None, Effects]:
        """A SyncGroup: its answer now, or None when it waits for the assignment to be written
        (``Effects.store``: write the metadata, then call ``stored``)."""
        checked = self._member_check(member_id, instance_id, generation)
        if isinstance(checked, ErrorCode):
            return SyncAnswer(checked), Effects()
        member = checked
        if (protocol_type is not None and protocol_type != self.roster.protocol_type) or \
                (protocol is not None and protocol != self.protocol):
            return SyncAnswer(ErrorCode.inconsistent_group_protocol), Effects()
        member.touch(now_ms)
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncAnswer(ErrorCode.rebalance_in_progress), Effects()
        if self.state is GroupState.STABLE:
            return SyncAnswer(ErrorCode.none, self.roster.protocol_type, self.protocol, member.assignment), Effects()
        member.awaiting_sync = True
        if member_id != self.roster.leader:
            return None, Effects()
        for other in self.roster.members.values():
            other.assignment = assignments.get(other.member_id, b"")
        return None, Effects(store=True)

    def stored(self, now_ms: int, generation: int, error: ErrorCode) -> Effects:
        """The metadata written at ``generation`` is committed (``error`` none) or failed (§17.3)."""
        effects = Effects()
        if self.generation != generation or self.state is not GroupState.COMPLETING_REBALANCE:
            return effects
        if error != ErrorCode.none:
            for member in self.roster.members.values():
                effects.refuse(member, error, join=False)
                member.assignment = b""
            return effects.merge(self._prepare_rebalance(now_ms))
        self.state = GroupState.STABLE
        for member in self.roster.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                effects.syncs[member.member_id] = SyncAnswer(ErrorCode.none, self.roster.protocol_type, self.protocol,
                                                             member.assignment)
        return effects

    def heartbeat(self, now_ms: int, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """A Heartbeat's answer; it keeps the member's session alive (§17.4)."""
        if self.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        checked = self._member_check(member_id, instance_id, generation)
        if isinstance(checked, ErrorCode):
            return checked
        checked.touch(now_ms)
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, now_ms: int, leaving: list[tuple[str, str | None]]) -> tuple[list[ErrorCode], Effects]:
        """LeaveGroup of (member id, group instance id) pairs (v3+: an empty member id names the
        instance's); each one's error, and the rebalance they start."""
        errors: list[ErrorCode] = []
        effects = Effects()
        removed = False
        for member_id, instance_id in leaving:
            member = self.roster.leaving(member_id, instance_id)
            if isinstance(member, ErrorCode):
                errors.append(member)
                continue
            effects.refuse(member, ErrorCode.unknown_member_id)
            self.roster.remove(member)
            removed = True
            errors.append(ErrorCode.none)
        if removed:
            effects.merge(self._member_gone(now_ms))
        return errors, effects

    def _member_gone(self, now_ms: int) -> Effects:
        if self.state is GroupState.PREPARING_REBALANCE:
            return self._try_complete_join(now_ms)
        return self._prepare_rebalance(now_ms)

    # ----------------------------------------------------------------- timers

    def next_deadline_ms(self) -> int:
        """When ``tick`` must next run (NO_DEADLINE: nothing to time)."""
        deadlines = self.roster.session_deadlines()
        deadlines += self.rebalance.deadlines(joining=self.state is GroupState.PREPARING_REBALANCE)
        if self.consumer is not None:
            deadlines.append(self.consumer.next_deadline_ms())
        deadlines = [d for d in deadlines if d != NO_DEADLINE]
        return min(deadlines) if deadlines else NO_DEADLINE

    def tick(self, now_ms: int) -> Effects:
        """Fire every deadline at or before ``now_ms``: expired sessions, the rebalance's end."""
        effects = Effects()
        expired = self.roster.expired(now_ms)
        for member in expired:
            effects.expired.append(member.member_id)
            effects.refuse(member, ErrorCode.unknown_member_id)  # its JoinGroup does not wait: it has a session
            self.roster.remove(member)
        if expired:
            effects.merge(self._member_gone(now_ms))
        if self.consumer is not None and (gone := self.consumer.tick(now_ms)):
            effects.expired += gone
            effects.consumer_changed = True
        self.rebalance.tick(now_ms)
        return effects.merge(self._try_complete_join(now_ms))

    # ----------------------------------------------------------------- offsets (§17.5)

    def expired_offsets(self, wall_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """The offsets of an Empty group older than the retention: counted from when the group became
        Empty when its metadata says so, else from each commit (§17.5)."""
        if self.state is not GroupState.EMPTY or self.roster.members or self.offsets.pending:
            return []
        emptied_ms = self.metadata.current_state_timestamp_ms if self.metadata is not None else NO_TIMESTAMP
        return self.offsets.expired(wall_ms - retention_ms, emptied_ms)

    def subscribed_topics(self) -> set[str] | None:
        """The topics a ``consumer`` group's members subscribe to; None for another protocol type
        (the broker cannot read their subscriptions)."""
        if self.is_consumer:
            assert self.consumer is not None
            return self.consumer.subscribed_topics()
        return self.roster.subscribed_topics(self.protocol)

    def delete(self) -> None:
        """The group is deleted (its tombstones written): Dead until forgotten (§17.6)."""
        self.state = GroupState.DEAD

    def check_commit(self, member_id: str, generation: int, instance_id: str | None, now_ms: int = -1,
                     commit_version: int | None = None) -> ErrorCode:
        """Whether an OffsetCommit of this member and generation may write (§17.5); a consumer group's
        member needs an OffsetCommit ``commit_version`` with member epochs (§17.9)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if self.is_consumer:
            assert self.consumer is not None
            return self.consumer.check_commit(member_id, generation, now_ms, commit_version)
        if generation < 0 and not member_id and not self.roster.members:
            return ErrorCode.none  # a simple commit: allowed while the group has no members
        checked = self._member_check(member_id, instance_id, generation)  # before the state, as Kafka
        if isinstance(checked, ErrorCode):
            return checked
        if now_ms >= 0:
            checked.touch(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none
