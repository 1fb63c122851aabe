"""A byte-rate throttle shared by the cleaner's worker threads (log.cleaner.io.max.bytes.per.second)."""

from __future__ import annotations

import threading
import time
from typing import Callable


class Throttler:
    """``charge(n)`` blocks the calling (worker) thread so the rate stays under ``bytes_per_s``.

    A rate of 0 or less means unlimited.  The clock and the sleep are injectable,
    so tests run without real time.
    """

    def __init__(self, bytes_per_s: float, monotonic_s: Callable[[], float] = time.monotonic,
                 sleep_s: Callable[[float], None] = time.sleep):
        self.bytes_per_s = bytes_per_s
        self._monotonic_s, self._sleep_s = monotonic_s, sleep_s
        self._lock = threading.Lock()
        self._next_free_s: float | None = None  # when the bytes charged so far are paid for
        self.charged_bytes = 0

    def charge(self, n: int) -> None:
        with self._lock:
            self.charged_bytes += n
            if self.bytes_per_s <= 0 or n <= 0:
                return
            now = self._monotonic_s()
            start = now if self._next_free_s is None or self._next_free_s < now else self._next_free_s
            self._next_free_s = start + n / self.bytes_per_s
            delay = self._next_free_s - now
        if delay > 0:
            self._sleep_s(delay)
