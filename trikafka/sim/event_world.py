"""What the event-driven worlds (``kafka_groups``, ``txn_world``) share: a virtual clock that is a heap
of events in ms, the trace stamped with it, the first broken promise, and the result of a seed with
the command that replays it (docs/simulation.md).

These worlds run no Trio: each event is a callback at a time in ms, events at one time run in the
order they were scheduled, so a seed's run is a function of the seed alone.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Generic, TypeVar

from .checker import Violation
from .determinism import ClockTrace, Trace, derived_random

W = TypeVar("W")


@dataclass(frozen=True)
class EventFault(Generic[W]):
    """One kind of fault of an event world: how it is injected on (world, victim, duration in ms),
    and the range its durations are drawn from."""

    name: str
    inject: Callable[[W, int, int], None]
    durations_ms: tuple[int, int]


class EventWorld:
    """The clock, the streams of random choices, the trace and the first violation of one seed's world."""

    def __init__(self, seed: int, duration_ms: int, faults: tuple[str, ...], streams: tuple[str, ...]):
        self.seed, self.duration_ms, self.fault_names = seed, duration_ms, faults
        self.streams = {name: derived_random(seed, name) for name in streams}
        self.now_ms = 0
        self._events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []  # Any: each callback's args
        self._order = itertools.count()
        self.trace: Trace = ClockTrace(lambda: self.now_ms)
        self.violation: Violation | None = None

    def at(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None:
        """Call ``callback(*args)`` at ``when_ms`` (now, if that has passed)."""
        heapq.heappush(self._events, (max(when_ms, self.now_ms), next(self._order), callback, args))

    def run_until(self, end_ms: int) -> None:
        """Run the events up to ``end_ms`` or the first violation; the clock then reads ``end_ms``."""
        while self._events and self.violation is None:
            when, _, callback, args = heapq.heappop(self._events)
            if when > end_ms:
                break
            self.now_ms = when
            callback(*args)
        self.now_ms = end_ms

    def fail(self, violation: Violation | None) -> None:
        """Keep the first violation, with where it stands in the trace."""
        if violation is not None and self.violation is None:
            self.trace.add(f"VIOLATION {violation.promise}: {violation.detail}")
            self.violation = Violation(violation.promise, violation.detail, len(self.trace.lines) - 1)


@dataclass
class WorldResult:
    """The outcome of one seed of an event-driven world."""

    seed: int
    ok: bool
    digest: str
    simulated_s: float
    violation: Violation | None = None
    context: list[str] = field(default_factory=list)
    trace_lines: list[str] = field(default_factory=list)
    replay: str = ""

    def report(self) -> str:
        """The promise broken, the events before it, the command that replays it and its trace digest."""
        if self.violation is None:
            return f"seed {self.seed}: ok trace {self.digest}"
        return "\n".join([f"seed {self.seed}: BROKEN {self.violation.promise}: {self.violation.detail}",
                          *(f"  {line}" for line in self.context),
                          f"  replay: {self.replay}", f"  trace {self.digest}"])


def replay_command(world: str, seed: int, duration_ms: int, faults: tuple[str, ...], every_fault: tuple[str, ...],
                   plant: str | None) -> str:
    """The ``trikafka sim`` command that runs the seed again (``every_fault``: the world's default)."""
    parts = [f"trikafka sim --world {world} --seed {seed} --duration-s {duration_ms / 1000:g}"]
    if faults != every_fault:
        parts.append(f"--faults {','.join(faults)}")
    if plant is not None:
        parts.append(f"--plant {plant}")
    return " ".join(parts)


def judge(world: EventWorld, run: Callable[[], None], inside: ContextManager[Any] | None = None) -> list[str]:
    """Run ``world`` (``run``) inside ``inside``; a crash of the world itself is a violation too. The
    lines around the violation (and the crash's traceback): the report's context."""
    crash: list[str] = []
    try:
        with inside if inside is not None else contextlib.nullcontext():
            run()
    except Exception as exc:  # the world itself failed: a failed seed too, replayable like the rest
        world.fail(Violation("the simulation runs to its end", repr(exc)))
        crash = [line for chunk in traceback.format_exception(exc) for line in chunk.rstrip().splitlines()]
    violation = world.violation
    return (world.trace.around(violation.trace_index) if violation is not None else []) + crash
