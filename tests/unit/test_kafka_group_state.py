"""The group state machine (docs/protocol.md §17.4, §17.5) driven by a fake clock: every answer and
error a JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit check can get."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.groups.effects import Effects
from trikafka.broker.kafka.groups.group import Group, GroupSettings, GroupState
from trikafka.broker.kafka.groups.member import NO_DEADLINE
from trikafka.kafka.group_records import GroupValue, MemberValue

SESSION_MS = 10_000
REBALANCE_MS = 30_000
RANGE = (("range", b"r-meta"),)


def group(initial_delay_ms: int = 0) -> Group:
    return Group("g", GroupSettings(initial_rebalance_delay_ms=initial_delay_ms))


def join(g: Group, now_ms: int, member_id: str = "", *, instance: str | None = None, protocols=RANGE,
         client: str = "c", require_known: bool = False, protocol_type: str = "consumer",
         session_ms: int = SESSION_MS):
    return g.join(now_ms, member_id, instance, client, "/h", session_ms, REBALANCE_MS, protocol_type, protocols,
                  require_known)


def stable_pair(g: Group) -> tuple[str, str]:
    """Two members through one rebalance, the leader's assignment written: (leader, follower)."""
    first, answer, effects = join(g, 0)
    assert answer is None and effects.joins[first].generation == 1  # alone, no initial delay: at once
    second, answer, effects = join(g, REBALANCE_MS + 1)
    assert answer is None and g.state is GroupState.PREPARING_REBALANCE
    _, answer, effects = join(g, REBALANCE_MS + 2, first)
    assert answer is None and set(effects.joins) == {first, second}
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == 2
    assert effects.joins[first].members and not effects.joins[second].members  # the leader gets the members
    leader, follower = first, second
    answer, effects = g.sync(REBALANCE_MS + 3, follower, None, 2, None, None, {})
    assert answer is None and not effects.store
    answer, effects = g.sync(REBALANCE_MS + 3, leader, None, 2, "consumer", "range",
                             {leader: b"A", follower: b"B"})
    assert answer is None and effects.store
    done = g.stored(REBALANCE_MS + 4, 2, ErrorCode.none)
    assert {m: a.assignment for m, a in done.syncs.items()} == {leader: b"A", follower: b"B"}
    assert g.state is GroupState.STABLE
    return leader, follower


def test_member_id_required_then_the_join_with_it_waits_for_the_rebalance():
    g = group()
    member_id, answer, _ = join(g, 0, require_known=True)
    assert answer.error == ErrorCode.member_id_required and answer.member_id == member_id
    assert member_id.startswith("c-")
    same, answer, effects = join(g, 1, member_id, require_known=True)
    assert same == member_id
    assert answer is None and effects.joins[member_id].generation == 1  # alone, no delay: completes at once
    assert g.state is GroupState.COMPLETING_REBALANCE


def test_a_pending_member_id_expires_with_its_session():
    g = group()
    member_id, _, _ = join(g, 0, require_known=True)
    assert g.next_deadline_ms() == SESSION_MS
    g.tick(SESSION_MS)
    _, answer, _ = join(g, SESSION_MS + 1, member_id)
    assert answer.error == ErrorCode.unknown_member_id


def test_initial_delay_holds_the_first_rebalance():
    g = group(initial_delay_ms=3000)
    first, answer, effects = join(g, 0)
    assert answer is None and not effects.joins
    second, _, effects = join(g, 1000)  # extends the delay to 4000
    assert not effects.joins and g.next_deadline_ms() == 4000
    assert not g.tick(3999).joins
    assert set(g.tick(4000).joins) == {first, second}


def test_two_members_rebalance_sync_and_heartbeat():
    g = group()
    leader, follower = stable_pair(g)
    assert g.heartbeat(REBALANCE_MS + 5, follower, None, 2) == ErrorCode.none
    assert g.heartbeat(REBALANCE_MS + 5, follower, None, 1) == ErrorCode.illegal_generation
    assert g.heartbeat(REBALANCE_MS + 5, "nobody", None, 2) == ErrorCode.unknown_member_id
    answer, _ = g.sync(REBALANCE_MS + 6, follower, None, 2, None, None, {})  # Stable: answered at once
    assert answer.assignment == b"B"
    answer, _ = g.sync(REBALANCE_MS + 6, follower, None, 2, "connect", None, {})
    assert answer.error == ErrorCode.inconsistent_group_protocol


def test_a_failed_metadata_write_answers_the_syncs_and_rebalances():
    g = group()
    first, _, _ = join(g, 0)
    g.sync(1, first, None, 1, None, None, {first: b"A"})
    effects = g.stored(2, 1, ErrorCode.not_coordinator)
    assert effects.syncs[first].error == ErrorCode.not_coordinator
    assert g.state is GroupState.PREPARING_REBALANCE


def test_a_new_member_makes_the_others_rejoin():
    g = group()
    leader, follower = stable_pair(g)
    now = REBALANCE_MS + 10
    third, answer, _ = join(g, now)
    assert answer is None and g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(now + 1, follower, None, 2) == ErrorCode.rebalance_in_progress
    answer, _ = g.sync(now + 1, follower, None, 2, None, None, {})
    assert answer.error == ErrorCode.rebalance_in_progress
    join(g, now + 2, leader)
    _, _, effects = join(g, now + 3, follower)
    assert set(effects.joins) == {leader, follower, third} and g.generation == 3


def test_the_rebalance_timeout_removes_members_that_do_not_rejoin():
    g = group()
    leader, follower = stable_pair(g)
    now = REBALANCE_MS + 10
    third, _, _ = join(g, now)
    join(g, now + 1, leader)
    for beat_ms in range(now + 5000, now + REBALANCE_MS, 5000):  # alive, but never rejoins
        assert g.heartbeat(beat_ms, follower, None, 2) == ErrorCode.rebalance_in_progress
        assert not g.tick(beat_ms).joins
    assert g.next_deadline_ms() == now + REBALANCE_MS
    effects = g.tick(now + REBALANCE_MS)
    assert set(effects.joins) == {leader, third} and follower not in g.members
    assert effects.rebalanced


def test_a_session_timeout_removes_the_member_and_rebalances():
    g = group()
    leader, follower = stable_pair(g)
    assert g.heartbeat(REBALANCE_MS + 5, leader, None, 2) == ErrorCode.none
    deadline = g.members[follower].session_deadline_ms
    g.tick(deadline - 1)
    assert follower in g.members
    g.tick(deadline)
    assert follower not in g.members and g.state is GroupState.PREPARING_REBALANCE


def test_leave_removes_members_and_names_the_unknown():
    g = group()
    leader, follower = stable_pair(g)
    errors, effects = g.leave(REBALANCE_MS + 10, [(follower, None), ("ghost", None)])
    assert errors == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert g.state is GroupState.PREPARING_REBALANCE
    errors, effects = g.leave(REBALANCE_MS + 11, [(leader, None)])
    assert errors == [ErrorCode.none] and g.state is GroupState.EMPTY and effects.store
    assert g.generation == 3 and g.leader is None
    assert g.protocol_type == "consumer"  # an Empty group keeps its kind (ListGroups names it)


def test_static_member_rejoins_without_a_rebalance_and_fences_the_old_id():
    g = group()
    old, _, _ = join(g, 0, instance="i-1")
    g.sync(1, old, "i-1", 1, None, None, {old: b"A"})
    g.stored(2, 1, ErrorCode.none)
    new, answer, effects = join(g, 3, instance="i-1")  # restarted: no member id, same instance
    assert new != old and answer.error == ErrorCode.none and answer.generation == 1
    assert effects.store and g.state is GroupState.STABLE and g.members[new].assignment == b"A"
    assert g.heartbeat(4, old, "i-1", 1) == ErrorCode.fenced_instance_id
    _, answer, _ = join(g, 4, old, instance="i-1")
    assert answer.error == ErrorCode.fenced_instance_id
    errors, _ = g.leave(5, [("", "i-1")])
    assert errors == [ErrorCode.none] and not g.members


@pytest.mark.parametrize("session_ms", [5999, 1_800_001])
def test_session_timeout_bounds(session_ms):
    g = Group("g", GroupSettings(0, 6000, 1_800_000))
    _, answer, _ = join(g, 0, session_ms=session_ms)
    assert answer.error == ErrorCode.invalid_session_timeout


def test_inconsistent_protocols_are_refused():
    g = group()
    join(g, 0)
    _, answer, _ = join(g, 1, protocols=(("roundrobin", b""),))
    assert answer.error == ErrorCode.inconsistent_group_protocol
    _, answer, _ = join(g, 1, protocol_type="connect")
    assert answer.error == ErrorCode.inconsistent_group_protocol
    _, answer, _ = join(group(), 1, protocols=())
    assert answer.error == ErrorCode.inconsistent_group_protocol


def test_protocol_is_the_one_most_members_prefer():
    g = group(initial_delay_ms=100)
    join(g, 0, protocols=(("range", b""), ("roundrobin", b"")))
    join(g, 1, protocols=(("roundrobin", b""), ("range", b"")))
    join(g, 2, protocols=(("roundrobin", b""), ("range", b"")))
    effects = g.tick(200)
    assert {a.protocol for a in effects.joins.values()} == {"roundrobin"}


def test_commit_checks():
    g = group()
    assert g.check_commit("", -1, None) == ErrorCode.none  # simple commit, no members
    first, _, _ = join(g, 0)
    assert g.check_commit("", -1, None) == ErrorCode.unknown_member_id  # CompletingRebalance: members now
    g.sync(1, first, None, 1, None, None, {first: b""})
    g.stored(2, 1, ErrorCode.none)
    assert g.check_commit("", -1, None) == ErrorCode.unknown_member_id  # members now: no simple commits
    assert g.check_commit(first, 0, None) == ErrorCode.illegal_generation
    assert g.check_commit(first, 1, None) == ErrorCode.none


def test_a_commit_of_the_last_generation_during_completing_rebalance_is_illegal_generation():
    """§17.5, as Kafka: member and generation are checked before the state, so a member whose commit
    carries the generation it had while the next one's JoinGroup answers travel learns ILLEGAL_GENERATION
    (librdkafka's cooperative consumer rejoins); the current generation's commit is REBALANCE_IN_PROGRESS."""
    g = group()
    leader, follower = stable_pair(g)
    generation = g.generation
    join(g, 100, leader, protocols=(("range", b"changed"),))  # the leader's new metadata: a rebalance
    join(g, 101, follower)
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == generation + 1
    assert g.check_commit(follower, generation, None) == ErrorCode.illegal_generation
    assert g.check_commit(follower, generation + 1, None) == ErrorCode.rebalance_in_progress
    assert g.check_commit("stranger", generation + 1, None) == ErrorCode.unknown_member_id


def test_a_loaded_group_is_stable_with_its_stored_members_and_their_sessions_from_the_load():
    g = group()
    g.apply_metadata(GroupValue("consumer", 4, "range", "m1", 1, (
        MemberValue("m1", None, "c", "/h", REBALANCE_MS, SESSION_MS, b"sub", b"asg"),)), 10)
    g.activate(50_000)
    assert g.state is GroupState.STABLE and g.generation == 4 and g.leader == "m1"
    assert g.heartbeat(50_001, "m1", None, 4) == ErrorCode.none
    answer, _ = g.sync(50_002, "m1", None, 4, None, None, {})
    assert answer.assignment == b"asg"
    assert g.next_deadline_ms() == 50_002 + SESSION_MS
    stored = g.metadata_value(7)
    assert stored.members[0].subscription == b"sub" and stored.generation == 4


def test_effects_merge_and_an_idle_group_has_no_deadline():
    assert group().next_deadline_ms() == NO_DEADLINE
    merged = Effects(store=True).merge(Effects(rebalanced=True))
    assert merged.store and merged.rebalanced


def _commit(g: Group, partition: int, commit_ms: int, log_offset: int) -> None:
    from trikafka.kafka.group_records import OffsetValue

    g.offsets.apply("t", partition, OffsetValue(partition, -1, "", commit_ms), log_offset)


def test_offsets_of_a_group_that_never_had_members_expire_by_their_commit_time():
    g = group()
    _commit(g, 0, 1_000, 0)
    _commit(g, 1, 5_000, 1)
    assert g.expired_offsets(wall_ms=10_999, retention_ms=6_000) == [("t", 0)]
    assert g.expired_offsets(wall_ms=11_000, retention_ms=6_000) == [("t", 0), ("t", 1)]
    g.offsets.pending += 1  # a commit being written: nothing expires meanwhile
    assert g.expired_offsets(wall_ms=99_000, retention_ms=6_000) == []


def test_offsets_of_an_emptied_group_expire_together_from_when_it_emptied():
    g = group()
    _commit(g, 0, 1_000, 0)
    _commit(g, 1, 2_000, 1)
    g.apply_metadata(GroupValue("consumer", 3, None, None, 50_000, ()), 2)
    g.activate(0)
    assert g.state is GroupState.EMPTY
    assert g.expired_offsets(wall_ms=55_999, retention_ms=6_000) == []
    assert g.expired_offsets(wall_ms=56_000, retention_ms=6_000) == [("t", 0), ("t", 1)]


def test_a_group_with_members_keeps_its_offsets_and_names_its_subscriptions():
    import struct

    g = group()
    _commit(g, 0, 1, 0)
    # v1: topics, no user data, no owned partitions
    subscription = struct.pack(">hih", 1, 2, 1) + b"a" + struct.pack(">h", 1) + b"b" + struct.pack(">ii", -1, 0)
    join(g, 0, protocols=(("range", subscription),))
    assert g.expired_offsets(wall_ms=10**12, retention_ms=1) == []
    assert g.subscribed_topics() == {"a", "b"}
    other = group()
    join(other, 0, protocol_type="connect")
    assert other.subscribed_topics() is None


def test_a_deleted_group_is_dead_and_forgettable():
    g = group()
    _commit(g, 0, 1, 0)
    assert not g.forgettable
    g.delete()
    assert g.state is GroupState.DEAD and g.forgettable


def test_the_metrics_show_groups_per_state_and_rebalances():
    from trikafka.broker.metrics import BrokerMetrics

    class Status:
        rebalances = 7

        def states(self) -> dict[str, int]:
            return {"Stable": 2, "Empty": 1}

    metrics = BrokerMetrics()
    metrics.watch_groups(Status())
    text = metrics.exposition().decode()
    assert 'trikafka_kafka_groups{state="Stable"} 2.0' in text
    assert 'trikafka_kafka_groups{state="Empty"} 1.0' in text
    assert "trikafka_kafka_group_rebalances_total 7.0" in text
