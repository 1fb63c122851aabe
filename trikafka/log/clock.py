"""Clocks in milliseconds: the real wall clock and a manual one for tests.

Retention and segment mtimes are wall-clock facts (spec §7.4), so the log
core takes a ``clock_ms`` callable instead of reading the time itself.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, the default clock of the log core."""
    return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; call it to read the time."""

    def __init__(self, now_ms: int = 0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> int:
        """Move forward by ``delta_ms`` (never backwards) and return the new time."""
        assert delta_ms >= 0, delta_ms
        self.now_ms += delta_ms
        return self.now_ms
