"""The built wheel, installed in a fresh virtual environment, runs a broker that a
producer and a consumer from the same environment can use.

Nothing from this checkout is on the child's import path: the wheel is built from
a copy of the sources, and every command runs the venv's own ``trikafka`` script
from a scratch directory.  Dependencies come from the package index pip is
configured with on this machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import trio

from tests.helpers.broker_testing import READY_MARKER, REPO_ROOT, child_process
from trikafka.cli.serve import read_ready_file

pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "README.md", "LICENSE", "trikafka", "pyspark_trikafka")
INSTALL_TIMEOUT_S = 600  # building and installing with dependencies from the index


def _copy_sources(target: Path) -> None:
    target.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)


def _run(*argv: str | Path, cwd: Path) -> None:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                            timeout=INSTALL_TIMEOUT_S, env=_clean_env())
    assert result.returncode == 0, f"{argv[:3]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel built from this checkout installed; its bin directory."""
    root = tmp_path_factory.mktemp("wheel")
    _copy_sources(root / "src")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", root / "dist", root / "src", cwd=root)
    [wheel] = (root / "dist").glob("trikafka-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "trikafka/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    _run(sys.executable, "-m", "venv", root / "venv", cwd=root)
    bin_dir = root / "venv" / "bin"
    _run(bin_dir / "python", "-m", "pip", "install", wheel, cwd=root)
    return bin_dir


async def test_the_installed_wheel_serves_produces_and_consumes(installed, tmp_path):
    trikafka = [str(installed / "trikafka")]
    env = _clean_env()
    ready_file = tmp_path / "port"
    where = dict(program=trikafka, env=env, cwd=tmp_path)
    async with child_process("serve", "--standalone", "--port", "0", "--log-dir", str(tmp_path / "data"),
                             "--ready-file", str(ready_file), **where) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        broker_address = f"127.0.0.1:{read_ready_file(str(ready_file))[0]}"
        async with child_process("produce", "wheel-topic", "--broker", broker_address, "--acks", "-1",
                                 stdin=subprocess.PIPE, **where) as producer:
            await producer.send_stdin(b"from the wheel\nsecond line\n")
            assert await producer.wait() == 0, producer.stderr.decode()
        async with child_process("consume", "wheel-topic", "--broker", broker_address, "--max-messages", "2",
                                 stdout=subprocess.PIPE, **where) as consumer:
            assert await consumer.wait() == 0, consumer.stderr.decode()
        assert bytes(consumer.stdout).splitlines() == [b"from the wheel", b"second line"]
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    # The installed package is the wheel's, not this checkout.
    location = await trio.run_process(
        [str(installed / "python"), "-c", "import trikafka, sys; sys.stdout.write(trikafka.__file__)"],
        capture_stdout=True, env=env, cwd=tmp_path)
    assert Path(location.stdout.decode()).is_relative_to(installed.parent)
