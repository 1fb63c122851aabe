"""A consumer's membership of a Kafka 4 consumer group (KIP-848), sans I/O (docs/protocol.md §17.8, §17.9).

``ConsumerMembership`` stands beside ``GroupMembership`` (the classic
protocol) with the same inputs, outputs and events, so one driver runs
either: FindCoordinator, then ConsumerGroupHeartbeat with member epoch 0
(join), then a heartbeat every interval the coordinator names, carrying the
member's epoch, subscription and owned partitions.  The coordinator computes
the assignment; an answer's assignment is the member's new target, which
becomes ``Revoked`` (what it owns and the target lacks) and ``Assigned``
(what the target adds) events.  The next heartbeat, sent at once, reports
the partitions owned after those events, so a revocation is acknowledged
only once the driver has acted on it (committed).

The protocol names topics by id: ``topic_names`` (id -> name), which the
driver fills from Metadata, names them; a target partition of an id not in
it is left out until an answer names it again.

Errors: NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (or a broken
connection) find the coordinator again; COORDINATOR_LOAD_IN_PROGRESS sends
the heartbeat again after the backoff; FENCED_MEMBER_EPOCH and
UNKNOWN_MEMBER_ID lose the partitions (``Revoked`` with ``lost``) and join
again at epoch 0 with the same member id; anything else fails.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Mapping

from kio.schema.errors import ErrorCode

from trikafka.kafka.consumer_protocol import Assignment

from . import schema
from .client import BrokerNode
from .errors import KafkaResponseError
from .membership import (COORDINATOR_GONE_ERRORS, DEFAULT_HEARTBEAT_INTERVAL_S, DEFAULT_REBALANCE_TIMEOUT_S,
                         DEFAULT_RETRY_BACKOFF_S, DEFAULT_SESSION_TIMEOUT_S, Assigned, GroupRequest, OneRequestAtATime,
                         Phase, Revoked, find_coordinator_values)

JOIN_EPOCH = 0  # ConsumerGroupHeartbeat's member epochs (§17.9)
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NO_REGEX = ""
_LEAVE_EPOCHS = frozenset({LEAVE_EPOCH, STATIC_LEAVE_EPOCH})
_REJOIN_ERRORS = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})
Owned = Mapping[uuid.UUID, frozenset[int]]


def heartbeat_topic_ids(answer: object) -> set[uuid.UUID]:
    """The topic ids a ConsumerGroupHeartbeat answer's assignment names (empty: it has none)."""
    assignment = schema.field(answer, "assignment")
    return set() if assignment is None else {t.topic_id for t in assignment.topic_partitions}


@dataclass
class ConsumerMembership(OneRequestAtATime):
    """One member of the consumer group ``group_id`` subscribed to ``topics``; see the module docstring.

    ``generation_id`` is the member epoch: what the consumer's commits carry.
    ``session_timeout_s`` is kept for the driver's shape only: the
    coordinator's ``group.consumer.session.timeout.ms`` rules the session.
    """

    group_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    rebalance_timeout_s: float = DEFAULT_REBALANCE_TIMEOUT_S
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    phase: Phase = Phase.FIND_COORDINATOR
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))  # v1: the client names itself (KIP-1082)
    generation_id: int = JOIN_EPOCH
    coordinator: BrokerNode | None = None
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    error: KafkaResponseError | None = None
    events: list[Assigned | Revoked] = field(default_factory=list)
    _owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    _resume: Phase = Phase.STABLE
    _in_flight: GroupRequest | None = None
    _not_before_s: float = 0.0
    _next_heartbeat_s: float = 0.0

    @property
    def assignment(self) -> Assignment:
        """The partitions this member owns, by topic name."""
        return _named(self._owned, self.topic_names)

    # ------------------------------------------------------------------ outputs

    def _request(self, now_s: float) -> GroupRequest | None:
        if self.phase is Phase.FIND_COORDINATOR:
            return GroupRequest("FIND_COORDINATOR", find_coordinator_values(self.group_id), to_coordinator=False)
        if self.phase is Phase.JOIN or (self.phase is Phase.STABLE and now_s >= self._next_heartbeat_s):
            return self._heartbeat(self.generation_id)
        if self.phase is Phase.LEAVE:
            return self._heartbeat(LEAVE_EPOCH if self.group_instance_id is None else STATIC_LEAVE_EPOCH)
        return None

    def _heartbeat(self, epoch: int) -> GroupRequest:
        return GroupRequest("CONSUMER_GROUP_HEARTBEAT", {
            "group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
            "instance_id": self.group_instance_id, "rack_id": None,
            "rebalance_timeout": datetime.timedelta(seconds=self.rebalance_timeout_s),
            # "" is no regex (Kafka's clients clear it so); librdkafka's mock also wants it set beside the names
            "subscribed_topic_names": self.topics, "subscribed_topic_regex": NO_REGEX, "server_assignor": None,
            "topic_partitions": [{"topic_id": topic, "partitions": tuple(sorted(ids))}
                                 for topic, ids in sorted(self._owned.items())]})

    # ------------------------------------------------------------------ inputs

    def rejoin(self, now_s: float) -> None:
        """Give up the partitions and join again at epoch 0 with the same member id."""
        if self.phase in (Phase.LEAVE, Phase.LEFT, Phase.FAILED):
            return
        self._revoke(lost=True)
        self.generation_id = JOIN_EPOCH
        if self.phase is not Phase.FIND_COORDINATOR:
            self.phase = Phase.JOIN
        self._resume = Phase.JOIN
        self._not_before_s = now_s + self.retry_backoff_s

    def leave(self) -> None:
        """Give up the assignment and leave (a static member: leave for now, epoch -2)."""
        self._revoke(lost=False)
        if self.phase in (Phase.LEFT, Phase.FAILED):
            return
        joined = self.generation_id != JOIN_EPOCH or self.phase is Phase.STABLE
        self.phase = Phase.LEAVE if joined and self.coordinator is not None else Phase.LEFT
        self._not_before_s = 0.0

    def connection_failed(self, now_s: float) -> None:
        """The request in flight got no answer (the connection broke): find the coordinator again."""
        request, self._in_flight = self._in_flight, None
        if request is not None and request.values.get("member_epoch") in _LEAVE_EPOCHS:
            self.phase = Phase.LEFT
            return
        self._lose_coordinator(now_s + self.retry_backoff_s)

    def handle(self, answer: object, now_s: float) -> None:
        """The answer to the request in flight."""
        request, self._in_flight = self._in_flight, None
        if request is None:
            raise RuntimeError("an answer with no request in flight")
        if request.api == "FIND_COORDINATOR":
            return self._on_find_coordinator(answer, now_s)
        if request.values["member_epoch"] in _LEAVE_EPOCHS:
            self.phase = Phase.LEFT  # whatever it answers, the member is gone: its session would end it anyway
            return
        if self.phase in self._CLOSING:
            return  # a heartbeat sent before the leave was asked: the leave (if any) goes next
        self._on_heartbeat(answer, now_s)

    def _coordinator_found(self, now_s: float) -> None:
        self.phase = Phase.JOIN if self._resume is Phase.JOIN or self.generation_id == JOIN_EPOCH else Phase.STABLE
        self._next_heartbeat_s = now_s

    def _on_heartbeat(self, answer: object, now_s: float) -> None:
        code = ErrorCode(int(schema.field(answer, "error_code", 0)))
        if code in COORDINATOR_GONE_ERRORS:
            # After a backoff, as the classic member does: FindCoordinator may name the refusing broker again.
            return self._lose_coordinator(now_s + self.retry_backoff_s)
        if code == ErrorCode.coordinator_load_in_progress:
            self._not_before_s = now_s + self.retry_backoff_s
            return
        if code in _REJOIN_ERRORS:
            return self.rejoin(now_s)
        if code != ErrorCode.none:
            message = schema.field(answer, "error_message")
            return self._fail(code, "heartbeat" + (f": {message}" if message else ""))
        self.member_id = str(schema.field(answer, "member_id") or self.member_id)
        self.generation_id = int(schema.field(answer, "member_epoch"))
        self.phase = self._resume = Phase.STABLE
        interval_s = schema.field(answer, "heartbeat_interval")
        self._next_heartbeat_s = now_s + (interval_s.total_seconds() if interval_s is not None
                                          else self.heartbeat_interval_s)
        assignment = schema.field(answer, "assignment")
        if assignment is not None:
            target = {t.topic_id: frozenset(map(int, t.partitions)) for t in assignment.topic_partitions
                      if t.topic_id in self.topic_names}
            if self._reconcile(target):
                self._next_heartbeat_s = now_s  # acknowledge the new assignment at once

    # ------------------------------------------------------------------ transitions

    def _reconcile(self, target: Owned) -> bool:
        """Revoke what ``target`` drops, then assign what it adds; whether anything changed."""
        dropped = _minus(self._owned, target)
        added = _minus(target, self._owned)
        if dropped:
            self.events.append(Revoked(_named(dropped, self.topic_names)))
        if added:
            self.events.append(Assigned(_named(added, self.topic_names), self.generation_id))
        self._owned = {topic: ids for topic, ids in target.items() if ids}
        return bool(dropped or added)

    def _fail(self, code: ErrorCode, what: str) -> None:
        self._revoke(lost=True)
        self.error = KafkaResponseError(code, f"group {self.group_id}: {what}")
        self.phase = Phase.FAILED

    def _lose_coordinator(self, not_before_s: float) -> None:
        if self.phase in (Phase.LEAVE, Phase.LEFT, Phase.FAILED):
            return
        self.coordinator = None
        if self.phase is not Phase.FIND_COORDINATOR:
            self._resume = self.phase
        self.phase = Phase.FIND_COORDINATOR
        self._not_before_s = not_before_s

    def _revoke(self, *, lost: bool) -> None:
        if self._owned:
            self.events.append(Revoked(self.assignment, lost=lost))
        self._owned = {}


def _minus(a: Owned, b: Owned) -> dict[uuid.UUID, frozenset[int]]:
    rest = {topic: ids - b.get(topic, frozenset()) for topic, ids in a.items()}
    return {topic: ids for topic, ids in rest.items() if ids}


def _named(owned: Owned, names: Mapping[uuid.UUID, str]) -> Assignment:
    return Assignment({names[topic]: tuple(sorted(ids)) for topic, ids in sorted(owned.items(), key=lambda i: names[i[0]])})

