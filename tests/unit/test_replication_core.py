"""Leader ISR bookkeeping, controller elections, truncation walk and znode values."""

from __future__ import annotations

import pytest

from trikafka.broker.replication.election import Cluster, elect, initial_state
from trikafka.broker.replication.isr import LeaderPartition
from trikafka.zk.replication_values import (
    PartitionState, ReplicationValueError, TopicAssignment, TopicConfig,
)
from trikafka.broker.replication.truncation import AskLeader, TruncateTo, first_step, next_step, resolve
from trikafka.log.epochs import EpochEntry, EpochHistory
from trikafka.broker.engine.errors import EngineError


def leader(isr=(1, 2, 3), min_isr=2, start=0, hw=0):
    return LeaderPartition(1, (1, 2, 3), isr, epoch_start=start, high_watermark=hw, lag_time_max_ms=1000,
                           min_insync_replicas=min_isr, now_ms=0)


def test_hw_is_the_minimum_over_the_isr_and_never_moves_back():
    lp = leader()
    lp.on_local_append(30)
    lp.on_follower_fetch(2, 30, now_ms=10)
    assert lp.high_watermark == 0
    lp.on_follower_fetch(3, 20, now_ms=10)
    assert lp.high_watermark == 20
    assert lp.commit_status(30) is None and lp.commit_status(20) == EngineError.NO_ERROR
    lp.apply_isr((1, 2))
    assert lp.high_watermark == 30
    lp.apply_isr((1, 2, 3))
    assert lp.high_watermark == 30


def test_shrink_after_lag_time_and_expand_on_catch_up():
    lp = leader()
    lp.on_local_append(30)
    lp.on_follower_fetch(2, 30, now_ms=900)
    lp.on_follower_fetch(3, 10, now_ms=900)
    assert lp.shrink_proposal(1000) is None
    assert lp.shrink_proposal(1001) == (1, 2)  # 3 not caught up since it was made leader at 0
    lp.apply_isr((1, 2))
    lp.on_follower_fetch(2, 30, now_ms=1100)
    assert lp.high_watermark == 30
    assert lp.expand_proposal() is None  # 3 is at 10 < hw 30
    lp.on_follower_fetch(3, 30, now_ms=1200)
    assert lp.expand_proposal() == (1, 2, 3)


def test_a_follower_that_never_fetched_in_this_epoch_does_not_rejoin():
    lp = leader(isr=(1,), min_isr=1)
    assert lp.expand_proposal() is None


def test_acks_all_needs_min_insync_replicas():
    lp = leader(isr=(1, 2), min_isr=2)
    assert lp.check_acks_all() == EngineError.NO_ERROR
    lp.on_local_append(10)
    lp.apply_isr((1,))
    assert lp.check_acks_all() == EngineError.NOT_ENOUGH_REPLICAS
    assert lp.commit_status(10) == EngineError.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_ack_fsync_counts_durable_ends():
    lp = leader(isr=(1, 2), min_isr=2)
    lp.on_local_append(30, durable_end=10)
    lp.on_follower_fetch(2, 30, now_ms=1, durable_offset=20)
    assert lp.high_watermark == 10


def test_ack_fsync_leader_does_not_count_its_unflushed_tail_from_the_start():
    # With replica.ack.fsync the HW counts fsynced ends only, from the first moment of an epoch:
    # a new leader's unflushed tail is not committed.
    lp = LeaderPartition(1, (1, 2), (1,), epoch_start=34, high_watermark=0, lag_time_max_ms=1000,
                         min_insync_replicas=1, now_ms=0, durable_end=17)
    assert lp.high_watermark == 17


def test_leader_outside_isr_is_refused():
    with pytest.raises(ValueError):
        leader(isr=(2, 3))


CFG = TopicConfig()
ALL = Cluster(frozenset({1, 2, 3}), frozenset({1, 2, 3}))


def state(leader_id, epoch, isr):
    return PartitionState(leader_id, epoch, tuple(isr), 1)


def test_initial_state_and_stable_leader():
    assert initial_state((2, 1, 3), ALL, 7) == PartitionState(2, 0, (2, 1, 3), 7)
    assert elect(state(1, 4, (1, 2, 3)), (1, 2, 3), ALL, CFG, 1) is None


def test_leader_gone_elects_from_the_isr_in_replica_order():
    c = Cluster(frozenset({2, 3}), frozenset({2, 3}))
    assert elect(state(1, 4, (1, 3)), (1, 2, 3), c, CFG, 2) == PartitionState(3, 5, (3,), 2)


def test_an_election_never_shrinks_the_isr_below_the_minimum():
    # 2 led; 2's session blipped and 1 is shutting down: 3 (perhaps crashed, its session not yet
    # expired) is elected, and 1 and 2 stay in the ISR: they hold every committed byte.
    c = Cluster(frozenset({1, 3}), frozenset({1, 3}), shutting_down=frozenset({1}))
    two = TopicConfig(min_insync_replicas=2)
    assert elect(state(2, 7, (2, 1, 3)), (1, 2, 3), c, two, 4) == PartitionState(3, 8, (2, 1, 3), 4)
    assert elect(state(2, 7, (2, 1, 3)), (1, 2, 3), c, CFG, 4) == PartitionState(3, 8, (3,), 4)


def test_no_isr_candidate_goes_offline_once_and_unclean_needs_the_opt_in():
    c = Cluster(frozenset({2}), frozenset({2}))
    offline = elect(state(1, 4, (1,)), (1, 2, 3), c, CFG, 2)
    assert offline == PartitionState(-1, 5, (1,), 2)
    assert elect(offline, (1, 2, 3), c, CFG, 2) is None
    unclean = TopicConfig(unclean_leader_election=True)
    assert elect(offline, (1, 2, 3), c, unclean, 2) == PartitionState(2, 6, (2,), 2)


def test_tail_lost_replica_leads_only_on_ack_fsync_topics():
    c = Cluster(frozenset({1, 2}), frozenset({2}))
    assert elect(state(-1, 4, (1,)), (1, 2), c, CFG, 1) is None
    assert elect(state(-1, 4, (1,)), (1, 2), c, TopicConfig(replica_ack_fsync=True), 1) == state(1, 5, (1,))


def test_preferred_leader_restored_and_restarted_or_leaving_leader_replaced():
    assert elect(state(2, 4, (1, 2)), (1, 2), ALL, CFG, 1) == state(1, 5, (1, 2))
    restarted = Cluster(ALL.live, ALL.tail_intact, restarted=frozenset({1}))
    assert elect(state(1, 4, (1, 2)), (1, 2), restarted, CFG, 1) == state(1, 5, (1, 2))
    leaving = Cluster(ALL.live, ALL.tail_intact, shutting_down=frozenset({1}))
    assert elect(state(1, 4, (1, 2)), (1, 2), leaving, CFG, 1) == state(2, 5, (2,))


def hist(*pairs):
    return EpochHistory([EpochEntry(e, o) for e, o in pairs])


def test_truncation_walks_back_over_an_epoch_the_follower_missed():
    follower, leader_h = hist((1, 0), (3, 50)), hist((1, 0), (2, 40), (4, 60))
    assert first_step(follower, 70) == AskLeader(3)
    assert next_step(follower, 70, *leader_h.end_offset_for(3, 90)) == AskLeader(1)
    assert next_step(follower, 70, *leader_h.end_offset_for(1, 90)) == TruncateTo(40)
    assert resolve(follower, 70, lambda e: leader_h.end_offset_for(e, 90)) == 40


def test_truncation_keeps_the_common_prefix_of_a_shared_epoch():
    assert resolve(hist((0, 0), (2, 30)), 55, lambda e: hist((0, 0), (2, 30), (5, 50)).end_offset_for(e, 80)) == 50
    assert resolve(hist((0, 0)), 20, lambda e: hist((0, 0)).end_offset_for(e, 80)) == 20
    assert resolve(EpochHistory(), 20, lambda e: (0, 80)) == 0
    assert resolve(hist((0, 0)), 20, lambda e: (-1, -1)) == 0


def test_znode_values_round_trip_and_reject_nonsense():
    a = TopicAssignment(((1, 2), (2, 3)), {"min.insync.replicas": "2"})
    assert TopicAssignment.decode(a.encode()) == a
    s = PartitionState(2, 7, (2, 3), 4)
    assert PartitionState.decode(s.encode()) == s
    assert PartitionState.decode(b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1,"x":9}').leader == 1
    for bad in (b"nope", b"[]", b'{"leader":1}', b'{"leader":true,"leader_epoch":0,"isr":[1],"controller_epoch":1}'):
        with pytest.raises(ReplicationValueError):
            PartitionState.decode(bad)
    with pytest.raises(ReplicationValueError):
        TopicAssignment.decode(b'{"partitions":{"1":[1]}}')
    with pytest.raises(ReplicationValueError):
        TopicConfig.from_strings({"min.insync.replicas": "0"})
    with pytest.raises(ReplicationValueError):
        TopicConfig.from_strings({"unclean.leader.election.enable": "yes"})


def test_a_follower_that_stopped_fetching_does_not_flap_back_into_the_isr():
    lp = LeaderPartition(1, (1, 2), (1, 2), epoch_start=0, high_watermark=0, lag_time_max_ms=100,
                         min_insync_replicas=1, now_ms=0)
    lp.on_local_append(50)
    lp.on_follower_fetch(2, 50, now_ms=10)  # caught up, then silent
    assert lp.shrink_proposal(200) == (1,)
    lp.apply_isr((1,))
    assert lp.expand_proposal(200) is None  # its last catch-up is older than the lag bound
    lp.on_follower_fetch(2, 50, now_ms=210)  # fetching again
    assert lp.expand_proposal(210) == (1, 2)


def test_a_written_isr_names_only_followers_caught_up_in_this_epoch_unless_below_the_minimum():
    lp = leader(isr=(1, 2), min_isr=1)  # 2 was kept in the ISR by the election while it was down
    lp.on_local_append(30)
    lp.on_follower_fetch(3, 30, now_ms=10)
    assert lp.expand_proposal(10) == (1, 3)  # 3 joins; 2 never caught up in this epoch and leaves
    lp.on_follower_fetch(2, 40, now_ms=20)  # back, with a stale tail beyond the leader's end
    lp.on_follower_fetch(2, 30, now_ms=30)  # truncated by epoch, now caught up
    assert lp.expand_proposal(30) == (1, 2, 3)
    kept = leader(isr=(1, 2), min_isr=3)
    kept.on_local_append(30)
    kept.on_follower_fetch(3, 30, now_ms=10)
    assert kept.expand_proposal(10) == (1, 2, 3)  # leaving 2 out would take the ISR below the minimum


def test_a_first_fetch_below_the_leader_end_is_not_a_catch_up():
    lp = leader(isr=(1, 2), min_isr=1)
    lp.on_local_append(30)
    lp.on_follower_fetch(2, 10, now_ms=10)
    lp.on_follower_fetch(3, 30, now_ms=10)
    assert lp.expand_proposal(10) == (1, 3)
    lp.on_follower_fetch(2, 30, now_ms=20)  # reached where the leader was at its first fetch
    assert lp.expand_proposal(20) == (1, 2, 3)


def test_preferred_replica_registered_after_the_state_was_written_does_not_take_over():
    back = Cluster(ALL.live, ALL.tail_intact, registered_after_state=frozenset({1}))
    assert elect(state(2, 4, (1, 2)), (1, 2), back, CFG, 1) is None
    assert elect(state(-1, 4, (1, 2)), (1, 2), back, CFG, 1) == state(1, 5, (1, 2))  # but may lead if needed


def test_the_isr_holds_a_log_start_once_every_follower_in_it_reported_one_at_or_above_it():
    lp = leader(isr=(1, 2, 3))
    assert not lp.isr_holds_log_start(5)  # no follower has reported one yet
    lp.on_follower_fetch(2, 0, now_ms=1, log_start_offset=5)
    assert lp.log_start_of(2) == 5 and not lp.isr_holds_log_start(5)
    lp.on_follower_fetch(3, 0, now_ms=1, log_start_offset=9)
    assert lp.isr_holds_log_start(5) and not lp.isr_holds_log_start(6)
    lp.apply_isr((1, 3))  # a follower outside the ISR is not waited for
    assert lp.isr_holds_log_start(9)
    assert leader(isr=(1,)).isr_holds_log_start(100)  # the leader alone: it stored the start itself
