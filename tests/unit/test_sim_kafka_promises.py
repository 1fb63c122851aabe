"""The Kafka world's checker (trikafka/sim/kafka_promises.py, docs/simulation.md "The Kafka world"):
each promise passes on a history that keeps it and names itself on one that breaks it."""

from __future__ import annotations

import dataclasses

import pytest

from trikafka.sim.kafka_promises import (ABORTED, AT_LEAST_ONCE, COMMITS_SURVIVE, ENDS, EXACTLY_ONCE, FORWARD, ONCE,
                                         ORDER, OWNERSHIP, PAST_LSO, SETTLES, SURVIVE, WHERE_TOLD, WHOLE, FinalLogs,
                                         KafkaHistory, copy_value, idempotent_value)

A, B = idempotent_value(0, 0), idempotent_value(0, 1)
COPY_A, COPY_B = copy_value(0, 0, "t1"), copy_value(0, 1, "t1")


def kept() -> tuple[KafkaHistory, FinalLogs]:
    """Two acked records, both copied by one committed transaction, the copiers' offset past them."""
    history = KafkaHistory()
    assert history.acknowledged(0, 0, A) is None and history.acknowledged(0, 1, B) is None
    history.sent("t1", 0, COPY_A)
    history.sent("t1", 0, COPY_B)
    assert history.ended("t1", True) is None
    assert history.read(0, 0, COPY_A) is None
    logs = FinalLogs({0: {0: A, 1: B}}, {0: {0: COPY_A, 1: COPY_B}}, {0: 2}, [], {})
    return history, logs


def test_a_history_that_keeps_every_promise_passes():
    history, logs = kept()
    assert history.finish(logs) is None


@pytest.mark.parametrize("change, promise", [
    (dict(inputs={0: {1: B}}), SURVIVE),
    (dict(inputs={0: {0: A, 1: B, 2: A}}), ONCE),
    (dict(outputs_committed={0: {0: COPY_A}}), WHOLE),
    (dict(copier_offsets={0: 1}), EXACTLY_ONCE),
    (dict(open_transactions=["copier-0"]), ENDS),
    (dict(unstable={0: (1, 2)}), ENDS),
    # the copiers' offset of input partition 0 held by a transaction that never ended: unknown, so
    # exactly-once cannot be judged there, and the hanging transaction is what is reported
    (dict(copier_offsets={}, pending_offsets=[0]), ENDS),
    (dict(unsettled_groups=["readers PreparingRebalance with 1 members"]), SETTLES),
])
def test_the_end_state_breaks_the_promise_it_names(change, promise):
    history, logs = kept()
    violation = history.finish(dataclasses.replace(logs, **change))
    assert violation is not None and violation.promise == promise, violation


def test_a_copy_read_at_an_offset_that_is_not_committed_there_at_the_end_is_past_the_lso():
    history, logs = kept()
    assert history.read(0, 2, copy_value(0, 1, "t2")) is None
    assert history.finish(logs).promise == PAST_LSO


def test_a_transaction_aborted_after_it_was_read_or_read_after_its_abort_is_caught():
    history, _ = kept()
    history.sent("t2", 0, copy_value(0, 2, "t2"))
    assert history.read(0, 2, copy_value(0, 2, "t2")) is None
    assert history.ended("t2", False).promise == ABORTED
    assert history.read(0, 2, copy_value(0, 2, "t2")).promise == ABORTED


def test_group_promises_are_judged_as_they_happen():
    history = KafkaHistory()
    assert history.assigned("g", 3, "m1", [0]) is None and history.assigned("g", 3, "m1", [0]) is None
    assert history.assigned("g", 3, "m2", [0]).promise == OWNERSHIP
    assert history.assigned("g", 4, "m2", [0]) is None  # a new generation may move it
    for offset in range(5):
        assert history.handed_out("in", 0, offset, idempotent_value(1, offset), "g") is None
    assert history.committed("g", 0, 5) is None and history.committed("g", 0, 5) is None
    assert history.committed("g", 0, 4).promise == FORWARD
    assert history.handed_out("in", 0, 7, A) is None
    assert history.handed_out("in", 0, 7, B).promise == WHERE_TOLD


def test_a_commit_past_an_offset_no_member_was_handed_is_caught():
    history = KafkaHistory()
    for offset in (0, 1, 3):
        assert history.handed_out("in", 0, offset, idempotent_value(1, offset), "g") is None
    assert history.handed_out("in", 0, 2, idempotent_value(1, 2)) is None  # handed outside the group
    assert history.committed("g", 0, 2) is None
    violation = history.committed("g", 0, 4)
    assert violation is not None and violation.promise == AT_LEAST_ONCE, violation


@pytest.mark.parametrize("stored, promise", [({("g", 0): 2}, None), ({("g", 0): 3}, None),
                                             ({("g", 0): 1}, COMMITS_SURVIVE), ({}, COMMITS_SURVIVE)])
def test_an_acknowledged_commit_the_healed_coordinator_does_not_answer_is_lost(stored, promise):
    history, logs = kept()
    for offset in range(2):
        assert history.handed_out("in", 0, offset, logs.inputs[0][offset], "g") is None
    assert history.committed("g", 0, 2) is None
    violation = history.finish(dataclasses.replace(logs, group_offsets=stored))
    assert (violation and violation.promise) == promise, violation


@pytest.mark.parametrize("incarnation_of_a, promise", [(0, ORDER), (1, None)])
def test_a_producer_incarnation_s_records_acknowledged_out_of_order_are_caught(incarnation_of_a, promise):
    """B (its record 1) acknowledged at offset 0, A (its record 0) at offset 1: out of the order one
    incarnation submitted them in; two incarnations' records may interleave."""
    history = KafkaHistory()
    assert history.acknowledged(0, 0, B, 0) is None and history.acknowledged(0, 1, A, incarnation_of_a) is None
    violation = history.finish(FinalLogs({0: {0: B, 1: A}}, {}, {0: 0}, [], {}))
    assert (violation and violation.promise) == promise, violation
