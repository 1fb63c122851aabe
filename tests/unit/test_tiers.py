"""The tier tables of tests/helpers/tiers.py name things that exist, and process detection works."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import subprocess
import sys
import tomllib

from tests.helpers.broker_testing import child_process, make_config, serve_process
from tests.helpers.tiers import (
    MARK_BY_DIRECTORY,
    MARK_BY_FIXTURE,
    MARK_BY_TEST,
    OPTIONAL_PACKAGES,
    PROCESS_HELPERS,
    SLOW_TIER_MARKERS,
    TESTS_ROOT,
    starts_processes,
)

pytest_plugins = ["pytester"]


def test_every_table_entry_names_what_exists_and_a_known_marker():
    for directory, marker in MARK_BY_DIRECTORY.items():
        assert (TESTS_ROOT / directory).is_dir() and marker in SLOW_TIER_MARKERS, directory
    for key, marker in MARK_BY_TEST.items():
        path, function = key.split("::")
        tree = ast.parse((TESTS_ROOT / path).read_text())
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert function in defined and marker in SLOW_TIER_MARKERS, key
    helper_sources = "".join(path.read_text() for path in (TESTS_ROOT / "helpers").glob("*.py"))
    for fixture, marker in MARK_BY_FIXTURE.items():
        assert f"def {fixture}(" in helper_sources and marker in SLOW_TIER_MARKERS, fixture
    for helper in PROCESS_HELPERS:
        module, _, name = helper.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), helper


async def _starts_a_broker(tmp_path):
    async with serve_process(tmp_path):
        pass


async def _through_a_helper(tmp_path):
    await _starts_a_broker(tmp_path)


async def _a_command():
    async with child_process("topics"):
        pass


def _runs_sim():
    subprocess.run(["trikafka", "sim"], check=True)


def _in_process(tmp_path):
    return make_config(tmp_path), subprocess.PIPE


# In a tuple, so that this module's own test does not call them (and is not a process test itself).
STARTING = (_a_command, _starts_a_broker, _through_a_helper, _runs_sim)
NOT_STARTING = (_in_process,)


def test_process_helpers_are_found_directly_and_through_calls():
    assert [starts_processes(f) for f in STARTING] == [True] * len(STARTING)
    assert [starts_processes(f) for f in NOT_STARTING] == [False] * len(NOT_STARTING)


def test_a_module_importing_an_absent_optional_package_is_skipped_with_the_extra_named(pytester):
    """``pytest`` with the test extra alone (issue 43, item 16): a module importing a Spark package
    that is not installed is skipped and says why; an absent package of no tier stays an error."""
    pytester.makepyfile(
        test_needs_spark="import pyspark.no_such_module\n\ndef test_x():\n    pass\n",
        test_broken="import no_such_package_of_any_extra\n\ndef test_y():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "tests.helpers.tiers", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1, errors=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_needs_spark.py:1: needs pyspark, which the spark extra installs"])


def test_every_package_a_test_imports_is_named_by_the_extra_that_installs_it():
    """A package the suite imports but that came only as another's dependency, or by hand, is missing
    on a fresh machine (issue 43): each is named in pyproject.toml's dependencies or test extra, or,
    for an ``OPTIONAL_PACKAGES`` one, in its tier's extra (checked where it is installed)."""
    project = tomllib.loads((TESTS_ROOT.parent / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = _distribution_names(project["dependencies"]) | _distribution_names(extras["test"])
    providers = importlib.metadata.packages_distributions()
    unnamed = {}
    for package in sorted(_packages_imported_by_tests()):
        extra = OPTIONAL_PACKAGES.get(package)
        if extra is not None and package not in providers:
            continue
        allowed = named if extra is None else _distribution_names(extras[extra])
        distributions = {_normalized(name) for name in providers.get(package, [])}
        if not distributions & allowed:
            unnamed[package] = sorted(distributions) or "not installed"
    assert unnamed == {}
    for package, extra in OPTIONAL_PACKAGES.items():
        assert extra in extras, package


def _packages_imported_by_tests() -> set[str]:
    own = {"tests", "trikafka", "pyspark_trikafka", "bench", "__future__"}  # bench: the repository's benches
    packages = set()
    for path in TESTS_ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                packages |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                packages.add(node.module.partition(".")[0])
    return packages - own - set(sys.stdlib_module_names)


def _distribution_names(requirements: list[str]) -> set[str]:
    return {_normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group()) for requirement in requirements}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503
