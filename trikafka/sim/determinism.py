"""One seed, one run: Trio's scheduler made deterministic, and the event trace that proves it.

Trio picks between runnable tasks with a module-level ``random.Random``
(``trio._core._run._r``): unseeded, it reverses each batch of runnable tasks
with probability one half, so two runs of the same program interleave
differently.  It also has a switch, ``_ALLOW_DETERMINISTIC_SCHEDULING``, that
Hypothesis flips through Trio's entry-point plugin: each batch is then sorted
by task creation order (``Task._counter``) and shuffled with ``_r``.  Sorting
first also neutralises the orders that depend on memory addresses (sets of
tasks woken by a cancellation, the ``id()`` tie-break between equal
deadlines), since everything woken in one scheduler pass lands in one batch.

``deterministic_trio(seed)`` flips that switch and seeds ``_r`` for the
duration of one ``trio.run``, then restores both.  Time is a
``trio.testing.MockClock`` with ``autojump_threshold=0``: when every task is
blocked the clock jumps to the next deadline, so simulated seconds cost only
the CPU they use.  The simulated world does no real I/O and starts no thread
(the fake file system is synchronous), so nothing else can reorder it.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Iterator

import trio
import trio._core._run as trio_run  # the scheduler's seedable random and its determinism switch


@contextlib.contextmanager
def deterministic_trio(seed: int) -> Iterator[None]:
    """Make Trio's task scheduling a function of ``seed`` inside the block (not thread-safe)."""
    saved_flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_state = trio_run._r.getstate()
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(seed)
    try:
        yield
    finally:
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]
        trio_run._r.setstate(saved_state)


class Trace:
    """The run's event history: one line per event, stamped with simulated time.

    ``digest`` is the sha256 of the lines joined by newlines: two runs of a
    seed print the same digest exactly when they made the same decisions in
    the same order at the same simulated times.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._hash = hashlib.sha256()

    def add(self, text: str) -> None:
        """Record ``text`` at the current Trio time (milliseconds)."""
        line = f"{int(round(trio.current_time() * 1000)):>9} {text}"
        if self.lines:
            self._hash.update(b"\n")
        self._hash.update(line.encode())
        self.lines.append(line)

    @property
    def digest(self) -> str:
        """The hex sha256 of the trace so far."""
        return self._hash.hexdigest()

    def around(self, index: int, before: int = 25, after: int = 5) -> list[str]:
        """The lines near ``index`` (for a failure report)."""
        return self.lines[max(0, index - before): index + after + 1]
