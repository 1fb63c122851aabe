"""The ``trikafka`` command's edges that every subcommand shares, as real processes: a stdout
closed early (``| head``) ends it quietly, an option is spelled out whole, and each command
imports only what it runs (``--version`` neither Trio nor the broker)."""

from __future__ import annotations

import os
import sys

import pytest
import trio

from tests.helpers.broker_testing import PROCESS_TIMEOUT_S, child_env, trikafka_command
from tests.helpers.cli import cli


@pytest.mark.parametrize("buffered", [False, True])
async def test_a_closed_stdout_ends_a_command_quietly(tmp_path, buffered):
    """``trikafka topics --log-dir DIR | head -0``: the reader is gone before anything is written
    (at once, or with a buffered stdout when it is flushed)."""
    env = child_env()
    if buffered:
        del env["PYTHONUNBUFFERED"]
    log_dir = tmp_path / "data"
    for topic in range(50):
        os.makedirs(log_dir / f"topic{topic}-0")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            done = await trio.run_process(trikafka_command("topics", "--log-dir", str(log_dir)), stdout=write_end,
                                          capture_stderr=True, check=False, env=env)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (0, "")


async def test_an_abbreviated_option_is_refused():
    status, out, err = await cli("consume", "greetings", "--form", "earliest", "--broker", "127.0.0.1:1")
    assert status == 2 and out == ""
    assert "unrecognized arguments: --form earliest" in err, err


# ``python -m trikafka ARGS``, then what it imported: whether Trio, and which modules of the broker's layers
_IMPORTS_AFTER = """\
import runpy, sys
try:
    runpy.run_module("trikafka", run_name="__main__")
except SystemExit:
    pass
print("trio" in sys.modules, sorted(m for m in sys.modules if m.startswith(("trikafka.broker", "trikafka.log"))),
      file=sys.stderr)
"""


async def _imports_of(*args: str) -> str:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process([sys.executable, "-c", _IMPORTS_AFTER, *args], stdin=b"x\n",
                                      capture_stdout=True, capture_stderr=True, check=False, env=child_env())
    return done.stderr.decode().splitlines()[-1]


async def test_each_command_imports_only_what_it_runs():
    assert await _imports_of("--version") == "False []"
    assert await _imports_of("--help") == "False []"
    assert await _imports_of("produce", "t", "--broker", "127.0.0.1:1") == "True []"  # refused: no broker there
    assert await _imports_of("consume", "t", "--broker", "127.0.0.1:1") == "True []"
