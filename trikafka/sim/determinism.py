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
``trio.testing.MockClock`` with ``autojump_threshold=0`` (``virtual_clock``):
when every task is blocked the clock jumps to the next deadline, so
simulated seconds cost only the CPU they use.  The simulated world does no real I/O and starts no thread
(the fake file system is synchronous), so nothing else can reorder it.

Every other choice the world makes comes from ``Streams``: one
``random.Random`` per kind of choice, each seeded by hashing the seed with
the stream's name, so a change to how one kind is drawn (a fault kind added,
say) leaves every other stream's draws as they were.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import types
import uuid
from typing import Iterator

import trio
import trio._core._run as trio_run  # the scheduler's seedable random, determinism switch and deadlines
import trio.testing


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


def virtual_clock() -> trio.testing.MockClock:
    """A ``trio.testing.MockClock(autojump_threshold=0)`` (rate 0) whose readings cost less CPU.

    Time stands still while any task can run and, once every task waits, jumps to the next deadline.
    At rate 0 a ``MockClock`` reads the real clock at each reading (several a scheduler pass) only to
    multiply it by 0, and gathers every run statistic at each jump to learn the next deadline.  This
    one's ``current_time``, ``deadline_to_sleep_time`` and ``_autojump`` (the three the scheduler
    calls) return its virtual base and ask the scheduler for the next deadline alone: the same times
    to the bit, so a seed's course is the same.  (``MockClock`` cannot be subclassed, and the
    scheduler jumps only a ``MockClock``: the instance's methods are replaced.)  Its rate must stay 0.
    """
    clock = trio.testing.MockClock(autojump_threshold=0)
    deadlines = trio_run.GLOBAL_RUN_CONTEXT  # (the runner is there while the run goes on)

    def current_time() -> float:
        return clock._virtual_base  # MockClock's: base + rate * (real - real base), at rate 0

    def deadline_to_sleep_time(deadline: float) -> float:
        return 0 if deadline - clock._virtual_base <= 0 else 999999999  # MockClock's at rate 0

    def autojump() -> None:
        jump = deadlines.runner.deadlines.next_deadline() - clock._virtual_base
        if 0 < jump < math.inf:
            clock.jump(jump)

    clock.current_time = current_time  # type: ignore[method-assign]
    clock.deadline_to_sleep_time = deadline_to_sleep_time  # type: ignore[method-assign]
    clock._autojump = autojump  # type: ignore[method-assign]
    return clock


@contextlib.contextmanager
def seeded_member_ids(stream: random.Random) -> Iterator[None]:
    """The member ids the real group coordinator draws (``uuid.uuid4``) come from ``stream`` inside the
    block (a Kafka consumer's member id orders the assignment, so an unseeded one changes the run)."""
    from trikafka.broker.kafka.groups import group as group_module  # (broker code: only when a world runs)

    seeded = types.SimpleNamespace(uuid4=lambda: uuid.UUID(int=stream.getrandbits(128), version=4))
    real = group_module.uuid
    group_module.uuid = seeded  # type: ignore[assignment]
    try:
        yield
    finally:
        group_module.uuid = real


def derived_random(seed: int, name: str) -> random.Random:
    """A ``random.Random`` seeded by the sha256 of ``seed`` and ``name``: independent for each name."""
    return random.Random(hashlib.sha256(f"{seed}/{name}".encode()).digest())


class Streams:
    """The world's random choices, one stream per kind (each a ``random.Random``).

    ``config``: the cluster's settings; ``fault``: which kind of fault;
    ``victim``: which broker or member it hits; ``timing``: the gap before
    the next fault; ``duration``: how long it lasts; ``disk``: what a power
    cut loses or tears; ``latency``: how long each request takes to arrive;
    ``produce`` and ``consume``: the clients' actions.
    """

    def __init__(self, seed: int) -> None:
        self.config = derived_random(seed, "config")
        self.fault = derived_random(seed, "fault")
        self.victim = derived_random(seed, "victim")
        self.timing = derived_random(seed, "timing")
        self.duration = derived_random(seed, "duration")
        self.disk = derived_random(seed, "disk")
        self.latency = derived_random(seed, "latency")
        self.produce = derived_random(seed, "produce")
        self.consume = derived_random(seed, "consume")


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
        """Record ``text`` at the current time (milliseconds)."""
        line = f"{self._now_ms():>9} {text}"
        if self.lines:
            self._hash.update(b"\n")
        self._hash.update(line.encode())
        self.lines.append(line)

    def _now_ms(self) -> int:
        return int(round(trio.current_time() * 1000))

    @property
    def digest(self) -> str:
        """The hex sha256 of the trace so far."""
        return self._hash.hexdigest()

    def around(self, index: int, before: int = 25, after: int = 5) -> list[str]:
        """The lines near ``index`` (for a failure report)."""
        return self.lines[max(0, index - before): index + after + 1]

