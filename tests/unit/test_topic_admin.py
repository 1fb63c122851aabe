"""The pure parts of topic administration: placement, reassignment plans and the controller's
reassignment decisions, settings checks and what they override on a broker (docs/protocol.md §12.12)."""

from __future__ import annotations

import pytest

from trikafka.broker.cleaner import compaction_policy
from trikafka.broker.config import BrokerConfig
from trikafka.broker.replication.assignment import (AssignmentError, assign_replicas, cancelled, finished,
                                                   plan_reassignment)
from trikafka.broker.replication.election import Cluster, announce, finish_reassignment, prune_to_replicas
from trikafka.broker.topic_settings import (
    UNCLEAN_WARNING, LogOverrides, TopicConfigError, check_topic_config, log_overrides, parse_config_items,
)
from trikafka.log.config import HOUR_MS, LogConfig
from trikafka.testing.fakefs import FakeFileSystem
from trikafka.log.manager import LogManager
from trikafka.zk.replication_values import PartitionState, TopicAssignment, TopicConfig

LIVE = Cluster(frozenset({1, 2, 3, 4}), frozenset({1, 2, 3, 4}))
CONFIG = TopicConfig()


# -- placement ----------------------------------------------------------------------------------------------


def test_round_robin_spreads_preferred_leaders_over_the_sorted_live_brokers():
    assert assign_replicas({3, 1, 2}, 4, 2) == ((1, 2), (2, 3), (3, 1), (1, 2))
    assert assign_replicas([7], 2, 1) == ((7,), (7,))
    leaders = [r[0] for r in assign_replicas(range(5), 10, 3)]
    assert all(leaders.count(b) == 2 for b in range(5))
    for replicas in assign_replicas(range(5), 10, 3):
        assert len(set(replicas)) == 3


def test_placement_refuses_more_replicas_than_live_brokers_in_one_line():
    with pytest.raises(AssignmentError) as caught:
        assign_replicas({1, 2}, 3, 3)
    assert str(caught.value) == "replication factor 3 needs 3 live brokers, but 2 are registered (1, 2)"
    with pytest.raises(AssignmentError, match="but 0 are registered \\(none\\)"):
        assign_replicas(set(), 1, 1)
    with pytest.raises(AssignmentError):
        assign_replicas({1}, 0, 1)


# -- reassignment plans -------------------------------------------------------------------------------------


def test_a_plan_appends_the_new_replicas_and_records_the_target():
    topic = TopicAssignment(((1, 2, 3), (2, 3, 1)), {"min.insync.replicas": "2"})
    plan = plan_reassignment(topic, 0, (2, 3, 4), {1, 2, 3, 4})
    assert plan == TopicAssignment(((1, 2, 3, 4), (2, 3, 1)), {"min.insync.replicas": "2"}, {0: (2, 3, 4)},
                                   {0: (1, 2, 3)})
    assert TopicAssignment.decode(plan.encode()) == plan
    assert plan_reassignment(plan, 0, (2, 3, 4), {1, 2, 3, 4}) is None  # under way already
    assert finished(plan, 0) == TopicAssignment(((2, 3, 4), (2, 3, 1)), {"min.insync.replicas": "2"})
    assert plan_reassignment(topic, 1, (2, 3, 1), {1, 2, 3}) is None  # already there


def test_a_cancelled_move_goes_back_to_its_list_from_before():
    topic = TopicAssignment(((1, 2, 3, 4), (2, 3, 1)), {}, {0: (2, 3, 4)}, {0: (1, 2, 3, 4)})
    plan = plan_reassignment(TopicAssignment(((1, 2, 3, 4),), {}), 0, (2, 3, 4), {1, 2, 3, 4})
    assert plan is not None and plan.replicas == ((1, 2, 3, 4),)  # the list reads the same as a move to more
    assert cancelled(plan, 0) == TopicAssignment(((1, 2, 3, 4),), {})
    grown = plan_reassignment(TopicAssignment(((1, 2, 3),), {}), 0, (2, 3, 4), {1, 2, 3, 4})
    assert grown is not None and grown.replicas == plan.replicas and cancelled(grown, 0) == TopicAssignment(
        ((1, 2, 3),), {})
    assert cancelled(topic, 1) is None  # not moving
    with pytest.raises(AssignmentError, match="earlier release"):
        cancelled(TopicAssignment(((1, 2, 3),), {}, {0: (2, 3)}), 0)


def test_plans_that_cannot_be_made_say_why():
    topic = TopicAssignment(((1, 2),), {}, {})
    moving = TopicAssignment(((1, 2, 3),), {}, {0: (2, 3)})
    for assignment, partition, target, live, message in [
        (topic, 1, (1,), {1, 2}, "partitions 0..0, not 1"),
        (topic, 0, (), {1, 2}, "at least one broker"),
        (topic, 0, (1, 1), {1, 2}, "distinct"),
        (topic, 0, (1, 5), {1, 2}, "broker\\(s\\) 5 not registered"),
        (moving, 0, (1, 3), {1, 2, 3}, "already moving to 2,3"),
    ]:
        with pytest.raises(AssignmentError, match=message):
            plan_reassignment(assignment, partition, target, live)


def test_an_assignment_without_targets_encodes_as_before_and_bad_targets_are_refused():
    plain = TopicAssignment(((1, 2),), {})
    assert plain.encode() == b'{"config":{},"partitions":{"0":[1,2]},"version":1}'
    from trikafka.zk.replication_values import ReplicationValueError

    for raw in (b'{"partitions":{"0":[1]},"targets":{"1":[2]}}', b'{"partitions":{"0":[1]},"targets":{"0":"x"}}',
                b'{"partitions":{"0":[1]},"origins":{"1":[2]}}'):
        with pytest.raises(ReplicationValueError):
            TopicAssignment.decode(raw)


# -- the controller's reassignment decisions ------------------------------------------------------------------


def test_finishing_waits_until_every_target_replica_is_in_sync():
    state = PartitionState(1, 5, (1, 2, 3), 2)
    assert finish_reassignment(state, (2, 3, 4), LIVE, CONFIG, 3) is None
    assert finish_reassignment(PartitionState(-1, 5, (1, 2, 3, 4), 2), (2, 3, 4), LIVE, CONFIG, 3) is None


def test_finishing_moves_leadership_off_a_removed_leader_and_drops_removed_replicas():
    state = PartitionState(1, 5, (1, 2, 3, 4), 2)
    assert finish_reassignment(state, (3, 2, 4), LIVE, CONFIG, 3) == PartitionState(3, 6, (2, 3, 4), 3)
    assert finish_reassignment(state, (4, 1), LIVE, CONFIG, 3) == PartitionState(1, 6, (1, 4), 3)  # leader stays
    not_electable = Cluster(LIVE.live, frozenset({1, 2}))  # 3 and 4 lost their tails: they may not lead
    assert finish_reassignment(state, (3, 4), not_electable, CONFIG, 3) is None


def test_prune_fixes_states_that_name_brokers_outside_the_replicas():
    assert prune_to_replicas(PartitionState(2, 1, (2, 3), 1), (2, 3), LIVE, CONFIG, 1) is None
    assert prune_to_replicas(PartitionState(2, 1, (2, 3, 1), 1), (2, 3), LIVE, CONFIG, 4) == \
        PartitionState(2, 2, (2, 3), 4)
    assert prune_to_replicas(PartitionState(1, 1, (1, 3), 1), (2, 3), LIVE, CONFIG, 4) == \
        PartitionState(3, 2, (3,), 4)
    assert prune_to_replicas(PartitionState(1, 1, (1,), 1), (2, 3), LIVE, CONFIG, 4) == \
        PartitionState(-1, 2, (), 4)
    assert announce(PartitionState(2, 7, (2, 3), 1), 4) == PartitionState(2, 8, (2, 3), 4)


# -- settings -----------------------------------------------------------------------------------------------------


def test_config_items_and_their_checks():
    assert parse_config_items(["cleanup.policy=compact", " retention.ms = 5 "]) == \
        {"cleanup.policy": "compact", "retention.ms": "5"}
    with pytest.raises(TopicConfigError, match="KEY=VALUE, not 'oops'"):
        parse_config_items(["oops"])
    assert check_topic_config({"cleanup.policy": "compact,delete", "retention.bytes": "-1"}, replicated=False) == []
    assert check_topic_config({"min.insync.replicas": "2", "cleanup.policy": "compact"}, replicated=True) == []
    for config, replicated, message in [
        ({"cleanup.policie": "compact"}, False, "unknown topic config key 'cleanup.policie'"),
        ({"min.insync.replicas": "2"}, False, "replicated topics only"),
        ({"cleanup.policy": "shred"}, False, "cleanup.policy must be"),
        ({"retention.ms": "-5"}, False, "retention.ms=-5: must be >= 0"),
        ({"delete.retention.ms": "soon"}, True, "expected an integer"),
        ({"min.insync.replicas": "0"}, True, "must be >= 1"),
        ({"unclean.leader.election.enable": "yes"}, True, "expected true or false"),
    ]:
        with pytest.raises(TopicConfigError, match=message):
            check_topic_config(config, replicated=replicated)
    assert check_topic_config({"unclean.leader.election.enable": "TRUE"}, replicated=True) == [UNCLEAN_WARNING]
    assert "LOST" in UNCLEAN_WARNING


def test_overrides_come_before_the_broker_maps():
    config = BrokerConfig(log_cleanup_policy="delete", topic_cleanup_policy_map={"kv": "compact+delete"},
                          topic_delete_retention_ms_map={"kv": 5})
    assert compaction_policy(config, "kv").compact and compaction_policy(config, "kv").delete
    overrides = log_overrides({"cleanup.policy": "compact", "min.compaction.lag.ms": "7"})
    assert overrides == LogOverrides(compact=True, delete=False, min_compaction_lag_ms=7)
    policy = compaction_policy(config, "kv", overrides)
    assert (policy.compact, policy.delete, policy.min_compaction_lag_ms, policy.delete_retention_ms) == \
        (True, False, 7, 5)
    assert compaction_policy(config, "other", LogOverrides()) == compaction_policy(config, "other")


def test_a_log_manager_override_reaches_present_and_future_logs_and_goes_back():
    base = LogConfig(retention_ms=168 * HOUR_MS)
    special = LogConfig(retention_ms=HOUR_MS, segment_bytes=999)
    manager = LogManager("/data", base, FakeFileSystem(), topic_configs={"big": special}, partitions=2)
    manager.open()
    old = manager.get_or_create("t", 0)
    manager.override_topic_config("t", LogConfig(retention_ms=1))
    assert old.config.retention_ms == 1 and manager.get_or_create("t", 1).config.retention_ms == 1
    manager.override_topic_config("t", None)
    assert old.config == base
    manager.override_topic_config("big", LogConfig(retention_ms=2))
    manager.override_topic_config("big", None)
    assert manager.config_for("big") == special  # the configured per-topic settings come back
