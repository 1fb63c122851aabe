"""Wake-ups when a log's visible end advances, and the one long poll (spec §9.2-§9.3, §12.6, §16.4).

Waiters are keyed by ``(topic, partition)`` rather than by ``Log`` so that a
long poll on a partition that has no log yet is woken when a produce creates
it and a flush makes its first bytes visible.  Nothing polls: the log calls
``notify`` (through its visible-end listener) right after a flush advances
the visible end, and every task waiting on that partition wakes once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Awaitable, Callable, Iterable, Protocol, TypeVar

import trio

from ..seams import BrokerLog

T = TypeVar("T")

TopicPartition = tuple[str, int]
# What a wait is keyed by: (topic, partition) for visible-end (and high-watermark) advances, and
# (topic, partition, "log-end") for appends at a replicated partition's leader (its followers' long polls).
WaitKey = TopicPartition | tuple[str, int, str]


class _Waiter(Protocol):
    def set(self) -> None: ...


class AdvanceCall:
    """``VisibleEndWaiters.call_on_advance``'s registration: ``cancel()`` drops it unless it was called."""

    __slots__ = ("_waiters", "_keys", "_callback")

    def __init__(self, waiters: VisibleEndWaiters, keys: list[WaitKey], callback: Callable[[], None]):
        self._waiters, self._keys, self._callback = waiters, keys, callback

    def set(self) -> None:  # one of its keys advanced (``notify``)
        self.cancel()
        self._callback()

    def cancel(self) -> None:
        self._waiters._drop(self, self._keys)
        self._keys = []


class VisibleEndWaiters:
    """Per-partition sets of waiters (``trio.Event``s, ``AdvanceCall``s), set (and dropped) on each advance."""

    def __init__(self) -> None:
        self._events: defaultdict[WaitKey, set[_Waiter]] = defaultdict(set)
        self._wake_on_close: set[trio.Event] = set()
        self._closing = False

    def notify(self, key: WaitKey) -> None:
        """The visible end of ``key`` advanced: wake everyone waiting on it."""
        events = self._events.pop(key, None)
        if events:
            for event in events:
                event.set()

    def on_visible(self, log: BrokerLog) -> None:
        """A ``Log.add_visible_listener`` callback."""
        self.notify((log.topic, log.partition))

    def close(self) -> None:
        """Shutdown: wake the long polls now; later long polls return at once.

        Waits registered with ``wake_on_close=False`` (acks=-1, which the
        flusher still serves while the broker drains) keep waiting.
        """
        self._closing = True
        for event in self._wake_on_close:
            event.set()

    @property
    def closing(self) -> bool:
        return self._closing

    async def wait_any(self, keys: Iterable[WaitKey], deadline: float, *,
                       wake_on_close: bool = True) -> bool:
        """Wait until one of ``keys`` advances, the deadline passes, or (optionally) shutdown.

        Returns True when woken by an advance or shutdown, False at the deadline.
        Callers re-check their condition afterwards, so a spurious wake is harmless.
        Register-then-wait has no checkpoint in between, so no advance is missed
        after the caller's last check.
        """
        if self._closing and wake_on_close:
            await trio.lowlevel.checkpoint()
            return True
        event = trio.Event()
        keys = list(dict.fromkeys(keys))
        for key in keys:
            self._events[key].add(event)
        if wake_on_close:
            self._wake_on_close.add(event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
                return True
            return False
        finally:
            self._wake_on_close.discard(event)
            self._drop(event, keys)

    def call_on_advance(self, keys: Iterable[WaitKey], callback: Callable[[], None]) -> AdvanceCall:
        """Call ``callback()`` once, when one of ``keys`` next advances: ``wait_any`` without a task.

        It runs inside ``notify`` (a flush's completion, a high-watermark move), so it must not
        raise, and it is not called at shutdown (as ``wake_on_close=False``).
        """
        call = AdvanceCall(self, list(dict.fromkeys(keys)), callback)
        for key in call._keys:
            self._events[key].add(call)
        return call

    def _drop(self, waiter: _Waiter, keys: Iterable[WaitKey]) -> None:
        for key in keys:
            waiting = self._events.get(key)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._events[key]

    async def long_poll(self, keys: Iterable[WaitKey], deadline: float, attempt: Callable[[], Awaitable[T]],
                        ready: Callable[[T], bool]) -> T:
        """The one long poll (0.7 FETCH_WAIT, Kafka Fetch, REPLICA_FETCH): ``attempt`` until its
        answer is ``ready``, the broker shuts down or ``deadline`` passes, waiting between
        attempts for one of ``keys`` to advance (no polling).  An attempt runs once more
        after the deadline, so the answer says what is there when the wait ends.
        """
        keys = list(keys)
        while True:
            answer = await attempt()
            if ready(answer) or self._closing or trio.current_time() >= deadline:
                return answer
            del answer  # an attempt's answer may hold file regions: recomputed after the wait
            await self.wait_any(keys, deadline)

    def waiting_count(self) -> int:
        """How many (key, waiter) registrations exist (tests check nothing leaks)."""
        return sum(len(v) for v in self._events.values())
