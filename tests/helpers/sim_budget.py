"""CI's budget of simulated cluster time (docs/simulation.md, "In CI"), run behind the rest of the suite
(a pytest plugin loaded by ``tests/conftest.py``): the cluster world's seeds in the time the machine
can spare, and a fixed number of the Kafka world's.

The budget is CPU work alone: ``trikafka sim --seeds`` processes that need no port, file or clock
of the other tests.  When the budget test is among the collected tests, they start as soon as
collection ends, at the lowest CPU priority (nice 19), so they take the time the other tests leave
idle (their child processes waiting on ZooKeeper sessions, timeouts, Spark) and barely any from a
test that computes.  The budget test is moved to the end of the run and judges their output there;
a session that ends earlier stops them.

How much runs is what the machine can give beside the other tiers, so that the suite's time does
not grow with the budget: one process a core beyond the first (one on a 2-core machine, which
leaves the other core to the suite), and when the rest of the suite is done the budget test stops
them (SIGINT) and judges every seed that finished, waiting only for the first ``FLOOR_SEEDS`` of
each.  At most ``BUDGET_CAP_MINUTES`` simulated cluster-minutes run.  Two settings (environment):

* ``TRIKAFKA_SIM_BUDGET_MINUTES=N``: a fixed budget instead, N simulated cluster-minutes that the
  budget test waits for (``1000`` is the whole cap, as CI ran it before; seeds replay exactly, so a
  fixed budget runs the same seeds on every machine);
* ``TRIKAFKA_SIM_BUDGET_PROCESSES=N``: N processes instead of one a core beyond the first.

The Kafka world (``trikafka sim --world kafka``) runs beside them in one more process, also at nice
19: ``KAFKA_SEEDS`` seeds of ``KAFKA_DURATION_S`` simulated seconds (the issue's 200 x 60 s), every
one waited for and judged (``TRIKAFKA_SIM_BUDGET_KAFKA_SEEDS=N`` runs N instead).  The arithmetic
on a 2-core machine: 200 seeds of 60 s are 12,000 simulated s, measured at 430 to 610 CPU s
(docs/simulation.md, "Speed"; seeds 1001..1200 took 573 CPU s at nice 19 on a loaded machine).
The suite takes about 21 minutes with the cluster world's process on the second core; sharing that
core with it at equal priority, the Kafka process gets about half of those 1,260 s, about what it
needs, so it is mostly done when the rest of the suite is.  The budget test then stops the cluster
world's processes first (their spare-time seeds) and waits for the Kafka process, which has a core
to itself: at worst its whole 610 CPU s, about 10 minutes.  The suite stays under 21 + 10 = 31
minutes, within the 45-minute limit, and the cluster world keeps the seeds the spare time still
gives it (its floor of ``FLOOR_SEEDS`` included).
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

import pytest

BUDGET_TEST = "tests/integration/test_sim.py::test_the_simulation_budget_keeps_every_promise"
FIRST_SEED = 1001
BUDGET_DURATION_S = 300  # simulated seconds a seed
BUDGET_CAP_MINUTES = 1000  # 200 seeds
KAFKA_SEEDS = 200  # the Kafka world's, each waited for
KAFKA_DURATION_S = 60  # simulated seconds a Kafka-world seed
FLOOR_SEEDS = 2  # a process's seeds the budget test always waits for (10 simulated cluster-minutes)
MINUTES_ENV = "TRIKAFKA_SIM_BUDGET_MINUTES"
PROCESSES_ENV = "TRIKAFKA_SIM_BUDGET_PROCESSES"
KAFKA_SEEDS_ENV = "TRIKAFKA_SIM_BUDGET_KAFKA_SEEDS"
LOWEST_PRIORITY = 19
SEED_LINE = re.compile(r"^\[\d+/\d+\] seed (\d+): (ok|FAILED)", re.MULTILINE)
POLL_S = 1.0  # how often the budget test looks at a process's output while it waits for the floor
STOP_TIMEOUT_S = 60.0  # a SIGINTed process abandons its seed and prints its tally


@dataclass(frozen=True)
class BudgetPlan:
    """How much of the cluster world's budget runs, in how many processes, and whether the budget test
    waits for all of it; and how many seeds of the Kafka world (one process, always waited for)."""

    seeds: int
    processes: int
    fixed: bool
    kafka_seeds: int = KAFKA_SEEDS

    def ranges(self) -> list[range]:
        """The cluster world's seeds of each process: consecutive, split evenly."""
        share = math.ceil(self.seeds / self.processes)
        return [range(FIRST_SEED + i * share, FIRST_SEED + min(self.seeds, (i + 1) * share))
                for i in range(self.processes) if i * share < self.seeds]

    def kafka_range(self) -> range:
        """The Kafka world's seeds."""
        return range(FIRST_SEED, FIRST_SEED + self.kafka_seeds)


def budget_plan(environ: Mapping[str, str] = os.environ, cpu_count: int | None = None) -> BudgetPlan:
    """The budget from the environment (``MINUTES_ENV``, ``PROCESSES_ENV``) and the machine's cores."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    processes = _positive(environ, PROCESSES_ENV) or max(1, cores - 1)
    minutes = _positive(environ, MINUTES_ENV)
    seeds = math.ceil((minutes or BUDGET_CAP_MINUTES) * 60 / BUDGET_DURATION_S)
    return BudgetPlan(seeds=seeds, processes=min(processes, seeds), fixed=minutes is not None,
                      kafka_seeds=_positive(environ, KAFKA_SEEDS_ENV) or KAFKA_SEEDS)


def _positive(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name)
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) == 0:
        raise pytest.UsageError(f"{name} takes a whole number above 0, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class BudgetShare:
    """One process's part of the budget: the world, its seeds and their length, and whether the budget
    test waits for every seed (else it stops the process once the rest of the suite is done)."""

    world: str
    seeds: range
    duration_s: int
    waited: bool

    def arguments(self) -> list[str]:
        """``trikafka``'s arguments that run this share."""
        return ["sim", "--world", self.world, "--seeds", f"{self.seeds.start}..{self.seeds.stop - 1}",
                "--duration-s", str(self.duration_s)]


def budget_shares(plan: BudgetPlan) -> list[BudgetShare]:
    """The processes of ``plan``: the cluster world's (waited for when the budget is fixed), then the
    Kafka world's."""
    return [*(BudgetShare("cluster", seeds, BUDGET_DURATION_S, plan.fixed) for seeds in plan.ranges()),
            BudgetShare("kafka", plan.kafka_range(), KAFKA_DURATION_S, True)]


@dataclass
class BudgetRun:
    """One ``trikafka sim --seeds`` process of the budget, its share and its output files."""

    share: BudgetShare
    process: subprocess.Popen[str]
    stdout: IO[str]
    stderr: IO[str]

    @property
    def seeds(self) -> range:
        return self.share.seeds

    def command_line(self) -> str:
        return "trikafka " + " ".join(self.share.arguments())

    def finished(self) -> dict[int, str]:
        """Seed -> ``ok`` or ``FAILED`` for every seed that has finished so far."""
        return {int(seed): outcome for seed, outcome in SEED_LINE.findall(Path(self.stdout.name).read_text())}

    def output(self) -> tuple[str, str]:
        return Path(self.stdout.name).read_text(), Path(self.stderr.name).read_text()

    def stop(self) -> None:
        """SIGINT: the process abandons the seed it runs and exits with its tally."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=STOP_TIMEOUT_S)


_runs: list[BudgetRun] = []


def _lowest_priority() -> None:
    os.nice(LOWEST_PRIORITY)


def start_budget() -> list[BudgetRun]:
    """The budget's processes, started now unless they already run."""
    if not _runs:
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # every finished seed's line is in the file at once
        for share in budget_shares(budget_plan()):
            stdout = tempfile.NamedTemporaryFile("w+", prefix="trikafka-sim-budget-", suffix=".out")
            stderr = tempfile.NamedTemporaryFile("w+", prefix="trikafka-sim-budget-", suffix=".err")
            process = subprocess.Popen([sys.executable, "-m", "trikafka", *share.arguments()],
                                       stdout=stdout, stderr=stderr, text=True, env=env, preexec_fn=_lowest_priority)
            _runs.append(BudgetRun(share, process, stdout, stderr))
    return _runs


def finish_budget(timeout_s: float) -> list[BudgetRun]:
    """Waits for what the budget test judges: a waited-for share whole (the Kafka world's, a fixed
    budget), else each process's first ``FLOOR_SEEDS`` (or its end), then stops what still runs.  The
    processes not waited for stop first, leaving the cores to the ones waited for."""
    runs = start_budget()
    deadline = time.monotonic() + timeout_s
    for run in sorted(runs, key=lambda run: run.share.waited):
        if run.share.waited:
            run.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        while run.process.poll() is None and len(run.finished()) < min(FLOOR_SEEDS, len(run.seeds)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{run.command_line()}: fewer than {FLOOR_SEEDS} seeds in {timeout_s:.0f} s")
            time.sleep(POLL_S)  # a wait for a condition, bounded by the deadline
        run.stop()
    return runs


@pytest.hookimpl(trylast=True)  # after the tiers' markers and ``-m`` have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    budget = [item for item in items if item.nodeid == BUDGET_TEST]
    if budget:
        items[:] = [item for item in items if item.nodeid != BUDGET_TEST] + budget
        if not config.option.collectonly:
            start_budget()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _runs:
        return
    parts, failed = [], []
    for world in dict.fromkeys(run.share.world for run in _runs):
        runs = [run for run in _runs if run.share.world == world]
        finished = {seed: outcome for run in runs for seed, outcome in run.finished().items()}
        failed += [f"{world} {seed}" for seed, outcome in sorted(finished.items()) if outcome != "ok"]
        duration_s = runs[0].share.duration_s
        parts.append(f"{world} world {len(finished)} seeds of {duration_s} simulated s "
                     f"({len(finished) * duration_s / 60:.0f} simulated cluster-minutes)")
    terminalreporter.write_line(
        f"simulation budget: {', '.join(parts)} in {len(_runs)} process{'es' if len(_runs) > 1 else ''}, "
        f"{len(failed)} failed{' (' + ', '.join(failed) + ')' if failed else ''}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for run in _runs:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
