"""The simulation budget's size (tests/helpers/sim_budget.py): one process a core beyond the first,
the machine's spare time unless a fixed budget is asked for, the Kafka world's 200 seeds of 60 s in
one more process, waited for, and a one-line error for a bad setting."""

from __future__ import annotations

import types

import pytest

from tests.helpers import sim_budget
from tests.helpers.sim_budget import (BUDGET_CAP_MINUTES, KAFKA_SEEDS_ENV, MINUTES_ENV, PROCESSES_ENV, BudgetPlan,
                                      BudgetRun, BudgetShare, budget_plan, budget_shares, finish_budget)


def test_a_two_core_machine_runs_one_process_of_spare_time_up_to_the_cap():
    plan = budget_plan({}, cpu_count=2)
    assert plan == BudgetPlan(seeds=BUDGET_CAP_MINUTES // 5, processes=1, fixed=False)
    assert plan.ranges() == [range(1001, 1201)]
    assert budget_plan({}, cpu_count=1).processes == 1
    assert budget_plan({}, cpu_count=8).processes == 7


def test_a_fixed_budget_splits_its_seeds_evenly_and_is_waited_for():
    plan = budget_plan({MINUTES_ENV: "1000", PROCESSES_ENV: "2"}, cpu_count=2)
    assert plan.fixed and plan.ranges() == [range(1001, 1101), range(1101, 1201)]  # CI's budget before
    assert budget_plan({MINUTES_ENV: "7", PROCESSES_ENV: "3"}, cpu_count=2).ranges() == [range(1001, 1002),
                                                                                         range(1002, 1003)]


def test_the_kafka_world_runs_200_seeds_of_60_s_in_one_more_process_waited_for():
    shares = budget_shares(budget_plan({}, cpu_count=2))
    assert shares == [BudgetShare("cluster", range(1001, 1201), 300, False),
                      BudgetShare("kafka", range(1001, 1201), 60, True)]
    assert shares[1].arguments() == ["sim", "--world", "kafka", "--seeds", "1001..1200", "--duration-s", "60"]
    assert budget_plan({KAFKA_SEEDS_ENV: "20"}, cpu_count=2).kafka_range() == range(1001, 1021)


class _Process:
    """A budget process that has finished two seeds and runs until it is stopped or waited for."""

    def __init__(self, world: str, events: list[str]):
        self.world, self.events, self.returncode = world, events, None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.events.append(f"wait {self.world}")
        self.returncode = 0

    def send_signal(self, signum):
        self.events.append(f"stop {self.world}")
        self.returncode = 130


def test_the_spare_time_seeds_stop_before_the_kafka_world_s_are_waited_for(monkeypatch, tmp_path):
    events: list[str] = []
    runs = []
    for share in reversed(budget_shares(budget_plan({}, cpu_count=2))):  # (the Kafka world's listed first)
        out = tmp_path / f"{share.world}.out"
        out.write_text("[1/2] seed 1001: ok trace a\n[2/2] seed 1002: ok trace b\n")
        runs.append(BudgetRun(share, _Process(share.world, events), out.open(), out.open()))  # type: ignore[arg-type]
    monkeypatch.setattr(sim_budget, "start_budget", lambda: runs)
    assert finish_budget(timeout_s=10.0) == runs
    assert events == ["stop cluster", "wait cluster", "wait kafka"]


def test_the_summary_line_counts_each_world_s_seeds_and_names_the_failed_ones(monkeypatch, tmp_path):
    runs = []
    for share, lines in zip(budget_shares(budget_plan({}, cpu_count=2)),
                            ("[1/200] seed 1001: ok trace a\n", "[1/200] seed 1001: ok trace a\n"
                                                                "[2/200] seed 1002: FAILED (x) trace b\n")):
        out = tmp_path / f"{share.world}.out"
        out.write_text(lines)
        runs.append(BudgetRun(share, _Process(share.world, []), out.open(), out.open()))  # type: ignore[arg-type]
    monkeypatch.setattr(sim_budget, "_runs", runs)
    written: list[str] = []
    sim_budget.pytest_terminal_summary(types.SimpleNamespace(write_line=written.append))  # type: ignore[arg-type]
    assert written == ["simulation budget: cluster world 1 seeds of 300 simulated s (5 simulated cluster-minutes), "
                       "kafka world 2 seeds of 60 simulated s (2 simulated cluster-minutes) in 2 processes, "
                       "1 failed (kafka 1002)"]


@pytest.mark.parametrize("name, value", [(MINUTES_ENV, "0"), (MINUTES_ENV, "lots"), (PROCESSES_ENV, "-1"),
                                         (KAFKA_SEEDS_ENV, "0")])
def test_a_bad_setting_is_a_one_line_usage_error(name, value):
    with pytest.raises(pytest.UsageError, match=f"^{name} takes a whole number above 0, not '{value}'$"):
        budget_plan({name: value}, cpu_count=2)
