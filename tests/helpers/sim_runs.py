"""What the tests of the simulation's worlds share (docs/simulation.md): a seed replays, and a caught
seed's replay line, run as a command, fails the same way."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from typing import Any, Callable, Iterable

COMMAND_TIMEOUT_S = 120


def assert_a_seed_replays_exactly(run_seed: Callable[[int], Any], seed: int, other: int) -> None:
    """``seed`` run twice is one run (the same digest and trace, every promise kept); ``other`` is
    another run.  ``run_seed`` is the world's, with any settings bound."""
    first, again = run_seed(seed), run_seed(seed)
    assert first.ok and first.digest == again.digest and first.trace_lines == again.trace_lines
    assert run_seed(other).digest != first.digest


def assert_the_command_replays(failed: Any, promise: str, world: str, clean_seed: int, clean_digest: str,
                               *clean_args: str) -> None:
    """``failed`` (a world's result that broke ``promise``) names a replay command that exits 1 with the
    same digest and report; ``trikafka sim --world WORLD --seed CLEAN_SEED [CLEAN_ARGS]`` prints its ok line."""
    command = re.search(r"^  replay: (trikafka sim .*)$", failed.report(), re.MULTILINE).group(1)
    replayed = subprocess.run([sys.executable, "-m", *shlex.split(command)], capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
    assert replayed.returncode == 1
    assert replayed.stdout.splitlines()[-1] == f"seed {failed.seed}: FAILED ({promise}) trace {failed.digest}"
    assert failed.report() in replayed.stderr
    clean = subprocess.run([sys.executable, "-m", "trikafka", "sim", "--world", world, "--seed", str(clean_seed), *clean_args],
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert clean.returncode == 0 and clean.stdout.strip() == f"seed {clean_seed}: ok trace {clean_digest}"


def first_caught(run_seed: Callable[[int], Any], promises: set[str], seeds: Iterable[int]) -> Any:
    """The first of ``seeds`` whose run breaks a promise (asserted to be one of ``promises``).  A plant's
    catching seeds move whenever shipped code changes the schedule, so a test scans a few seeds
    rather than pinning one; ``run_seed`` is the world's, with the plant and settings bound."""
    tried = []
    for seed in seeds:
        result = run_seed(seed)
        if result.violation is not None:
            assert result.violation.promise in promises, result.report()
            return result
        tried.append(seed)
    raise AssertionError(f"no seed of {tried} broke a promise")
