"""One INFO line for a burst of like events, such as the partitions a restart brings back.

A broker with many partitions does the same thing to each of them at once (a restart: elect, lead,
load a coordinator's state); a line for each drowns what matters.  The call site logs each event at
DEBUG and notes it in a ``Tally``; the tally logs one INFO line per burst, with the count of each
group (a topic) in distinct items (its partitions: one that changes twice in a burst counts once),
once ``QUIET_S`` pass without another note, or when the Trio run ends.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Hashable

import trio

QUIET_S = 1.0  # a burst ends after this long without a note


class Tally:
    """Counts the items an event of one kind befell, by group, and logs them as ``<what>: N (group n,
    ...)`` once the burst is over.  ``note`` is called from a Trio task; the line is written by a Trio system
    task, so a tally needs no nursery of its own."""

    def __init__(self, logger: logging.Logger, what: str, quiet_s: float = QUIET_S) -> None:
        self.logger = logger
        self.what = what
        self.quiet_s = quiet_s
        self._items: defaultdict[str, set[Hashable]] = defaultdict(set)
        self._last_s = 0.0
        self._pending = False

    def note(self, group: str, item: Hashable) -> None:
        """Count ``item`` of ``group`` (once a burst)."""
        self._items[group].add(item)
        self._last_s = trio.current_time()
        if not self._pending:
            self._pending = True
            trio.lowlevel.spawn_system_task(self._write_when_quiet, name=f"tally: {self.what}")

    def line(self) -> str:
        """The line for what was noted since the last one."""
        groups = ", ".join(f"{group} {len(items)}" for group, items in sorted(self._items.items()))
        return f"{self.what}: {sum(len(items) for items in self._items.values())} ({groups})"

    async def _write_when_quiet(self) -> None:
        try:
            while (due_s := self._last_s + self.quiet_s) > trio.current_time():
                await trio.sleep_until(due_s)
        finally:  # also when the run ends (a system task is cancelled then): the burst is reported
            self.logger.info("%s", self.line())
            self._items.clear()
            self._pending = False
