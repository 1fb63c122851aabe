"""What every ticket shares: the state of its blocking half (docs/protocol.md §7.2).

The decided design: an fsync never runs on the event loop.  The broker takes a
ticket on the loop from the log collaborator that owns the operation in flight
(``Flushing``, ``Retention``, ``Truncation``), runs its blocking part in a
worker thread, then hands it back on the loop.  The blocking parts never raise
for an I/O error: they record it, and the ``complete*`` call turns it into the
log's fail-stop ``LogFailedError``.  Each kind of ticket lives beside its owner:
``FlushTicket`` and ``RollTicket`` in ``flushing.py``, ``RetentionTicket`` in
``retention.py``, ``TruncateTicket`` in ``truncation.py``.
"""

from __future__ import annotations

CAPTURED, RUNNING, FINISHED = "captured", "running", "finished"


class Ticket:
    """What every ticket shares: its blocking half is ``CAPTURED`` (not started), ``RUNNING`` or ``FINISHED``."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state = CAPTURED

    @property
    def running(self) -> bool:
        return self._state == RUNNING

    @property
    def finished(self) -> bool:
        return self._state == FINISHED
