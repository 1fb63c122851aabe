"""A consumer's membership of a Kafka-protocol group, sans I/O (docs/protocol.md §17.8).

``GroupMembership`` is the classic rebalance protocol as Kafka's clients run
it: FindCoordinator, then JoinGroup (again with the member id a
MEMBER_ID_REQUIRED answer hands out), then SyncGroup (the leader first gets
its members' subscriptions and hands back their assignments), then a
Heartbeat every ``heartbeat_interval_s`` while the generation holds.  Its
inputs are the answers (``kio`` response bodies) and the clock; its outputs
are the next request (``poll``), when to ask again (``deadline_s``), and
events (``Assigned``, ``Revoked``) for the consumer.  A driver sends what
``poll`` returns to the coordinator and feeds back the answer (``handle``) or
the failure (``connection_failed``); one request is in flight at a time.

The assignment is eager: a member that rejoins first revokes everything it
holds.  Errors, as Kafka's clients treat them:

* NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection, a session
  with no answered heartbeat for ``session_timeout_s``: find the coordinator
  again, then resume where the member was;
* COORDINATOR_LOAD_IN_PROGRESS: the same request again after a backoff;
* REBALANCE_IN_PROGRESS: rejoin, keeping the member id;
* ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: rejoin (UNKNOWN_MEMBER_ID and a
  dynamic member also drop the member id);
* anything else (FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, ...): the
  membership fails with ``KafkaResponseError``.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

from kio.schema.errors import ErrorCode

from trikafka.kafka.consumer_protocol import (PROTOCOL_TYPE, Assignment, decode_assignment, decode_subscription,
                                              encode_assignment)

from trikafka.kafka.apis import KafkaApi

from . import schema
from .assignors import GroupMember
from .client import BrokerNode
from .connection import UnsupportedApi
from .errors import KafkaResponseError

# Kafka's consumer defaults: session.timeout.ms, max.poll.interval.ms (the rebalance timeout),
# heartbeat.interval.ms, retry.backoff.ms.
DEFAULT_SESSION_TIMEOUT_S = 45.0
DEFAULT_REBALANCE_TIMEOUT_S = 300.0
DEFAULT_HEARTBEAT_INTERVAL_S = 3.0
DEFAULT_RETRY_BACKOFF_S = 0.1
NO_GENERATION = -1
NO_MEMBER_ID = ""
COORDINATOR_KEY_TYPE_GROUP = 0  # FindCoordinator key types (§17.1, §19.5.1)
COORDINATOR_KEY_TYPE_TRANSACTION = 1
# the coordinator moved or is not there yet: find it again
COORDINATOR_GONE_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})


class Phase(enum.Enum):
    """Where the membership is; ``poll`` sends the request of the phase."""

    FIND_COORDINATOR = "find-coordinator"
    JOIN = "join"
    ASSIGN = "assign"  # the leader computes assignments (``assign``); nothing to send
    SYNC = "sync"
    STABLE = "stable"
    LEAVE = "leave"
    LEFT = "left"
    FAILED = "failed"


@dataclass(frozen=True)
class GroupRequest:
    """One request to send: the ``KafkaApi`` member's name and the body's values (``schema.build``)."""

    api: str
    values: Mapping[str, object]
    to_coordinator: bool = True  # FindCoordinator goes to any broker


@dataclass(frozen=True)
class Assigned:
    """SyncGroup gave this member ``assignment`` in ``generation_id``."""

    assignment: Assignment
    generation_id: int


@dataclass(frozen=True)
class Revoked:
    """The member gives up ``assignment`` (it rejoins or leaves): commit what it consumed first.

    ``lost``: the group already took them (the member was fenced), so a commit could only be refused.
    """

    assignment: Assignment
    lost: bool = False


def group_api(name: str) -> KafkaApi:
    """The api table's entry of a group api by its name; ``UnsupportedApi`` while the table has none."""
    api = KafkaApi.__members__.get(name)
    if api is None:
        raise UnsupportedApi(f"{name} is not in the api table of §16.3")
    return api


def find_coordinator_values(key: str, key_type: int = COORDINATOR_KEY_TYPE_GROUP) -> dict[str, object]:
    """FindCoordinator's values for a group (or, key type 1, a transactional id), at any version
    (v4+ asks for a list of keys)."""
    return {"key": key, "key_type": key_type, "coordinator_keys": (key,)}


def coordinator_of(answer: object) -> tuple[ErrorCode, BrokerNode | None]:
    """A FindCoordinator answer's error code and, when it is NONE, the coordinator it names."""
    entries = schema.field(answer, "coordinators")
    found = entries[0] if entries else answer  # v4+ answers per key, v0-v3 at the top level
    code = ErrorCode(int(schema.field(found, "error_code", 0)))
    if code != ErrorCode.none:
        return code, None
    return code, BrokerNode(int(schema.field(found, "node_id")), str(schema.field(found, "host")),
                             int(schema.field(found, "port")))


class OneRequestAtATime:
    """What both memberships share (this one and ``ConsumerMembership``): one request in flight,
    a backoff (``_not_before_s``), a heartbeat clock, FindCoordinator's answer, and the events.

    A subclass gives ``_request`` (what its phase sends), ``_coordinator_found`` (the phase after
    FindCoordinator), ``_fail`` and, where its clock may end the session, ``_expire``.
    """

    _NOTHING_TO_SEND: ClassVar[frozenset[Phase]] = frozenset({Phase.LEFT, Phase.FAILED})
    # After ``leave``: an answer to a request sent before it must not bring the member back
    _CLOSING: ClassVar[frozenset[Phase]] = frozenset({Phase.LEAVE, Phase.LEFT})
    phase: Phase
    coordinator: BrokerNode | None
    retry_backoff_s: float
    events: list[Assigned | Revoked]
    _in_flight: GroupRequest | None
    _not_before_s: float
    _next_heartbeat_s: float

    @property
    def in_flight(self) -> bool:
        """Whether a request is awaiting its answer."""
        return self._in_flight is not None

    def take_events(self) -> list[Assigned | Revoked]:
        """The events since the last call, oldest first."""
        events, self.events = self.events, []
        return events

    def poll(self, now_s: float) -> GroupRequest | None:
        """The request to send now, or None (one is in flight, a backoff runs, nothing is due)."""
        if self._in_flight is not None or now_s < self._not_before_s:
            return None
        self._expire(now_s)
        request = self._request(now_s)
        self._in_flight = request
        return request

    def deadline_s(self, now_s: float) -> float | None:
        """When ``poll`` may next answer a request (None: only after an answer or a call)."""
        if self._in_flight is not None or self.phase in self._NOTHING_TO_SEND:
            return None
        if self.phase is Phase.STABLE:
            return max(self._not_before_s, self._next_heartbeat_s)
        return max(now_s, self._not_before_s)

    def _on_find_coordinator(self, answer: object, now_s: float) -> None:
        if self.phase in self._CLOSING:
            return  # asked before the leave: a member that knew no coordinator has nothing to leave
        code, coordinator = coordinator_of(answer)
        if code in COORDINATOR_GONE_ERRORS or code == ErrorCode.coordinator_load_in_progress:
            self._not_before_s = now_s + self.retry_backoff_s
            return
        if coordinator is None:
            return self._fail(code, "find coordinator")
        self.coordinator = coordinator
        self._coordinator_found(now_s)

    def _expire(self, now_s: float) -> None:
        del now_s  # no session clock by default

    def _request(self, now_s: float) -> GroupRequest | None:
        raise NotImplementedError

    def _coordinator_found(self, now_s: float) -> None:
        raise NotImplementedError

    def _fail(self, code: ErrorCode, what: str) -> None:
        raise NotImplementedError


@dataclass
class GroupMembership(OneRequestAtATime):
    """One member of ``group_id``; see the module docstring.

    ``protocols``: (assignor name, subscription bytes) in preference order.
    ``group_instance_id`` makes the member static (KIP-345): it keeps its
    member id across restarts and does not send LeaveGroup when it closes.
    """

    group_id: str
    protocols: Sequence[tuple[str, bytes]]
    group_instance_id: str | None = None
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    rebalance_timeout_s: float = DEFAULT_REBALANCE_TIMEOUT_S
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    phase: Phase = Phase.FIND_COORDINATOR
    member_id: str = NO_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_name: str | None = None
    leader_id: str | None = None
    coordinator: BrokerNode | None = None
    assignment: Assignment = field(default_factory=Assignment)
    error: KafkaResponseError | None = None
    members: tuple[GroupMember, ...] = ()  # the leader's view of the group while it assigns
    events: list[Assigned | Revoked] = field(default_factory=list)
    _resume: Phase = Phase.JOIN
    _in_flight: GroupRequest | None = None
    _not_before_s: float = 0.0
    _next_heartbeat_s: float = 0.0
    _last_heartbeat_ok_s: float | None = None
    _assignments: dict[str, Assignment] = field(default_factory=dict)

    @property
    def is_leader(self) -> bool:
        """Whether this member assigns the group's partitions in this generation."""
        return self.leader_id is not None and self.leader_id == self.member_id

    _NOTHING_TO_SEND: ClassVar[frozenset[Phase]] = frozenset({Phase.ASSIGN, Phase.LEFT, Phase.FAILED})

    # ------------------------------------------------------------------ outputs

    def _expire(self, now_s: float) -> None:
        if self.phase is Phase.STABLE and self._session_expired(now_s):
            self._lose_coordinator(now_s, backoff=False)

    def _request(self, now_s: float) -> GroupRequest | None:
        if self.phase is Phase.FIND_COORDINATOR:
            return GroupRequest("FIND_COORDINATOR", find_coordinator_values(self.group_id), to_coordinator=False)
        if self.phase is Phase.JOIN:
            return GroupRequest("JOIN_GROUP", {
                "group_id": self.group_id, "member_id": self.member_id,
                "session_timeout": datetime.timedelta(seconds=self.session_timeout_s),
                "rebalance_timeout": datetime.timedelta(seconds=self.rebalance_timeout_s),
                "group_instance_id": self.group_instance_id, "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": name, "metadata": metadata} for name, metadata in self.protocols],
                "reason": None})
        if self.phase is Phase.SYNC:
            return GroupRequest("SYNC_GROUP", {
                **self._identity(), "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol_name,
                "assignments": [{"member_id": member_id, "assignment": encode_assignment(assignment)}
                                for member_id, assignment in self._assignments.items()]})
        if self.phase is Phase.STABLE and now_s >= self._next_heartbeat_s:
            return GroupRequest("HEARTBEAT", self._identity())
        if self.phase is Phase.LEAVE:
            return GroupRequest("LEAVE_GROUP", {
                "group_id": self.group_id, "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                             "reason": "the consumer is closing"}]})
        return None

    def _identity(self) -> dict[str, object]:
        return {"group_id": self.group_id, "generation_id": self.generation_id, "member_id": self.member_id,
                "group_instance_id": self.group_instance_id}

    # ------------------------------------------------------------------ inputs

    def assign(self, assignments: Mapping[str, Assignment]) -> None:
        """The leader's assignments for ``members`` (in phase ASSIGN); SyncGroup carries them next."""
        if self.phase is not Phase.ASSIGN:
            raise RuntimeError(f"assign in phase {self.phase.value}")
        self._assignments = dict(assignments)
        self.phase = Phase.SYNC

    def rejoin(self, now_s: float) -> None:
        """Join again (an OffsetCommit answered a stale generation, the subscription changed)."""
        if self.phase in (Phase.LEAVE, Phase.LEFT, Phase.FAILED):
            return
        self._revoke()
        if self.phase is not Phase.FIND_COORDINATOR:
            self.phase = Phase.JOIN
        self._resume = Phase.JOIN
        del now_s  # a rejoin is sent at once

    def leave(self) -> None:
        """Give up the assignment and, for a dynamic member with an id, leave the group."""
        self._revoke()
        if self.phase in (Phase.LEFT, Phase.FAILED):
            return
        dynamic = self.group_instance_id is None and self.member_id != NO_MEMBER_ID
        self.phase = Phase.LEAVE if dynamic and self.coordinator is not None else Phase.LEFT
        self._not_before_s = 0.0

    def connection_failed(self, now_s: float) -> None:
        """The request in flight got no answer (the connection broke): find the coordinator again."""
        request, self._in_flight = self._in_flight, None
        if request is not None and request.api == "LEAVE_GROUP":
            self.phase = Phase.LEFT
            return
        self._lose_coordinator(now_s, backoff=True)

    def handle(self, answer: object, now_s: float) -> None:
        """The answer to the request in flight."""
        request, self._in_flight = self._in_flight, None
        if request is None:
            raise RuntimeError("an answer with no request in flight")
        if self.phase in self._CLOSING and request.api != "LEAVE_GROUP":
            return self._answered_while_leaving(request, answer)
        getattr(self, f"_on_{request.api.lower()}")(answer, now_s)

    def _answered_while_leaving(self, request: GroupRequest, answer: object) -> None:
        """The answer to a request sent before ``leave``: the member stays leaving (a SyncGroup's
        assignment is not taken, a JoinGroup starts no sync), but a JoinGroup's member id is the one
        the coordinator now knows it by, so a dynamic member's LeaveGroup names it."""
        member_id = str(schema.field(answer, "member_id", "") or "") if request.api == "JOIN_GROUP" else ""
        if not member_id:
            return
        self.member_id = member_id
        if self.group_instance_id is None and self.coordinator is not None:
            self.phase = Phase.LEAVE

    def _coordinator_found(self, now_s: float) -> None:
        self.phase = self._resume  # the phase it was in is sent at once
        if self.phase is Phase.STABLE:  # the session's clock restarts (Kafka's consumer: resetSessionTimeout)
            self._last_heartbeat_ok_s = now_s

    def _on_join_group(self, answer: object, now_s: float) -> None:
        code = ErrorCode(int(schema.field(answer, "error_code", 0)))
        if code == ErrorCode.member_id_required:
            self.member_id = str(schema.field(answer, "member_id"))
            return
        if code != ErrorCode.none:
            return self._on_error(code, "join group", now_s)
        self.generation_id = int(schema.field(answer, "generation_id"))
        self.member_id = str(schema.field(answer, "member_id"))
        self.leader_id = str(schema.field(answer, "leader"))
        self.protocol_name = schema.field(answer, "protocol_name")
        self._assignments = {}
        if self.is_leader and not schema.field(answer, "skip_assignment", False):
            self.members = tuple(
                GroupMember(str(m.member_id), schema.field(m, "group_instance_id"), decode_subscription(m.metadata)[1])
                for m in schema.field(answer, "members", ()))
            self.phase = Phase.ASSIGN
        else:
            self.members = ()
            self.phase = Phase.SYNC

    def _on_sync_group(self, answer: object, now_s: float) -> None:
        code = ErrorCode(int(schema.field(answer, "error_code", 0)))
        if code != ErrorCode.none:
            return self._on_error(code, "sync group", now_s)
        self.assignment = decode_assignment(schema.field(answer, "assignment", b""))[1]
        self.members = ()
        self.phase = self._resume = Phase.STABLE
        self._heartbeat_ok(now_s)
        self.events.append(Assigned(self.assignment, self.generation_id))

    def _on_heartbeat(self, answer: object, now_s: float) -> None:
        code = ErrorCode(int(schema.field(answer, "error_code", 0)))
        if code != ErrorCode.none:
            return self._on_error(code, "heartbeat", now_s)
        self._heartbeat_ok(now_s)

    def _on_leave_group(self, answer: object, now_s: float) -> None:
        del answer, now_s  # whatever it answers, the member is gone: its session would end it anyway
        self.phase = Phase.LEFT

    # ------------------------------------------------------------------ transitions

    def _on_error(self, code: ErrorCode, what: str, now_s: float) -> None:
        if code in COORDINATOR_GONE_ERRORS:
            # After a backoff: until the brokers' metadata catches up, FindCoordinator names the broker
            # that just refused again, and asking at once spins (as Kafka's consumer, retry.backoff.ms).
            self._lose_coordinator(now_s, backoff=True)
        elif code == ErrorCode.coordinator_load_in_progress:
            self._not_before_s = now_s + self.retry_backoff_s
        elif code == ErrorCode.rebalance_in_progress:
            self.rejoin(now_s)
        elif code in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id):
            self.generation_id = NO_GENERATION
            if code == ErrorCode.unknown_member_id and self.group_instance_id is None:
                self.member_id = NO_MEMBER_ID
            self.rejoin(now_s)
            self._not_before_s = now_s + self.retry_backoff_s
        else:
            self._fail(code, what)

    def _fail(self, code: ErrorCode, what: str) -> None:
        self._revoke()
        self.error = KafkaResponseError(code, f"group {self.group_id}: {what}")
        self.phase = Phase.FAILED

    def _lose_coordinator(self, now_s: float, *, backoff: bool) -> None:
        if self.phase in (Phase.LEAVE, Phase.LEFT, Phase.FAILED):
            return
        self.coordinator = None
        if self.phase is not Phase.FIND_COORDINATOR:
            self._resume = Phase.JOIN if self.phase is Phase.ASSIGN else self.phase
        self.phase = Phase.FIND_COORDINATOR
        self._not_before_s = now_s + (self.retry_backoff_s if backoff else 0.0)
        self._last_heartbeat_ok_s = None if self._resume is not Phase.STABLE else self._last_heartbeat_ok_s

    def _revoke(self) -> None:
        if self.assignment.partitions:
            self.events.append(Revoked(self.assignment))
        self.assignment = Assignment()

    def _heartbeat_ok(self, now_s: float) -> None:
        self._last_heartbeat_ok_s = now_s
        self._next_heartbeat_s = now_s + self.heartbeat_interval_s

    def _session_expired(self, now_s: float) -> bool:
        return self._last_heartbeat_ok_s is not None and now_s - self._last_heartbeat_ok_s >= self.session_timeout_s
