"""The log's gate: what may start while what is in flight, fail-stop, and the idle handshake."""

from __future__ import annotations

import pytest

from trikafka.log import LogBusyError, LogClosedError, LogFailedError
from trikafka.log.gate import (
    APPEND,
    CLEANING,
    FLUSH,
    IN_FLIGHT,
    INLINE_RETENTION,
    INLINE_ROLL,
    RETENTION,
    ROLL,
    TRUNCATION,
    Gate,
)


def gate_with(*running: str) -> tuple[Gate, set[str]]:
    """A gate whose collaborators report ``running`` in flight (the set can change afterwards)."""
    in_flight = set(running)
    gate = Gate("t-0", {kind: (lambda kind=kind: kind in in_flight) for kind in (FLUSH, ROLL, RETENTION, TRUNCATION)})
    gate.cleaning = CLEANING in in_flight
    return gate, in_flight


# (operation, what is in flight, may it start?) -- the rules of docs/protocol.md §7.2, §7.4 and §12.11.
RULES = [
    (APPEND, FLUSH, True),  # appends go on while a flush fsyncs (group commit)
    (APPEND, RETENTION, True),
    (APPEND, CLEANING, True),
    (APPEND, ROLL, False),
    (APPEND, TRUNCATION, False),
    (FLUSH, FLUSH, False),
    (FLUSH, ROLL, False),
    (FLUSH, TRUNCATION, True),  # allowed, but it captures nothing: the truncation fsyncs what it leaves
    (ROLL, FLUSH, False),
    (INLINE_ROLL, FLUSH, True),  # it fsyncs the whole segment
    (INLINE_ROLL, ROLL, False),
    (RETENTION, FLUSH, True),
    (RETENTION, ROLL, True),
    (RETENTION, CLEANING, True),  # the broker's cleaner and deleter keep apart themselves
    (RETENTION, RETENTION, False),
    (RETENTION, TRUNCATION, False),
    (INLINE_RETENTION, CLEANING, False),
    (INLINE_RETENTION, FLUSH, True),
]


@pytest.mark.parametrize("operation, running, may_start", RULES)
def test_an_operation_starts_unless_what_is_in_flight_excludes_it(operation, running, may_start):
    gate, _ = gate_with(running)
    if may_start:
        gate.check(operation)
        assert gate.blockers(operation) == []
    else:
        with pytest.raises(LogBusyError, match=running):
            gate.check(operation)


@pytest.mark.parametrize("running", IN_FLIGHT)
def test_a_truncation_waits_for_every_kind_and_idle_means_it_may_start(running):
    gate, _ = gate_with(running)
    assert gate.blockers(TRUNCATION) == [running] and not gate.idle
    assert gate_with()[0].idle


def test_a_closed_or_failed_log_refuses_before_it_is_busy_and_the_first_failure_stays():
    gate, _ = gate_with(ROLL)
    error = gate.fail("fsync of a failed: EIO")
    assert isinstance(error, LogFailedError) and gate.failure == "t-0: fsync of a failed: EIO"
    gate.fail("roll to b failed")
    assert gate.failure == "t-0: fsync of a failed: EIO"
    with pytest.raises(LogFailedError, match="fsync of a"):
        gate.check(APPEND)
    gate.close()
    with pytest.raises(LogClosedError):
        gate.check(APPEND)


def test_idle_listeners_hear_an_end_only_when_nothing_is_left_and_even_when_settling_raised():
    gate, in_flight = gate_with(FLUSH, RETENTION)
    calls = []
    gate.add_idle_listener(lambda: calls.append(sorted(in_flight)))
    in_flight.discard(FLUSH)
    gate.notify_idle()
    assert calls == []  # the retention pass is still in flight
    in_flight.discard(RETENTION)
    with pytest.raises(LogFailedError), gate.settling():
        raise gate.fail("retention failed")
    assert calls == [[]]
    gate.cleaning = True
    gate.cleaning = False
    assert calls == [[], []]
