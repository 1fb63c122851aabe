"""The passes in flight on one log, and the log's retirement (docs/protocol.md §16.4).

A pass is work that touches a log across a wait: a flush, a roll or a
truncation (the flush scheduler), a follower's store of its leader's log
start, a retention pass, the cleaner's weighing and cleaning, and a request's
work on the log's files off the loop (ListOffsets' and 0.7 OFFSETS' lookups by
time, DeleteRecords' store of the log start).  Each takes a ``Lease`` from
``log.passes`` for the time it touches the log.
Deleting the log ``retire``s it first: every lease asked for from then on is
refused (``take`` returns None) and the pass skips the log; the deletion closes
the log and removes its files only once the leases taken before have ended
(``held``, ``on_ended``).  So no pass finds its log closed or its files gone
midway, and code that takes the lease needs no check of its own.
``Log.close()`` retires the log too (shutdown).

Invariants: ``held`` counts the leases taken and not yet released; once
retired, ``held`` only goes down, except by a lease taken ``under`` one still
held (a pass's own sub-pass: the roll a retention pass needs).
"""

from __future__ import annotations

from typing import Callable

__all__ = ["Lease", "Passes"]


class Lease:
    """One pass's hold on a log: ``release()`` (or leave the ``with`` block) when the pass is done."""

    __slots__ = ("_passes", "_held")

    def __init__(self, passes: Passes):
        self._passes = passes
        self._held = True

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        """End the pass; a second call does nothing."""
        if self._held:
            self._held = False
            self._passes._ended()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class Passes:
    """The pass leases of one log (``name`` is the log's, for messages)."""

    __slots__ = ("_name", "_held", "_retired", "_ended_callbacks")

    def __init__(self, name: str):
        self._name = name
        self._held = 0
        self._retired = False
        self._ended_callbacks: list[Callable[[], None]] = []

    @property
    def held(self) -> int:
        """How many leases are held now."""
        return self._held

    @property
    def retired(self) -> bool:
        """Whether new leases are refused (the log is being deleted, or closed)."""
        return self._retired

    def take(self, under: Lease | None = None) -> Lease | None:
        """A lease for a pass starting now; None once the log is retired, unless ``under`` is a
        lease of this log still held (the new pass is part of that one's)."""
        if self._retired and not (under is not None and under.held and under._passes is self):
            return None
        self._held += 1
        return Lease(self)

    def retire(self) -> None:
        """Refuse every lease from now on (for good); the leases held stay until released."""
        self._retired = True

    def on_ended(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, when the last lease held now ends (the caller saw ``held``)."""
        assert self._held, f"{self._name}: no lease is held"
        self._ended_callbacks.append(callback)

    def _ended(self) -> None:
        self._held -= 1
        assert self._held >= 0, self._name
        if not self._held:
            callbacks, self._ended_callbacks = self._ended_callbacks, []
            for callback in callbacks:
                callback()

    def __repr__(self) -> str:
        return f"Passes({self._name!r}, held={self._held}, retired={self._retired})"
