"""The tier tables of tests/helpers/tiers.py name things that exist, and process detection works."""

from __future__ import annotations

import ast
import importlib
import subprocess

from tests.helpers.broker_testing import child_process, make_config, serve_process
from tests.helpers.tiers import (
    MARK_BY_DIRECTORY,
    MARK_BY_FIXTURE,
    MARK_BY_TEST,
    PROCESS_HELPERS,
    SLOW_TIER_MARKERS,
    TESTS_ROOT,
    starts_processes,
)


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
