"""The simulation budget's size (tests/helpers/sim_budget.py): one process a core beyond the first,
the machine's spare time unless a fixed budget is asked for, and a one-line error for a bad setting."""

from __future__ import annotations

import pytest

from tests.helpers.sim_budget import BUDGET_CAP_MINUTES, MINUTES_ENV, PROCESSES_ENV, BudgetPlan, budget_plan


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


@pytest.mark.parametrize("name, value", [(MINUTES_ENV, "0"), (MINUTES_ENV, "lots"), (PROCESSES_ENV, "-1")])
def test_a_bad_setting_is_a_one_line_usage_error(name, value):
    with pytest.raises(pytest.UsageError, match=f"^{name} takes a whole number above 0, not '{value}'$"):
        budget_plan({name: value}, cpu_count=2)
