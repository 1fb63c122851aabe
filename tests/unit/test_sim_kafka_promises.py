"""The Kafka world's checker (trikafka/sim/kafka_promises.py, docs/simulation.md "The Kafka world"):
each promise passes on a history that keeps it and names itself on one that breaks it."""

from __future__ import annotations

import dataclasses

import pytest

from trikafka.sim.kafka_promises import (ABORTED, ENDS, EXACTLY_ONCE, FORWARD, ONCE, OWNERSHIP, PAST_LSO, SURVIVE,
                                         WHERE_TOLD, WHOLE, FinalLogs, KafkaHistory, copy_value, idempotent_value)

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
    assert history.committed("g", 0, 5) is None and history.committed("g", 0, 5) is None
    assert history.committed("g", 0, 4).promise == FORWARD
    assert history.handed_out("in", 0, 7, A) is None
    assert history.handed_out("in", 0, 7, B).promise == WHERE_TOLD
