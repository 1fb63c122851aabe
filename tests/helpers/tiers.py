"""The test tiers: which tests are slow, and why (a pytest plugin loaded by ``tests/conftest.py``).

Plain ``pytest`` runs the fast tier: ``addopts`` in ``pyproject.toml`` deselects
every test carrying one of ``SLOW_TIER_MARKERS``, and pytest reports them as
deselected.  ``./scripts/test-all`` passes ``-m ""`` and runs every tier.

A test gets its tier marker from these tables, not by hand:

* ``MARK_BY_DIRECTORY``: every test under ``tests/<directory>/``;
* ``MARK_BY_TEST``: one test function (every parametrization of it), named
  ``<path under tests/>::<function>``, with the reason it is slow;
* ``MARK_BY_FIXTURE``: every test that requests the fixture, directly or
  through another fixture;
* ``PROCESS_HELPERS``: every test whose body calls a helper that starts a
  child process, directly or through functions of the test modules and
  helpers it calls (``process``).

A marker set by hand (``pytest.mark.slow`` on a long run) adds to these.

A tier may need Python packages beyond the ``test`` extra (``OPTIONAL_PACKAGES``,
the Spark tier's ``spark`` extra).  Where one is absent, a test module that
imports it is skipped with the reason, not a collection error; a test that
imports one in its body says so with ``pytest.importorskip``.
"""

from __future__ import annotations

import inspect
import subprocess
import traceback
import types
from pathlib import Path
from typing import Any, Callable

import pytest

# marker -> why a test with it is not in the fast tier (registered with pytest).
SLOW_TIER_MARKERS = {
    "slow": "long-running tests (./scripts/test-all runs them)",
    "zookeeper": "needs a real ZooKeeper server",
    "spark": "needs a real local Spark",
    "process": "starts child processes (trikafka serve, trikafka CLI commands, trikafka sim)",
    "fault": "the fault suite: SIGKILLed brokers, severed and stalled connections",
}

TESTS_ROOT = Path(__file__).resolve().parents[1]

MARK_BY_DIRECTORY = {
    "fault": "fault",
}

MARK_BY_TEST = {
    # The simulation budget: each run is a whole simulated cluster for seconds of
    # simulated time; the fast tier keeps test_a_seed_replays_exactly.
    "integration/test_sim.py::test_every_promise_holds_on_clean_seeds": "slow",
    "integration/test_sim.py::test_each_planted_bug_is_caught": "slow",
    # 1,000 in-memory logs created through the broker (100 s on a loaded 2-core machine).
    "unit/test_broker_services.py::test_an_idle_broker_never_wakes_the_flush_scheduler": "slow",
    # Hundreds of topics created and rolled under a loop instrument (35 s there).
    "integration/test_broker_loop_stalls.py::test_topic_creation_and_retention_never_stall_the_loop": "slow",
    # librdkafka's mock cluster holds each join for seconds (its initial delay, a left member's timeouts).
    "integration/test_kafka_trio_client_conformance.py::"
    "test_a_group_member_reads_every_partition_commits_and_the_next_member_resumes": "slow",
}

MARK_BY_FIXTURE = {
    "zookeeper_server": "zookeeper",
    "dedicated_zookeeper_server": "zookeeper",
    "spark": "spark",
    "broker_cluster": "spark",  # two real serve processes shared by the Spark tests
}

# Top-level packages tests import that the ``test`` extra does not install -> the extra of
# pyproject.toml that does (tests/unit/test_tiers.py checks that it names them).
OPTIONAL_PACKAGES = {
    "pyspark": "spark",
    "pyarrow": "spark",
    "py4j": "spark",
}

# Functions (module.qualname) that start a child process.
PROCESS_HELPERS = frozenset({
    "tests.helpers.broker_testing.child_process",
    "tests.helpers.broker_testing.trikafka_command",
    "tests.helpers.kafka_processes.kafka_serve",
    "tests.helpers.kafka_processes.kafka_cluster",
})
# subprocess functions that start a child process.
SUBPROCESS_STARTERS = frozenset({"run", "Popen", "call", "check_call", "check_output"})


def pytest_configure(config: pytest.Config) -> None:
    for marker, reason in SLOW_TIER_MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {reason}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in tier_markers(item):
            item.add_marker(marker)


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """A test module whose import fails for want of an ``OPTIONAL_PACKAGES`` package is skipped with
    the reason; any other module (or other failure) is left to pytest's own collection."""
    if not isinstance(collector, pytest.Module):
        return None
    try:
        collector.obj  # imports the module; pytest's collection reuses it
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # pytest's collection imports it again and reports any other outcome
        missing = error.__cause__
        if isinstance(missing, ModuleNotFoundError) and (missing.name or "").partition(".")[0] in OPTIONAL_PACKAGES:
            package = (missing.name or "").partition(".")[0]
            lines = [line for frame, line in traceback.walk_tb(missing.__traceback__)
                     if frame.f_code.co_filename == str(collector.path)]
            reason = f"needs {package}, which the {OPTIONAL_PACKAGES[package]} extra installs"
            return pytest.CollectReport(collector.nodeid, "skipped",
                                        (str(collector.path), (lines or [1])[-1], reason), [])
    return None


def tier_markers(item: pytest.Item) -> set[str]:
    """The tier markers the tables give ``item`` (markers set by hand are not repeated here)."""
    markers = set()
    relative = item.path.relative_to(TESTS_ROOT) if item.path.is_relative_to(TESTS_ROOT) else None
    if relative is not None and relative.parts[0] in MARK_BY_DIRECTORY:
        markers.add(MARK_BY_DIRECTORY[relative.parts[0]])
    name = getattr(item, "originalname", item.name)
    if relative is not None and f"{relative.as_posix()}::{name}" in MARK_BY_TEST:
        markers.add(MARK_BY_TEST[f"{relative.as_posix()}::{name}"])
    for fixture in getattr(item, "fixturenames", ()):
        if fixture in MARK_BY_FIXTURE:
            markers.add(MARK_BY_FIXTURE[fixture])
    function = getattr(item, "function", None)
    if function is not None and starts_processes(function):
        markers.add("process")
    return markers


def starts_processes(function: Callable[..., Any], seen: set[types.CodeType] | None = None) -> bool:
    """Whether ``function`` calls a ``PROCESS_HELPERS`` function or starts a subprocess, directly or
    through the functions and classes (their methods) of ``tests`` modules it names (followed through
    their globals; a name imported inside a function is not followed)."""
    seen = set() if seen is None else seen
    target = inspect.unwrap(function)
    code = getattr(target, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    namespace = getattr(target, "__globals__", {})
    names = _names(code)
    for name in names:
        value = namespace.get(name)
        if value is subprocess and SUBPROCESS_STARTERS & names:
            return True
        if not callable(value) or not getattr(value, "__module__", "").startswith("tests."):
            continue
        if f"{value.__module__}.{value.__qualname__}" in PROCESS_HELPERS:
            return True
        if inspect.isfunction(inspect.unwrap(value)) and starts_processes(value, seen):
            return True
        if inspect.isclass(value) and any(starts_processes(method, seen) for method in vars(value).values()
                                          if inspect.isfunction(method)):
            return True
    return False


def _names(code: types.CodeType) -> set[str]:
    """Global and attribute names ``code`` and the code nested in it (closures, comprehensions) use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names
