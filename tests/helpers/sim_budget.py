"""CI's budget of simulated cluster time (docs/simulation.md, "In CI"), run behind the rest of the suite
(a pytest plugin loaded by ``tests/conftest.py``).

The budget is CPU work alone: two ``trikafka sim --seeds`` processes that need no port, file or
clock of the other tests.  When the budget test is among the collected tests, they start as soon
as collection ends, at the lowest CPU priority (nice 19), so they take the time the other tests
leave idle (their child processes waiting on ZooKeeper sessions, timeouts, Spark) and barely
any from a test that computes.  The budget test is moved to the end of the run and judges their
output there; a session that ends earlier stops them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

BUDGET_TEST = "tests/integration/test_sim.py::test_a_thousand_simulated_cluster_minutes_keep_every_promise"
# 200 seeds x 300 simulated s = 1,000 simulated cluster-minutes, in two processes (the machine's two cores).
BUDGET_SEEDS = (range(1001, 1101), range(1101, 1201))
BUDGET_DURATION_S = 300
LOWEST_PRIORITY = 19


@dataclass
class BudgetRun:
    """One ``trikafka sim --seeds`` process of the budget and the seeds it runs."""

    seeds: range
    process: subprocess.Popen[str]

    def command_line(self) -> str:
        return f"trikafka sim --seeds {self.seeds.start}..{self.seeds.stop - 1} --duration-s {BUDGET_DURATION_S}"


_runs: list[BudgetRun] = []


def _lowest_priority() -> None:
    os.nice(LOWEST_PRIORITY)


def start_budget() -> list[BudgetRun]:
    """The budget's processes, started now unless they already run."""
    if not _runs:
        for seeds in BUDGET_SEEDS:
            process = subprocess.Popen(
                [sys.executable, "-m", "trikafka", "sim", "--seeds", f"{seeds.start}..{seeds.stop - 1}",
                 "--duration-s", str(BUDGET_DURATION_S)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_lowest_priority)
            _runs.append(BudgetRun(seeds, process))
    return _runs


@pytest.hookimpl(trylast=True)  # after the tiers' markers and ``-m`` have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    budget = [item for item in items if item.nodeid == BUDGET_TEST]
    if budget:
        items[:] = [item for item in items if item.nodeid != BUDGET_TEST] + budget
        start_budget()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for run in _runs:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
