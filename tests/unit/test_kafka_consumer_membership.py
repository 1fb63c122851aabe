"""The consumer-protocol membership (KIP-848) against scripted coordinator answers (docs/protocol.md §17.8)."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.consumer_group_heartbeat.v1.response import Assignment as WireAssignment
from kio.schema.errors import ErrorCode

from tests.helpers.group_answers import answer, found, sent
from trikafka.client.kafka import schema
from trikafka.client.kafka.consumer_membership import ConsumerMembership
from trikafka.client.kafka.membership import Assigned, Phase, Revoked
from trikafka.kafka.consumer_protocol import Assignment

CONSUMER_GROUP_HEARTBEAT = 68
T, U = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {T: "t", U: "u"}


def beat(epoch: int, assignment: dict[uuid.UUID, tuple[int, ...]] | None = None,
         code: ErrorCode = ErrorCode.none, member_id: str | None = None, interval_s: float = 5.0) -> object:
    given = None if assignment is None else schema.entity(WireAssignment, topic_partitions=[
        {"topic_id": topic, "partitions": ids} for topic, ids in assignment.items()])
    return answer(CONSUMER_GROUP_HEARTBEAT, 1, error_code=code, error_message=None, member_id=member_id,
                  member_epoch=epoch, heartbeat_interval=datetime.timedelta(seconds=interval_s), assignment=given)


def owned(request: object) -> dict[uuid.UUID, tuple[int, ...]]:
    values = request.values  # type: ignore[attr-defined]
    return {entry["topic_id"]: entry["partitions"] for entry in values["topic_partitions"]}


def answered(m: ConsumerMembership, now_s: float, reply: object) -> None:
    """The heartbeat due at ``now_s`` is sent and answered ``reply``."""
    assert sent(m, now_s).api == "CONSUMER_GROUP_HEARTBEAT"
    m.handle(reply, now_s)


def joined(assignment: dict[uuid.UUID, tuple[int, ...]], group_instance_id: str | None = None) -> ConsumerMembership:
    """A member given ``assignment`` at epoch 3, at time 0, its acknowledgement sent and answered."""
    m = ConsumerMembership("g", ("t", "u"), group_instance_id=group_instance_id, topic_names=dict(NAMES))
    assert sent(m, 0).api == "FIND_COORDINATOR"
    m.handle(found(), 0)
    join = sent(m, 0)
    assert join.api == "CONSUMER_GROUP_HEARTBEAT" and join.values["member_epoch"] == 0
    assert join.values["subscribed_topic_names"] == ("t", "u") and join.values["topic_partitions"] == []
    assert join.values["subscribed_topic_regex"] == ""  # no regex; the mock of librdkafka asserts one is set
    m.handle(beat(3, assignment), 0)
    m.take_events()
    assert owned(sent(m, 0)) == assignment
    m.handle(beat(3), 0)
    return m


def test_a_join_is_epoch_0_with_a_member_id_of_its_own_and_the_assignment_is_acknowledged_at_once() -> None:
    m = ConsumerMembership("g", ("t",), topic_names=dict(NAMES))
    assert sent(m, 0).api == "FIND_COORDINATOR"
    m.handle(found(), 0)
    join = sent(m, 0)
    uuid.UUID(join.values["member_id"])  # a UUID of its own (v1, KIP-1082)
    m.handle(beat(1, {T: (0, 1)}), 0)
    assert m.generation_id == 1 and m.phase is Phase.STABLE
    assert m.take_events() == [Assigned(Assignment({"t": (0, 1)}), 1)]
    ack = sent(m, 0)  # not after the interval: the new assignment is reported at once
    assert ack.values["member_epoch"] == 1 and owned(ack) == {T: (0, 1)}
    m.handle(beat(1), 0)
    assert m.poll(4.9) is None
    assert m.deadline_s(0) == 5.0


def test_revocation_comes_before_the_heartbeat_that_acknowledges_it_and_events_are_incremental() -> None:
    m = joined({T: (0, 1), U: (0,)})
    answered(m, 5, beat(3, {T: (1, 2)}))
    assert m.take_events() == [Revoked(Assignment({"t": (0,), "u": (0,)})), Assigned(Assignment({"t": (2,)}), 3)]
    assert owned(sent(m, 5)) == {T: (1, 2)}


def test_an_assignment_of_unnamed_topic_ids_waits_for_their_names() -> None:
    m = joined({T: (0,)})
    m.topic_names.pop(U)
    answered(m, 5, beat(4, {T: (0,), U: (0,)}))
    assert m.take_events() == []
    assert owned(sent(m, 10)) == {T: (0,)}
    m.topic_names[U] = "u"
    m.handle(beat(4, {T: (0,), U: (0,)}), 10)
    assert m.take_events() == [Assigned(Assignment({"u": (0,)}), 4)]


def test_a_fenced_or_unknown_member_loses_its_partitions_and_rejoins_at_epoch_0_with_its_id() -> None:
    for code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
        m = joined({T: (0,)})
        member_id = m.member_id
        answered(m, 5, beat(3, code=code))
        assert m.take_events() == [Revoked(Assignment({"t": (0,)}), lost=True)]
        assert m.poll(5) is None  # the backoff first
        rejoin = sent(m, 5 + m.retry_backoff_s)
        assert (rejoin.values["member_epoch"], rejoin.values["member_id"]) == (0, member_id)
        assert rejoin.values["topic_partitions"] == []


def test_not_coordinator_finds_it_again_then_heartbeats_with_the_same_epoch() -> None:
    m = joined({T: (0,)})
    answered(m, 5, beat(3, code=ErrorCode.not_coordinator))
    # Not at once: until the metadata catches up FindCoordinator may name the refusing broker again.
    assert m.poll(5) is None and m.deadline_s(5) == 5 + m.retry_backoff_s
    later = 5 + m.retry_backoff_s
    assert sent(m, later).api == "FIND_COORDINATOR"
    m.handle(found(), later)
    again = sent(m, later)
    assert again.values["member_epoch"] == 3 and owned(again) == {T: (0,)} and m.take_events() == []


def test_other_errors_fail_the_membership() -> None:
    m = joined({T: (0,)})
    answered(m, 5, beat(3, code=ErrorCode.unreleased_instance_id))
    assert m.phase is Phase.FAILED and m.error is not None and m.error.error_code == ErrorCode.unreleased_instance_id
    assert m.take_events() == [Revoked(Assignment({"t": (0,)}), lost=True)]


def test_leaving_is_epoch_minus_1_and_a_static_member_leaves_with_minus_2() -> None:
    for instance_id, epoch in ((None, -1), ("static-1", -2)):
        m = joined({T: (0,)}, group_instance_id=instance_id)
        m.leave()
        assert m.take_events() == [Revoked(Assignment({"t": (0,)}))]
        leave = sent(m, 1)
        assert leave.values["member_epoch"] == epoch and leave.values["instance_id"] == instance_id
        m.handle(beat(epoch), 1)
        assert m.phase is Phase.LEFT


def test_a_member_that_never_joined_leaves_without_a_request() -> None:
    m = ConsumerMembership("g", ("t",))
    m.leave()
    assert m.phase is Phase.LEFT and m.poll(0) is None


def test_a_heartbeat_answered_after_leave_was_asked_does_not_cancel_the_leave() -> None:
    m = joined({T: (0,)})
    assert sent(m, 5).values["member_epoch"] == 3  # a heartbeat in flight
    m.leave()
    m.handle(beat(3), 5)  # its answer comes after the consumer asked to leave
    assert m.phase is Phase.LEAVE
    assert sent(m, 5).values["member_epoch"] == -1


def test_a_broken_connection_ends_a_leave_but_not_the_heartbeat_before_it() -> None:
    m = joined({T: (0,)})
    sent(m, 5)
    m.leave()
    m.connection_failed(5)  # the heartbeat sent before the leave got no answer
    assert m.phase is Phase.LEAVE and sent(m, 5).values["member_epoch"] == -1
    m.connection_failed(5)  # the leave got none either: its session ends the member
    assert m.phase is Phase.LEFT


def test_a_coordinator_found_after_the_leave_does_not_join() -> None:
    """Closing while FindCoordinator is in flight: its answer starts no join (it did, epoch 0)."""
    m = ConsumerMembership("g", ("t",), topic_names=dict(NAMES))
    assert sent(m, 0).api == "FIND_COORDINATOR"
    m.leave()
    m.handle(found(), 0.5)
    assert m.phase is Phase.LEFT and m.poll(0.5) is None


def test_a_join_answered_after_the_leave_assigns_nothing() -> None:
    """Closing while the first heartbeat (epoch 0) is in flight: the member had not joined, so it is
    gone at once, and the answer that would make it a member with partitions is dropped."""
    m = ConsumerMembership("g", ("t",), topic_names=dict(NAMES))
    sent(m, 0)
    m.handle(found(), 0)
    assert sent(m, 0).values["member_epoch"] == 0
    m.leave()
    m.handle(beat(3, {T: (0,)}), 0.5)
    assert m.phase is Phase.LEFT and m.take_events() == [] and m.poll(0.5) is None
