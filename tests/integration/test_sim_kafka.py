"""The Kafka world (docs/simulation.md, "The Kafka world"): the shipped brokers' Kafka listeners and
trikafka's Trio Kafka client under faults; a seed replays to its digest, and a plant in the shipped
producer state is caught and replayed by the command its report prints."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

from tests.helpers.sim_runs import (COMMAND_TIMEOUT_S, assert_a_seed_replays_exactly, assert_the_command_replays,
                                    first_caught)
from trikafka.sim.kafka_promises import ABORTED, ENDS, EXACTLY_ONCE, ONCE, ORDER
from trikafka.sim.kafka_faults import ALL_KAFKA_FAULTS
from trikafka.sim.kafka_world import KAFKA_FAULTS, run_seed

SHORT_S = 10.0  # simulated seconds a seed runs here (CI's budget runs the world longer, docs/simulation.md)
PLANT = "duplicate-sequence-accepted"


def _faults_before(kind: str) -> tuple[str, ...]:
    """The fault kinds the world drew from before ``kind`` was added (kinds are added at the end of
    ``KAFKA_FAULTS``), so a seed measured then draws what it drew."""
    return KAFKA_FAULTS[:KAFKA_FAULTS.index(kind)]


def test_a_seed_replays_exactly():
    assert_a_seed_replays_exactly(functools.partial(run_seed, duration_s=SHORT_S), 3, 5)


def test_a_clean_seed_acknowledges_copies_and_commits_under_faults():
    result = run_seed(3, duration_s=SHORT_S)
    assert result.ok, result.report()
    assert result.acked > 20 and result.faults > 3
    assert any(" committed: " in line for line in result.trace_lines)  # a copier's transaction committed


def test_a_duplicate_sequence_accepted_by_the_producer_state_is_caught_and_replays():
    failed = first_caught(functools.partial(run_seed, duration_s=SHORT_S, plant=PLANT), {ONCE}, range(1, 13))
    assert f"replay: trikafka sim --world kafka --seed {failed.seed} --duration-s 10 --plant {PLANT}" in failed.report()
    assert_the_command_replays(failed, ONCE, "kafka", 3, run_seed(3, duration_s=SHORT_S).digest, "--duration-s", "10")


def test_a_fenced_epoch_accepted_by_the_producer_state_is_caught():
    """An idempotent batch appended without its answer (its leader halted) is retried after the
    producer bumped its epoch (KIP-360: later batches of the old epoch failed); the producer state must
    refuse the old epoch, and the plant stores the record twice (out of its producer's order, or once
    too often).  Measured: seeds 7 and 8 of 1..8 (seed 1 before the schedule last moved)."""
    first_caught(functools.partial(run_seed, duration_s=SHORT_S, plant="fenced-epoch-accepted"), {ONCE, ORDER},
                 range(1, 13))


def test_a_transaction_coordinator_that_serves_before_loading_is_caught():
    """A transaction-log partition served before its records are read forgets a transaction
    the previous coordinator left open, whose outputs then hold the last stable offset for good."""
    first_caught(functools.partial(run_seed, duration_s=SHORT_S, plant="coordinator-serves-unloaded"), {ENDS},
                 range(1, 13))


def test_markers_written_before_the_decision_is_durable_are_caught():
    """``coordinator-crash`` kills a copier and its coordinator just after its EndTxn; the planted
    coordinator had sent COMMIT markers before the PrepareCommit was durable, so some partitions of the
    transaction hold its COMMIT while its successor, fenced in by the copier's next incarnation, aborts
    it: an aborted transaction is seen, or the committed offsets are past inputs whose copies were
    aborted.  Measured over seeds 1..10 of 20 s: 1, 6 and 9; since ``copier-stall`` (fewer EndTxns to
    strike) none of them, and seed 11 first; since the latency fix, with ``slow-broker``, seed 4 (and 12
    of seeds 11..30), and without it none of seeds 1..12 in a promise named here."""
    failed = first_caught(functools.partial(run_seed, duration_s=20.0, plant="markers-before-durable",
                                            faults=ALL_KAFKA_FAULTS),  # slow-broker is off by default
                          {EXACTLY_ONCE, ABORTED}, range(1, 13))
    assert any("fault coordinator-crash" in line for line in failed.trace_lines)


def test_a_commit_of_an_old_generation_is_caught():
    """``copier-stall`` holds a copier that has read its records before their transaction while its group
    membership carries on; a rebalance meanwhile hands their partition to the other copier, which copies
    them again.  The planted group coordinator accepts the stalled copier's offsets with the generation
    it read them in, so a record is copied twice, once by the stalled incarnation.  Measured over seeds
    1..10 of 20 s: 1, 2, 7, 8 and 10 (seed 8 alone before the fault, and not by a stalled copier); 1, 2,
    8 and 10 since the latency fix, with ``slow-broker``."""
    failed = first_caught(functools.partial(run_seed, duration_s=20.0, plant="stale-generation-commit"),
                          {EXACTLY_ONCE}, range(1, 13))
    stalled = [m.group(1) for line in failed.trace_lines if (m := re.search(r"fault copier-stall (\S+) ", line))]
    assert failed.violation is not None
    assert any(f"|{incarnation}." in failed.violation.detail for incarnation in stalled), failed.report()


def test_a_transaction_whose_coordinator_reloaded_mid_completion_ends():
    """Seed 8 of 20 s: the broker coordinating ``copier-0`` loaded its transaction-log partition again
    while the completion task of the previous load was still writing the PrepareAbort's markers; the
    new load's completion was not started (the running task held the id), and the old task returned
    without completing once its load was gone, so the transaction stayed PrepareAbort for good."""
    before_pauses = _faults_before("client-pause")
    result = run_seed(8, duration_s=20.0, faults=before_pauses)
    assert result.ok, result.report()


def test_the_judge_sees_a_transaction_while_its_coordinator_moves():
    """Seed 181 of 30 s: just after healing, the ``__transaction_state`` leaders moved; while no broker
    led them, each broker's ListTransactions (which lists only what it has loaded) was empty, so the
    judge took "nothing open" and judged at once, with ``copier-0``'s PrepareAbort (fenced 1 s before
    the end) still writing its markers."""
    before_pauses = _faults_before("client-pause")
    result = run_seed(181, duration_s=30.0, faults=before_pauses)
    assert result.ok, result.report()


def test_the_judge_reads_the_logs_while_their_leaders_stay():
    """Seed 11 of 30 s: just after the judge found every partition settled, the preferred replica of
    ``out-0`` (back from a kill, never told the high watermark as a follower) was elected and led
    from a high watermark of 0 until its followers fetched (docs/protocol.md §12.6); the judge's
    read in that window got nothing and took the partition for empty, a committed transaction lost."""
    before_pauses = _faults_before("client-pause")
    result = run_seed(11, duration_s=30.0, faults=before_pauses)
    assert result.ok, result.report()


def test_a_deposed_coordinators_markers_are_fenced():
    """Seeds 74 and 155 of 30 s: a ``__transaction_state`` leadership moved while its old coordinator
    still retried a transaction's COMMIT markers; the new one completed the transaction, the copier
    opened its next one (same producer epoch), and the old coordinator's late COMMIT (a lower
    coordinator epoch) landed in it, committing part of a transaction that was then aborted
    (docs/protocol.md §19.5.5: such a marker is refused)."""
    before_pauses = _faults_before("client-pause")
    for seed in (74, 155):
        result = run_seed(seed, duration_s=30.0, faults=before_pauses)
        assert result.ok, result.report()


@pytest.mark.parametrize("world", ["kafka-groups", "transactions"])
def test_the_removed_worlds_are_unknown_and_the_error_lists_the_worlds(world):
    done = subprocess.run([sys.executable, "-m", "trikafka", "sim", "--world", world, "--seed", "1"],
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == f"trikafka: error: unknown world '{world}' (known: cluster, kafka)"
