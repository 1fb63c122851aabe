"""Kafka 4's consumer group (KIP-848, docs/protocol.md §17.9) as a state machine, sans I/O.

The coordinator, not a member, assigns: every heartbeat may raise the group
epoch (a member joined, left, changed its subscription; a subscribed topic
changed), the target assignment is recomputed when the assignment epoch is
behind it, and the member is moved toward its target, revocation before
assignment.  Methods take the time (``now_ms``, monotonic) and the broker's
topics; they change the state, and ``changes`` answers the records that make
the log say what the state says (§17.9's records), as the differences from
what was last written.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import (INTERNAL_TOPICS, ConsumerKey, ConsumerRecord, ConsumerValue,
                                          CurrentAssignmentValue, EpochValue, IgnoredValue, MemberMetadataValue,
                                          MemberState, RecordKey, RecordValue, TargetValue, TopicPartitions)

from .assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, TopicsMetadata
from .member import NO_DEADLINE

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member's temporary leave: it keeps its assignment until its session ends
NO_EPOCH = -1
MEMBER_EPOCH_COMMIT_VERSION = 9  # OffsetCommit v9+: what a consumer-protocol member commits with (§17.9)

Records = list[tuple[RecordKey, RecordValue | None]]
RecordView = dict[ConsumerKey, ConsumerValue]


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """The broker settings a consumer group follows (§17.9)."""

    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms


def to_topic_partitions(assignment: Assignment) -> TopicPartitions:
    """An assignment as the records and the protocol name it: sorted, empty topics left out."""
    return tuple((topic_id, tuple(sorted(indexes))) for topic_id, indexes in sorted(assignment.items())
                 if indexes)


def from_topic_partitions(partitions: TopicPartitions | None) -> Assignment:
    """The inverse of ``to_topic_partitions``."""
    return {topic_id: frozenset(indexes) for topic_id, indexes in partitions or () if indexes}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: rest for t, p in a.items() if (rest := p - b.get(t, frozenset()))}


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    return {t: both for t, p in a.items() if (both := p & b.get(t, frozenset()))}


def _union(a: Assignment, b: Assignment) -> Assignment:
    result = dict(a)
    for t, p in b.items():
        result[t] = result.get(t, frozenset()) | p
    return result


def _subset(a: Assignment, b: Assignment) -> bool:
    return not _minus(a, b)


@dataclass(slots=True)
class ConsumerMember:
    """One member: its metadata (as its record holds it), its epochs, state and partitions, and
    its deadlines (monotonic ms)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = JOIN_EPOCH
    previous_member_epoch: int = NO_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = NO_DEADLINE
    revocation_deadline_ms: int = NO_DEADLINE

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                   self.subscribed_topic_names, self.subscribed_topic_regex,
                                   self.rebalance_timeout_ms, self.server_assignor)

    def current_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state,
                                      to_topic_partitions(self.assigned), to_topic_partitions(self.pending_revocation))

    def subscribes(self, name: str) -> bool:
        """Whether the member subscribes to topic ``name`` (by name or by its regular expression)."""
        if name in self.subscribed_topic_names:
            return True
        regex = self.subscribed_topic_regex
        return regex is not None and name not in INTERNAL_TOPICS and _full_match(regex, name)


def _full_match(regex: str, name: str) -> bool:
    try:
        return re.fullmatch(regex, name) is not None
    except re.error:
        return False


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields; None (and -1 for the rebalance timeout) leaves the
    member's value as it was.  ``owned``: the partitions the client owns (None: unchanged)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    server_names_member: bool = False  # v0: an empty member id is given one by the coordinator


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """What the coordinator answers: the error (and message), the member's id and epoch, and its
    assignment when it is sent (None: unchanged)."""

    error: ErrorCode
    member_id: str
    member_epoch: int
    assignment: Assignment | None = None
    message: str | None = None


class ConsumerGroup:
    """One consumer group of §17.9."""

    def __init__(self, group_id: str, settings: ConsumerSettings | None = None, loading: bool = False):
        self.group_id = group_id
        self.settings = settings or ConsumerSettings()
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        self.instances: dict[str, str] = {}  # instance id -> member id
        self.assignor = DEFAULT_ASSIGNOR
        # The subscribed topics at the group epoch; None after a load, whose records do not say them.
        self._subscribed: dict[str, tuple[uuid.UUID, int]] | None = None if loading else {}
        # Invariant: _written is what the log holds of this group (what was read, or last written).
        self._written: RecordView = {}
        # Records read at a load, until ``activate``; None once the group is live.
        self._loading: RecordView | None = {} if loading else None

    # ----------------------------------------------------------------- records (§17.9)

    def load_record(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        """One record read at a load (the last of a key wins); a live group's records are its own
        state's, so they change nothing."""
        if self._loading is None or isinstance(value, IgnoredValue):
            return
        if value is None:
            self._loading.pop(key, None)
        else:
            self._loading[key] = value

    def activate(self, now_ms: int) -> None:
        """After a load: the group the records say, every session from ``now_ms``."""
        view, self._loading = self._loading, None
        if view is None:
            return
        self._written = dict(view)
        for key, value in view.items():
            if isinstance(value, EpochValue):
                if key.kind is ConsumerRecord.GROUP_METADATA:
                    self.group_epoch = value.epoch
                else:
                    self.assignment_epoch = value.epoch
            elif isinstance(value, MemberMetadataValue):
                member = self._member_record(key.member_id)
                member.instance_id, member.rack_id = value.instance_id, value.rack_id
                member.client_id, member.client_host = value.client_id, value.client_host
                member.subscribed_topic_names = value.subscribed_topic_names
                member.subscribed_topic_regex = value.subscribed_topic_regex
                member.rebalance_timeout_ms, member.server_assignor = value.rebalance_timeout_ms, value.server_assignor
                if value.instance_id is not None:
                    self.instances[value.instance_id] = key.member_id
            elif isinstance(value, TargetValue):
                self.target[key.member_id] = from_topic_partitions(value.partitions)
            elif isinstance(value, CurrentAssignmentValue):
                member = self._member_record(key.member_id)
                member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
                member.state = value.state
                member.assigned = from_topic_partitions(value.assigned)
                member.pending_revocation = from_topic_partitions(value.pending_revocation)
        # A member is one with metadata; a target or current record without it is a leftover.
        for member_id in [m for m in self.members if (ConsumerKey(ConsumerRecord.MEMBER_METADATA, self.group_id, m)
                                                      not in view)]:
            del self.members[member_id]
        self.target = {m: a for m, a in self.target.items() if m in self.members}
        for member in self.members.values():
            member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        self.assignor = self._choose_assignor()

    def _member_record(self, member_id: str) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None:
            member = self.members[member_id] = ConsumerMember(member_id)
        return member

    def view(self) -> RecordView:
        """Every record of the group's state, by key; none for a group that never had a member (a
        heartbeat refused before any join leaves nothing behind)."""
        group = self.group_id
        if self.group_epoch == 0 and not self.members:
            return {}
        view: RecordView = {ConsumerKey(ConsumerRecord.GROUP_METADATA, group): EpochValue(self.group_epoch),
                            ConsumerKey(ConsumerRecord.TARGET_METADATA, group): EpochValue(self.assignment_epoch)}
        for member_id, member in self.members.items():
            view[ConsumerKey(ConsumerRecord.MEMBER_METADATA, group, member_id)] = member.metadata_value()
            if member_id in self.target:
                view[ConsumerKey(ConsumerRecord.TARGET_MEMBER, group, member_id)] = TargetValue(
                    to_topic_partitions(self.target[member_id]))
            view[ConsumerKey(ConsumerRecord.CURRENT_ASSIGNMENT, group, member_id)] = member.current_value()
        return view

    def changes(self) -> tuple[Records, RecordView]:
        """The records that make the log say what the state says, and the view they write (for
        ``written``): tombstones of the records of removed members (current assignment, target,
        metadata), then each new or changed record."""
        view = self.view()
        records: Records = []
        gone = sorted((k for k in self._written if k not in view), key=lambda k: (k.member_id, -k.kind))
        records += [(k, None) for k in gone]
        order = sorted(view, key=lambda k: (k.kind not in (ConsumerRecord.MEMBER_METADATA,), k.kind, k.member_id))
        records += [(k, view[k]) for k in order if self._written.get(k) != view[k]]
        return records, view

    def written(self, view: RecordView) -> None:
        """``view``'s records are committed: the log now says that."""
        self._written = view

    # ----------------------------------------------------------------- ConsumerGroupHeartbeat

    def heartbeat(self, now_ms: int, request: Heartbeat, topics: TopicsMetadata) -> HeartbeatAnswer:
        """One ConsumerGroupHeartbeat (§17.9); ``topics``: the broker's topics now."""
        epoch = request.member_epoch
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return self._refuse(request, ErrorCode.unsupported_assignor,
                                f"server assignor {request.server_assignor!r} is not one of {sorted(ASSIGNORS)}")
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now_ms, request)
        if epoch == JOIN_EPOCH:
            found = self._join(now_ms, request)
        else:
            found = self._known(request)
        if isinstance(found, HeartbeatAnswer):
            return found
        member = found
        joined = member.member_epoch == JOIN_EPOCH  # a new member: the group changes whatever it subscribes to
        member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        if self._update(member, request) or joined:
            self.group_epoch += 1
            self.assignor = self._choose_assignor()
        self._check_topics(topics)
        if self.group_epoch > self.assignment_epoch:
            self._assign(topics)
        before = dict(member.assigned)
        self._reconcile(now_ms, member, request.owned)
        send = (epoch == JOIN_EPOCH or member.assigned != before
                or (request.owned is not None and request.owned != member.assigned))
        return HeartbeatAnswer(ErrorCode.none, member.member_id, member.member_epoch,
                               dict(member.assigned) if send else None)

    @staticmethod
    def _refuse(request: Heartbeat, error: ErrorCode, message: str | None = None) -> HeartbeatAnswer:
        return HeartbeatAnswer(error, request.member_id, request.member_epoch, None, message)

    def _join(self, now_ms: int, request: Heartbeat) -> ConsumerMember | HeartbeatAnswer:
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return self._refuse(request, ErrorCode.invalid_request,
                                "a join (member epoch 0) names subscribed_topic_names or subscribed_topic_regex")
        member_id = request.member_id
        if not member_id:
            if not request.server_names_member:
                return self._refuse(request, ErrorCode.invalid_request, "the member id must be set (v1+)")
            member_id = str(uuid.uuid4())
        instance_id = request.instance_id
        if instance_id is not None and (old_id := self.instances.get(instance_id)) is not None:
            old = self.members[old_id]
            if old_id != member_id:
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    return self._refuse(request, ErrorCode.unreleased_instance_id,
                                        f"instance {instance_id!r} is still member {old_id}")
                return self._replace_static(old, member_id)
        known = self.members.get(member_id)
        if known is not None:
            self._remove(known)  # at epoch 0 the client owns nothing: it joins afresh
        member = ConsumerMember(member_id, instance_id, client_id=request.client_id, client_host=request.client_host)
        self.members[member_id] = member
        if instance_id is not None:
            self.instances[instance_id] = member_id
        return member

    def _replace_static(self, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """KIP-848's static membership: the instance's new member takes the old one's place, epoch
        and assignment; the group epoch does not move."""
        old_id = old.member_id
        del self.members[old_id]
        old.member_id = member_id
        old.member_epoch = old.previous_member_epoch
        self.members[member_id] = old
        assert old.instance_id is not None
        self.instances[old.instance_id] = member_id
        if old_id in self.target:
            self.target[member_id] = self.target.pop(old_id)
        return old

    def _known(self, request: Heartbeat) -> ConsumerMember | HeartbeatAnswer:
        member = self.members.get(request.member_id)
        if request.instance_id is not None:
            holder = self.instances.get(request.instance_id)
            if holder is None:
                return self._refuse(request, ErrorCode.unknown_member_id)
            if holder != request.member_id:
                return self._refuse(request, ErrorCode.fenced_instance_id,
                                    f"instance {request.instance_id!r} is member {holder}")
        if member is None:
            return self._refuse(request, ErrorCode.unknown_member_id)
        epoch = request.member_epoch
        if epoch != member.member_epoch:
            lost_answer = (epoch == member.previous_member_epoch and request.owned is not None
                           and _subset(request.owned, member.assigned))
            if not lost_answer:
                return self._refuse(request, ErrorCode.fenced_member_epoch,
                                    f"member epoch {epoch}, the coordinator's is {member.member_epoch}")
        return member

    def _update(self, member: ConsumerMember, request: Heartbeat) -> bool:
        """Take the request's non-null fields; whether the subscription, rack or assignor changed."""
        before = (member.subscribed_topic_names, member.subscribed_topic_regex, member.rack_id, member.server_assignor)
        if request.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(request.subscribed_topic_names))
        if request.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = request.subscribed_topic_regex or None
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.server_assignor is not None:
            member.server_assignor = request.server_assignor
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.client_id:
            member.client_id = request.client_id
        if request.client_host:
            member.client_host = request.client_host
        return before != (member.subscribed_topic_names, member.subscribed_topic_regex, member.rack_id,
                          member.server_assignor)

    def _choose_assignor(self) -> str:
        named = Counter(m.server_assignor for m in self.members.values() if m.server_assignor is not None)
        if not named:
            return DEFAULT_ASSIGNOR
        most = max(named.values())
        return next(name for name in ASSIGNORS if named.get(name) == most)

    def _subscriptions(self, topics: TopicsMetadata) -> dict[str, frozenset[str]]:
        return {member_id: frozenset(name for name in topics if member.subscribes(name))
                for member_id, member in self.members.items()}

    def _check_topics(self, topics: TopicsMetadata) -> None:
        """A subscribed topic appeared, went or changed its partition count: a new group epoch."""
        wanted = set().union(*self._subscriptions(topics).values()) if self.members else set()
        subscribed = {name: topics[name] for name in sorted(wanted)}
        if subscribed != self._subscribed:
            if self._subscribed is not None and self.group_epoch == self.assignment_epoch:
                self.group_epoch += 1  # (else a new target is due anyway, or a load: taken as they are)
            self._subscribed = subscribed

    def _assign(self, topics: TopicsMetadata) -> None:
        """The target assignment at the group epoch."""
        self.target = ASSIGNORS[self.assignor](self._subscriptions(topics), topics, self.target)
        self.assignment_epoch = self.group_epoch

    # ----------------------------------------------------------------- reconciliation

    def _reconcile(self, now_ms: int, member: ConsumerMember, owned: Assignment | None) -> None:
        """Move ``member`` toward its target: revoke first; then the new epoch, with what no other
        member still owns (§17.9)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _intersect(owned, member.pending_revocation):
                return  # still owns a partition it must give up
            member.pending_revocation = {}
        elif member.state is MemberState.STABLE and member.member_epoch == self.assignment_epoch:
            return
        target = self.target.get(member.member_id, {})
        keep = _intersect(member.assigned, target)
        revoke = _minus(member.assigned, target)
        if revoke:
            member.assigned, member.pending_revocation = keep, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            timeout_ms = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else \
                self.settings.session_timeout_ms
            member.revocation_deadline_ms = now_ms + timeout_ms
            return
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
        others: Assignment = {}
        for other in self.members.values():
            if other is not member:
                others = _union(others, _union(other.assigned, other.pending_revocation))
        wanted = _minus(target, keep)
        member.assigned = _union(keep, _minus(wanted, others))
        member.state = MemberState.UNRELEASED_PARTITIONS if _intersect(wanted, others) else MemberState.STABLE
        member.revocation_deadline_ms = NO_DEADLINE

    # ----------------------------------------------------------------- leaving, timers

    def _leave(self, now_ms: int, request: Heartbeat) -> HeartbeatAnswer:
        member = self.members.get(request.member_id)
        if member is None and request.instance_id is not None:
            member = self.members.get(self.instances.get(request.instance_id, ""))
        if member is None:
            return self._refuse(request, ErrorCode.unknown_member_id)
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        else:
            self._remove(member)
        return HeartbeatAnswer(ErrorCode.none, member.member_id, request.member_epoch)

    def _remove(self, member: ConsumerMember) -> None:
        """The member is gone: its partitions are free, the group epoch moves."""
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.instances.get(member.instance_id) == member.member_id:
            del self.instances[member.instance_id]
        self.group_epoch += 1
        self.assignor = self._choose_assignor()

    def next_deadline_ms(self) -> int:
        """When ``tick`` must next run (NO_DEADLINE: nothing to time)."""
        deadlines = [d for m in self.members.values() for d in (m.session_deadline_ms, m.revocation_deadline_ms)
                     if d != NO_DEADLINE]
        return min(deadlines) if deadlines else NO_DEADLINE

    def tick(self, now_ms: int) -> list[str]:
        """Remove every member whose session, or whose time to revoke, ended; their ids."""
        expired = [m for m in self.members.values()
                   if (m.session_deadline_ms != NO_DEADLINE and m.session_deadline_ms <= now_ms)
                   or (m.revocation_deadline_ms != NO_DEADLINE and m.revocation_deadline_ms <= now_ms)]
        for member in expired:
            self._remove(member)
        return [m.member_id for m in expired]

    # ----------------------------------------------------------------- offsets, description

    def check_commit(self, member_id: str, epoch: int, now_ms: int = -1, commit_version: int | None = None) -> ErrorCode:
        """Whether an OffsetCommit of ``commit_version`` (or, with a member epoch, an OffsetFetch:
        None) of this member and epoch may go on (§17.9): as Kafka 4, a simple commit only while
        the group has no members, then the member, the version, the epoch (any other is stale)."""
        if epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if commit_version is not None and commit_version < MEMBER_EPOCH_COMMIT_VERSION:
            return ErrorCode.unsupported_version
        if epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        if now_ms >= 0:
            member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        return ErrorCode.none

    @property
    def state(self) -> str:
        """The group's state as ConsumerGroupDescribe and ListGroups name it."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    @property
    def forgettable(self) -> bool:
        """Nothing of the group is in the log any more."""
        return not self.members and not self._written and self._loading is None

    def subscribed_topics(self) -> set[str]:
        """The topic names the members subscribe to by name (§17.5's OffsetDelete check)."""
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

