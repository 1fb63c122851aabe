"""A group's join phase (docs/protocol.md §17.4), sans I/O: when it may end and who leaves when it does,
and the member ids handed out with MEMBER_ID_REQUIRED that have not joined yet (KIP-394)."""

from __future__ import annotations

from .member import NO_DEADLINE
from .roster import Roster


class Rebalance:
    """One group's join phase and pending member ids, over the group's roster.

    The join phase (PreparingRebalance) ends once every member's JoinGroup waits, or at its deadline,
    the largest rebalance timeout of the members from when it began; an Empty group's first join phase
    also waits out the initial delay, which each new member's join starts again, never past the deadline.
    A pending member id counts until it joins or its deadline passes.  ``NO_DEADLINE`` marks what is not
    running; the group asks for the deadlines only while it is PreparingRebalance.
    """

    def __init__(self, roster: Roster, initial_delay_ms: int):
        self._roster = roster
        self._initial_delay_ms = initial_delay_ms
        self.deadline_ms = NO_DEADLINE
        self.initial_delay_deadline_ms = NO_DEADLINE
        self.pending_ids: dict[str, int] = {}  # member ids given with MEMBER_ID_REQUIRED -> their deadline

    def give_id(self, member_id: str, deadline_ms: int) -> None:
        """``member_id`` was handed out with MEMBER_ID_REQUIRED; it may join until ``deadline_ms``."""
        self.pending_ids[member_id] = deadline_ms

    def take_id(self, member_id: str) -> bool:
        """Whether ``member_id`` is a pending id; it is pending no longer."""
        return self.pending_ids.pop(member_id, None) is not None

    def begin(self, now_ms: int, first: bool) -> None:
        """The join phase begins (or begins again) at ``now_ms``; ``first``: the group was Empty."""
        timeout_ms = max((m.rebalance_timeout_ms for m in self._roster.members.values()), default=0)
        self.deadline_ms = now_ms + timeout_ms
        if first and self._initial_delay_ms > 0:
            self._restart_initial_delay(now_ms)

    def member_added(self, now_ms: int) -> None:
        """A new member joined during the join phase: a running initial delay starts again."""
        if self.initial_delay_deadline_ms != NO_DEADLINE:
            self._restart_initial_delay(now_ms)

    def _restart_initial_delay(self, now_ms: int) -> None:
        self.initial_delay_deadline_ms = min(now_ms + self._initial_delay_ms, self.deadline_ms)

    def due(self, now_ms: int) -> bool:
        """Whether the join phase may end at ``now_ms``."""
        if self.initial_delay_deadline_ms != NO_DEADLINE and now_ms < self.initial_delay_deadline_ms:
            return False
        return now_ms >= self.deadline_ms or all(m.awaiting_join for m in self._roster.members.values())

    def complete(self, now_ms: int) -> list[str]:
        """The join phase ends at ``now_ms``: the members that did not rejoin leave the roster (their ids
        are returned), the others' JoinGroups wait no more and their sessions run again from now."""
        gone = [m for m in self._roster.members.values() if not m.awaiting_join]
        for member in gone:
            self._roster.remove(member)
        for member in self._roster.members.values():
            member.awaiting_join = False
            member.touch(now_ms)
        self.deadline_ms = self.initial_delay_deadline_ms = NO_DEADLINE
        return [m.member_id for m in gone]

    def deadlines(self, joining: bool) -> list[int]:
        """The pending ids' deadlines, and (``joining``: PreparingRebalance) the join phase's."""
        deadlines = list(self.pending_ids.values())
        if joining:
            deadlines.append(self.deadline_ms)
            if self.initial_delay_deadline_ms != NO_DEADLINE:
                deadlines.append(self.initial_delay_deadline_ms)
        return deadlines

    def tick(self, now_ms: int) -> None:
        """Drop the pending ids whose deadline passed; end an initial delay that passed."""
        for member_id in [m for m, deadline in self.pending_ids.items() if deadline <= now_ms]:
            del self.pending_ids[member_id]
        if self.initial_delay_deadline_ms != NO_DEADLINE and now_ms >= self.initial_delay_deadline_ms:
            self.initial_delay_deadline_ms = NO_DEADLINE
