"""What may start on one log now (docs/protocol.md §7.2, §7.4, §12.11).

A log runs at most one flush, roll, retention pass, truncation and cleaning
at a time, and some operations exclude others: ``EXCLUDED_BY`` is the one table of those rules.  ``Gate`` is
the log's collaborator that answers from it.  It reads what is in flight from
the collaborators that own the tickets (``Flushing``: the flush and the roll,
``Retention``: the pass, ``Truncation``: the cut), and holds the states that
no ticket owns: the cleaner's flag, the log's fail-stop failure and whether
it is closed.  Its listeners hear when an operation ends and none is left in
flight: when a truncation may start again.

Invariants:

* a truncation waits for every other kind, so "idle" is "a truncation may
  start" (asserted on the table below);
* a failed or closed log never accepts a write again: nothing clears
  ``failure`` or ``closed``, and the first failure's reason stays.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import LogBusyError, LogClosedError, LogFailedError

logger = logging.getLogger("trikafka.log")

# What can be in flight on a log.
FLUSH, ROLL, RETENTION, TRUNCATION, CLEANING = "flush", "roll", "retention pass", "truncation", "cleaning"
IN_FLIGHT = (FLUSH, ROLL, RETENTION, TRUNCATION, CLEANING)
# What else may start: an append; a roll or a retention pass run on the caller's thread.
APPEND, INLINE_ROLL, INLINE_RETENTION = "append", "inline roll", "inline retention pass"

# Which operations in flight keep an operation from starting.
EXCLUDED_BY: dict[str, tuple[str, ...]] = {
    APPEND: (ROLL, TRUNCATION),  # a roll names the new segment by the old one's end
    FLUSH: (FLUSH, ROLL),  # one flush or roll ticket per log; under a truncation a flush captures nothing
    ROLL: (FLUSH, ROLL, TRUNCATION),
    INLINE_ROLL: (ROLL, TRUNCATION),  # it fsyncs the whole segment: a flush in flight then changes nothing
    RETENTION: (RETENTION, TRUNCATION),
    INLINE_RETENTION: (ROLL, TRUNCATION, CLEANING),
    TRUNCATION: IN_FLIGHT,  # it cuts segments any of them may hold
}
assert set(EXCLUDED_BY[TRUNCATION]) == set(IN_FLIGHT), EXCLUDED_BY


class Gate:
    """One log's admission of operations: ``check`` before one starts, ``fail`` when one's I/O failed.

    ``in_flight`` maps each kind the log's collaborators own (flush, roll,
    retention pass, truncation) to a probe of whether one is in flight; the
    gate owns ``cleaning`` itself.  ``name`` is the log's, for messages.
    """

    __slots__ = ("_name", "_probes", "_excluders", "_cleaning", "_failure", "_closed", "_idle_listeners")

    def __init__(self, name: str, in_flight: dict[str, Callable[[], bool]]):
        assert set(in_flight) == set(IN_FLIGHT) - {CLEANING}, in_flight
        self._name = name
        self._cleaning = False
        self._probes = dict(in_flight, **{CLEANING: lambda: self._cleaning})
        # EXCLUDED_BY with each kind's probe in place of its name (appends ask on every call).
        self._excluders = {op: tuple(self._probes[kind] for kind in kinds) for op, kinds in EXCLUDED_BY.items()}
        self._failure: str | None = None
        self._closed = False
        self._idle_listeners: list[Callable[[], None]] = []

    @property
    def failure(self) -> str | None:
        """Why the log stopped accepting writes, or None while it is healthy."""
        return self._failure

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def cleaning(self) -> bool:
        """Set by the cleaner while it rewrites segments: retention and truncation wait."""
        return self._cleaning

    @cleaning.setter
    def cleaning(self, value: bool) -> None:
        self._cleaning = value
        if not value:
            self.notify_idle()

    def in_flight(self, kind: str) -> bool:
        """Whether an operation of ``kind`` (one of ``IN_FLIGHT``) is in flight."""
        return self._probes[kind]()

    def blockers(self, operation: str) -> list[str]:
        """The operations in flight that keep ``operation`` (a key of ``EXCLUDED_BY``) from starting."""
        return [kind for kind in EXCLUDED_BY[operation] if self._probes[kind]()]

    @property
    def idle(self) -> bool:
        """Nothing is in flight: a truncation may start."""
        return not self.blockers(TRUNCATION)

    def check_writable(self) -> None:
        """Raise ``LogClosedError`` for a closed log, ``LogFailedError`` for a failed one."""
        if self._closed:
            raise LogClosedError(f"{self._name} is closed")
        if self._failure is not None:
            raise LogFailedError(self._failure)

    def check(self, operation: str) -> None:
        """``check_writable``, then raise ``LogBusyError`` while ``operation`` is excluded."""
        if self._closed or self._failure is not None:
            self.check_writable()
        for probe in self._excluders[operation]:
            if probe():
                raise LogBusyError(f"{self._name}: {operation} waits for the "
                                   f"{', '.join(self.blockers(operation))} in flight")

    def fail(self, reason: str) -> LogFailedError:
        """Enter the failed state (fail-stop) and return the error to raise; the first reason stays."""
        if self._failure is None:
            self._failure = f"{self._name}: {reason}"
            logger.error("log failed, refusing further writes: %s", self._failure)
        return LogFailedError(self._failure)

    def close(self) -> None:
        """From here on every write raises ``LogClosedError``."""
        self._closed = True

    def add_idle_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when an operation ends and none is left in flight."""
        self._idle_listeners.append(callback)

    def notify_idle(self) -> None:
        """An operation ended: the idle listeners hear it if none is left in flight."""
        if self.idle:
            for callback in tuple(self._idle_listeners):
                callback()

    @contextmanager
    def settling(self) -> Iterator[None]:
        """Around settling a ticket taken back from its collaborator: ``notify_idle`` after it, even when it raised."""
        try:
            yield
        finally:
            self.notify_idle()
