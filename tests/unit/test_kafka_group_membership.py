"""The group membership state machine against scripted coordinator answers (docs/protocol.md §17.8)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers.group_answers import answer, found, sent
from trikafka.client.kafka.client import BrokerNode
from trikafka.client.kafka.membership import Assigned, GroupMembership, GroupRequest, Phase, Revoked
from trikafka.kafka.consumer_protocol import (Assignment, Subscription, decode_assignment, encode_assignment,
                                              encode_subscription)

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
SUBSCRIPTION = encode_subscription(Subscription(("t",)))
MINE = Assignment({"t": (0, 1)})


def joined(member_id: str = "m-1", leader: str = "m-0", generation_id: int = 1,
           code: ErrorCode = ErrorCode.none, members: tuple[tuple[str, str | None], ...] = ()) -> object:
    return answer(JOIN_GROUP, 9, error_code=code, generation_id=generation_id, protocol_type="consumer",
                  protocol_name="range", leader=leader, skip_assignment=False, member_id=member_id,
                  members=[{"member_id": m, "group_instance_id": i, "metadata": SUBSCRIPTION} for m, i in members])


def synced(assignment: Assignment = MINE, code: ErrorCode = ErrorCode.none) -> object:
    return answer(SYNC_GROUP, 5, error_code=code, protocol_type="consumer", protocol_name="range",
                  assignment=encode_assignment(assignment) if code == ErrorCode.none else b"")


def beat(code: ErrorCode = ErrorCode.none) -> object:
    return answer(HEARTBEAT, 4, error_code=code)


def stable(group_instance_id: str | None = None) -> GroupMembership:
    """A follower member that has its assignment, at time 0."""
    membership = GroupMembership("g", [("range", SUBSCRIPTION)], group_instance_id=group_instance_id)
    assert sent(membership, 0).api == "FIND_COORDINATOR"
    membership.handle(found(), 0)
    assert sent(membership, 0).api == "JOIN_GROUP"
    membership.handle(joined(), 0)
    assert sent(membership, 0).api == "SYNC_GROUP"
    membership.handle(synced(), 0)
    assert membership.take_events() == [Assigned(MINE, 1)]
    return membership


@pytest.mark.parametrize("version", range(5))
def test_find_coordinator_answers_of_every_version(version: int) -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)])
    request = sent(membership, 0)
    assert request.api == "FIND_COORDINATOR" and not request.to_coordinator
    membership.handle(found(version), 0)
    assert membership.coordinator == BrokerNode(2, "broker-2", 9092)
    assert membership.phase is Phase.JOIN


def test_a_follower_joins_with_the_member_id_it_is_given_then_syncs_and_heartbeats() -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)], heartbeat_interval_s=3.0)
    sent(membership, 0)
    membership.handle(found(), 0)
    first = sent(membership, 0)
    assert first.api == "JOIN_GROUP" and first.values["member_id"] == ""
    assert first.values["protocols"] == [{"name": "range", "metadata": SUBSCRIPTION}]
    assert first.values["session_timeout"] == datetime.timedelta(seconds=45)
    membership.handle(joined(code=ErrorCode.member_id_required), 0)
    second = sent(membership, 0)
    assert second.api == "JOIN_GROUP" and second.values["member_id"] == "m-1"
    membership.handle(joined(), 0)
    assert not membership.is_leader
    sync = sent(membership, 0)
    assert sync.api == "SYNC_GROUP" and sync.values["assignments"] == [] and sync.values["generation_id"] == 1
    membership.handle(synced(), 1.0)
    assert membership.take_events() == [Assigned(MINE, 1)]
    assert membership.phase is Phase.STABLE and membership.assignment == MINE
    assert membership.poll(3.9) is None
    assert membership.deadline_s(3.9) == 4.0
    assert sent(membership, 4.0) == GroupRequest("HEARTBEAT", {"group_id": "g", "generation_id": 1,
                                                               "member_id": "m-1", "group_instance_id": None})
    assert membership.poll(10.0) is None  # one request in flight
    membership.handle(beat(), 4.5)
    assert membership.deadline_s(4.5) == 7.5


def test_the_leader_assigns_from_its_members_subscriptions() -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)])
    sent(membership, 0)
    membership.handle(found(), 0)
    sent(membership, 0)
    membership.handle(joined(member_id="m-0", members=(("m-0", None), ("m-1", "static-1"))), 0)
    assert membership.is_leader and membership.phase is Phase.ASSIGN
    assert [(m.member_id, m.group_instance_id, m.subscription.topics) for m in membership.members] == [
        ("m-0", None, ("t",)), ("m-1", "static-1", ("t",))]
    assert membership.poll(0) is None and membership.deadline_s(0) is None
    membership.assign({"m-0": MINE, "m-1": Assignment({"t": (2,)})})
    sync = sent(membership, 0)
    assert [(a["member_id"], decode_assignment(a["assignment"])[1]) for a in sync.values["assignments"]] == [
        ("m-0", MINE), ("m-1", Assignment({"t": (2,)}))]


@pytest.mark.parametrize("code", [ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                  ErrorCode.coordinator_load_in_progress])
def test_find_coordinator_retries_after_a_backoff(code: ErrorCode) -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)], retry_backoff_s=0.5)
    sent(membership, 0)
    membership.handle(found(code=code), 0)
    assert membership.poll(0.4) is None and membership.deadline_s(0.4) == 0.5
    assert sent(membership, 0.5).api == "FIND_COORDINATOR"


def test_heartbeat_rebalance_in_progress_revokes_and_rejoins_with_the_same_member_id() -> None:
    membership = stable()
    sent(membership, 3.0)
    membership.handle(beat(ErrorCode.rebalance_in_progress), 3.0)
    assert membership.take_events() == [Revoked(MINE)]
    request = sent(membership, 3.0)
    assert request.api == "JOIN_GROUP" and request.values["member_id"] == "m-1"


@pytest.mark.parametrize("static", [None, "instance-1"])
@pytest.mark.parametrize("code", [ErrorCode.illegal_generation, ErrorCode.unknown_member_id])
def test_a_fenced_generation_rejoins(code: ErrorCode, static: str | None) -> None:
    membership = stable(static)
    sent(membership, 3.0)
    membership.handle(beat(code), 3.0)
    assert membership.take_events() == [Revoked(MINE)]
    assert membership.generation_id == -1
    keeps_id = code == ErrorCode.illegal_generation or static is not None
    request = sent(membership, 3.0 + membership.retry_backoff_s)
    assert request.api == "JOIN_GROUP" and request.values["member_id"] == ("m-1" if keeps_id else "")


@pytest.mark.parametrize("code", [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available])
def test_a_moved_coordinator_is_found_again_and_the_member_heartbeats_on(code: ErrorCode) -> None:
    membership = stable()
    sent(membership, 3.0)
    membership.handle(beat(code), 3.0)
    assert membership.coordinator is None and membership.take_events() == []
    assert membership.poll(3.0) is None  # (see the next test)
    later = 3.0 + membership.retry_backoff_s
    assert sent(membership, later).api == "FIND_COORDINATOR"
    membership.handle(found(), later)
    assert membership.phase is Phase.STABLE and membership.assignment == MINE
    assert sent(membership, later).api == "HEARTBEAT"


@pytest.mark.parametrize("code", [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available])
def test_a_coordinator_that_keeps_refusing_is_asked_again_only_after_a_backoff(code: ErrorCode) -> None:
    """While the brokers' metadata still names a broker that no longer coordinates the group, each
    FindCoordinator finds it again and it refuses again: without a backoff between rounds the member
    spins at one instant (the Kafka simulation world's seed 1 did, and its virtual clock stopped)."""
    membership = GroupMembership("g", [("range", SUBSCRIPTION)], retry_backoff_s=0.5)
    for now in (0.0, 0.5, 1.0):
        assert sent(membership, now).api == "FIND_COORDINATOR"
        membership.handle(found(), now)
        assert sent(membership, now).api == "JOIN_GROUP"
        membership.handle(joined(code=code), now)
        assert membership.poll(now) is None and membership.deadline_s(now) == now + 0.5


def test_a_broken_connection_finds_the_coordinator_after_a_backoff() -> None:
    membership = stable()
    sent(membership, 3.0)
    membership.connection_failed(3.0)
    assert membership.poll(3.0) is None
    assert sent(membership, 3.0 + membership.retry_backoff_s).api == "FIND_COORDINATOR"


def test_load_in_progress_sends_the_same_join_again() -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)], retry_backoff_s=0.5)
    sent(membership, 0)
    membership.handle(found(), 0)
    sent(membership, 0)
    membership.handle(joined(code=ErrorCode.coordinator_load_in_progress), 0)
    assert membership.poll(0.1) is None
    assert sent(membership, 0.5).api == "JOIN_GROUP"


def test_sync_rebalance_in_progress_joins_again() -> None:
    membership = GroupMembership("g", [("range", SUBSCRIPTION)])
    sent(membership, 0)
    membership.handle(found(), 0)
    sent(membership, 0)
    membership.handle(joined(), 0)
    sent(membership, 0)
    membership.handle(synced(code=ErrorCode.rebalance_in_progress), 0)
    assert sent(membership, 0).api == "JOIN_GROUP"


@pytest.mark.parametrize("code", [ErrorCode.fenced_instance_id, ErrorCode.inconsistent_group_protocol,
                                  ErrorCode.group_authorization_failed])
def test_other_errors_fail_the_membership(code: ErrorCode) -> None:
    membership = stable("instance-1")
    sent(membership, 3.0)
    membership.handle(beat(code), 3.0)
    assert membership.phase is Phase.FAILED
    assert membership.error is not None and membership.error.error_code == code
    assert membership.take_events() == [Revoked(MINE)]
    assert membership.poll(10.0) is None


def test_a_session_with_no_answered_heartbeat_finds_the_coordinator_again() -> None:
    membership = stable()
    membership.session_timeout_s = 10.0
    assert sent(membership, 10.0).api == "FIND_COORDINATOR"


def test_a_coordinator_found_again_after_a_silent_session_gets_a_heartbeat() -> None:
    """Finding the coordinator restarts the session's clock (as Kafka's consumer does): the member
    then heartbeats, and the coordinator's answer says whether it is still in the group.  Judged by
    the old clock, the session was still over, and the member found the coordinator again and again
    at one instant (the Kafka simulation world's seed 1 spun so)."""
    membership = stable()
    membership.session_timeout_s = 10.0
    assert sent(membership, 10.0).api == "FIND_COORDINATOR"
    membership.handle(found(), 10.0)
    assert sent(membership, 10.0).api == "HEARTBEAT"


def test_a_dynamic_member_leaves_and_a_static_one_does_not() -> None:
    dynamic = stable()
    dynamic.leave()
    assert dynamic.take_events() == [Revoked(MINE)]
    request = sent(dynamic, 1.0)
    assert request.api == "LEAVE_GROUP" and request.values["members"][0]["member_id"] == "m-1"
    dynamic.handle(answer(LEAVE_GROUP, 5, error_code=ErrorCode.none, members=[]), 1.0)
    assert dynamic.phase is Phase.LEFT
    static = stable("instance-1")
    static.leave()
    assert static.take_events() == [Revoked(MINE)]
    assert static.phase is Phase.LEFT and static.poll(1.0) is None


def test_an_answer_to_a_request_sent_before_the_leave_keeps_the_member_leaving() -> None:
    """A consumer closing while its SyncGroup (or JoinGroup) is in flight: the answer must not make
    it Stable again.  It did: the closing member took the assignment, heartbeated on instead of
    leaving, and its close waited out the request timeout (the Kafka world's seed 1: a copier
    that ended held both partitions for 5 s, then stayed in the group a session more)."""
    for api, answered in (("SYNC_GROUP", synced()), ("JOIN_GROUP", joined())):
        membership = GroupMembership("g", [("range", SUBSCRIPTION)])
        sent(membership, 0)
        membership.handle(found(), 0)
        if api == "SYNC_GROUP":
            sent(membership, 0)
            membership.handle(joined(), 0)
        else:
            membership.member_id = "m-1"
        assert sent(membership, 0).api == api
        membership.leave()
        membership.handle(answered, 0.5)
        assert membership.take_events() == []
        request = sent(membership, 0.5)
        assert request.api == "LEAVE_GROUP" and request.values["members"][0]["member_id"] == "m-1"


def test_a_join_answered_after_the_leave_is_left_with_the_member_id_it_handed_out() -> None:
    """The first JoinGroup (no member id yet) in flight when the consumer closes: the coordinator
    now knows the member by the id it hands out, so the member leaves with that id."""
    membership = GroupMembership("g", [("range", SUBSCRIPTION)])
    sent(membership, 0)
    membership.handle(found(), 0)
    assert sent(membership, 0).api == "JOIN_GROUP"
    membership.leave()
    membership.handle(joined(code=ErrorCode.member_id_required, member_id="m-7"), 0.5)
    request = sent(membership, 0.5)
    assert request.api == "LEAVE_GROUP" and request.values["members"][0]["member_id"] == "m-7"


def test_a_coordinator_found_after_the_leave_does_not_join() -> None:
    """Closing while FindCoordinator is in flight: the member is gone, its answer starts no join."""
    membership = GroupMembership("g", [("range", SUBSCRIPTION)])
    assert sent(membership, 0).api == "FIND_COORDINATOR"
    membership.leave()
    membership.handle(found(), 0.5)
    assert membership.phase is Phase.LEFT and membership.poll(0.5) is None
