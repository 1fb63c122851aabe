"""``keep_freed_memory``: a process that allocates and frees request-sized buffers stops paying a page
fault per 4 KiB of each (glibc otherwise returns them to the kernel at every free)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# A child process: frees and allocates 1 MiB buffers, two alive at a time as a Produce's frame and
# records are, after ``keep_freed_memory()`` or not; prints its minor page faults per buffer.
CHILD = """
import resource, sys
from trikafka.util.malloc import keep_freed_memory
if sys.argv[1] == "kept":
    keep_freed_memory()
    keep_freed_memory()  # harmless again
source = bytearray(1 << 20)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):  # warm up: the heap reaches its size
    frame = bytes(source); records = bytearray(frame); del frame, records
before = faults()
for _ in range(50):
    frame = bytes(source); records = bytearray(frame); del frame, records
print((faults() - before) / 100)
"""

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def _faults_per_buffer(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                         timeout=60)
    return float(out.stdout)


@glibc_only
def test_freed_buffers_are_reused_without_page_faults():
    assert _faults_per_buffer("kept") < 5  # a 1 MiB buffer is 256 pages


@glibc_only
def test_without_it_each_buffer_faults_its_pages_in_again():
    """What the setting changes: the control case, so the test above shows something."""
    assert _faults_per_buffer("default") > 100
