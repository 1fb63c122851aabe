"""Where a new follower cuts its log (KIP-101, with KIP-279's walk back over missed epochs).

The follower asks the leader where an epoch ends (EPOCH_END_OFFSET); this
module decides what to ask and where to truncate once the answers agree.
Pure: ``first_step`` and ``next_step`` return either another question or the
offset to truncate to; the caller does the round trips.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...log.epochs import UNDEFINED_EPOCH, EpochHistory


@dataclass(frozen=True, slots=True)
class AskLeader:
    """Ask the leader where ``epoch`` ends."""

    epoch: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Cut the log (then the epoch history) at ``offset``; fetch from there."""

    offset: int


Step = AskLeader | TruncateTo


def first_step(history: EpochHistory, log_end: int) -> Step:
    """The first question: where does my latest epoch end? (Nothing to ask with no history.)"""
    if history.latest_epoch == UNDEFINED_EPOCH:
        return TruncateTo(0)  # bytes without an epoch have no provenance to compare
    return AskLeader(history.latest_epoch)


def next_step(history: EpochHistory, log_end: int, leader_epoch: int, leader_end: int) -> Step:
    """Given the leader's answer ``(leader_epoch, leader_end)`` to the last question.

    If this replica knows ``leader_epoch`` too, both logs hold that epoch's bytes
    from its one leader from the same start, so they agree up to the smaller of
    the two ends.  If it never saw ``leader_epoch``, ask about the largest epoch
    it has below that one.  An undefined answer (a leader with no history) cuts
    everything.
    """
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncateTo(0)
    own_epoch, own_end = history.end_offset_for(leader_epoch, log_end)
    if own_epoch == leader_epoch:
        return TruncateTo(min(leader_end, own_end, log_end))
    if own_epoch == UNDEFINED_EPOCH:
        return TruncateTo(0)
    # We never saw leader_epoch: our bytes past our own epoch below it are not the leader's.
    return AskLeader(own_epoch)


def resolve(history: EpochHistory, log_end: int, leader_answer) -> int:
    """Run the exchange against ``leader_answer(epoch) -> (epoch, end)``; the truncation offset.

    For tests and for callers whose leader lookup is synchronous.
    """
    step = first_step(history, log_end)
    for _ in range(len(history.entries) + 2):
        if isinstance(step, TruncateTo):
            return step.offset
        step = next_step(history, log_end, *leader_answer(step.epoch))
    raise AssertionError("epoch walk did not terminate")  # each AskLeader asks a smaller epoch
