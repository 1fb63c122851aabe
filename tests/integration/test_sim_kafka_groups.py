"""The Kafka-groups world (docs/simulation.md, "Kafka-protocol groups"): seeds replay, clean seeds hold
every promise, and the planted stale-generation commit is caught within them."""

from __future__ import annotations

import pytest

from tests.helpers.sim_runs import assert_a_seed_replays_exactly, assert_the_command_replays
from trikafka.sim import kafka_coordinator, kafka_members
from trikafka.sim.kafka_group_promises import AT_LEAST_ONCE, FORWARD, OWNERSHIP, SURVIVE, GroupPromises
from trikafka.sim.kafka_groups import run_seed

SEEDS = range(1, 51)
PLANT = "stale-generation-commit"
FIRST_SEED_TO_CATCH = 1  # measured: the first seed from 1 whose run the plant breaks


def test_a_seed_replays_exactly():
    assert_a_seed_replays_exactly(run_seed, 7, 8)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_promise_holds_on_clean_seeds(seed):
    result = run_seed(seed)
    assert result.ok, result.report()
    assert result.acked_commits > 50 and result.faults > 5  # the group committed under faults


def test_clean_seeds_go_through_failovers_and_zombies():
    results = [run_seed(seed) for seed in SEEDS[:10]]
    assert sum(r.failovers for r in results) > 10
    assert any("wakes holding" in line for r in results for line in r.trace_lines)


def test_the_planted_stale_generation_commit_is_caught_and_replays():
    caught = [seed for seed in SEEDS if not run_seed(seed, plant=PLANT).ok]
    assert caught and caught[0] == FIRST_SEED_TO_CATCH
    failed, again = run_seed(FIRST_SEED_TO_CATCH, plant=PLANT), run_seed(FIRST_SEED_TO_CATCH, plant=PLANT)
    assert failed.violation is not None and failed.violation.promise == FORWARD
    assert failed.digest == again.digest
    assert f"--seed {FIRST_SEED_TO_CATCH} " in failed.report() and f"--plant {PLANT}" in failed.report()


def test_the_promises_catch_what_they_state():
    promises = GroupPromises()
    assert promises.own("m0.1", 3, (0, 1)) is None and promises.own("m1.1", 3, (1,)) is not None
    promises.consume(0, 0, 10)
    assert promises.apply(0, 10) is None
    assert promises.apply(0, 4).promise == FORWARD
    assert promises.apply(1, 1) is not None  # offset 0 of partition 1 was never consumed
    promises.acknowledge({0: 10})
    assert promises.loaded(1, {0: 10}) is None and promises.loaded(1, {0: 9}) is not None


def _first_broken(seeds=range(1, 11)):
    return next(((seed, r.violation.promise) for seed in seeds if not (r := run_seed(seed)).ok), None)


def test_a_failover_that_loses_committed_records_is_caught(monkeypatch):
    real = kafka_coordinator.ReplicatedLog.crash_leader

    def lossy(log):
        log.committed = max(0, log.committed - 3)  # the new leader lacks records the ISR had
        return real(log)

    monkeypatch.setattr(kafka_coordinator.ReplicatedLog, "crash_leader", lossy)
    assert _first_broken()[1] == SURVIVE


def test_an_assignment_that_gives_a_partition_twice_is_caught(monkeypatch):
    real = kafka_members.SimMember._assign

    def twice(member, answer):
        plan = real(member, answer)
        largest = max(plan.values(), key=len)
        return {member_id: largest for member_id in plan}

    monkeypatch.setattr(kafka_members.SimMember, "_assign", twice)
    assert _first_broken()[1] == OWNERSHIP


def test_a_member_that_commits_what_it_skipped_is_caught(monkeypatch):
    def skip(member):
        for partition in member.owned:
            member.positions[partition] = member.world.log_ends[partition]

    monkeypatch.setattr(kafka_members.SimMember, "_consume", skip)
    assert _first_broken()[1] == AT_LEAST_ONCE


def test_the_command_replays_the_caught_seed_to_its_digest():
    assert_the_command_replays(run_seed(FIRST_SEED_TO_CATCH, plant=PLANT), FORWARD, "kafka-groups", 7,
                               run_seed(7).digest)
