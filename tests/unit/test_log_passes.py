"""A log's pass leases (trikafka/log/passes.py, docs/protocol.md §16.4): what a deletion waits for."""

from __future__ import annotations

from trikafka.log.passes import Passes


def test_leases_are_counted_until_released_and_a_second_release_does_nothing():
    passes = Passes("t-0")
    first, second = passes.take(), passes.take()
    assert first is not None and second is not None and passes.held == 2
    first.release()
    first.release()
    assert passes.held == 1 and not first.held and second.held
    with second:
        pass
    assert passes.held == 0


def test_a_retired_log_refuses_new_leases_and_keeps_the_ones_held():
    passes = Passes("t-0")
    held = passes.take()
    passes.retire()
    assert passes.retired and passes.take() is None and passes.held == 1
    assert held is not None and held.held


def test_a_pass_holding_a_lease_takes_another_under_it_after_retirement():
    passes, other = Passes("t-0"), Passes("u-0")
    outer, foreign = passes.take(), other.take()
    passes.retire()
    inner = passes.take(under=outer)
    assert inner is not None and passes.held == 2
    assert passes.take(under=foreign) is None  # another log's lease does not count
    inner.release()
    assert outer is not None
    outer.release()
    assert passes.take(under=outer) is None  # a released lease does not either


def test_the_ended_callback_runs_once_when_the_last_lease_ends():
    passes = Passes("t-0")
    first, second = passes.take(), passes.take()
    ended = []
    passes.on_ended(lambda: ended.append(passes.held))
    assert first is not None and second is not None
    first.release()
    assert ended == []
    second.release()
    assert ended == [0]
    again = passes.take()
    assert again is not None
    again.release()
    assert ended == [0]  # once

