"""What one acknowledged produce costs the broker's event loop, in task steps (docs/protocol.md §7.2,
§9.2, §16.4), counted in-process by ``bench/ack_steps.py``'s instrument: a client sends one request
at a time, so every step between two answers is the request's.  Default ``acks.all.fsync`` (true)."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from bench.ack_steps import kafka_sender, legacy_sender, measure
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

REQUESTS = 30
# Steps a loop's background may add over REQUESTS requests (a timer, a metrics tick), per request.
SLACK = 0.5


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker() as running:
        yield running


def _steps(broker: RunningKafkaBroker, sender: Callable[[int, int], Callable[[], object]], port: int,
           acks: int) -> float:
    assert broker.trio_token is not None
    steps, _, _ = measure(broker.trio_token, sender(port, acks), REQUESTS)
    return steps


def test_a_07_produce_acked_costs_its_read_the_wake_after_its_flush_and_its_send(broker: RunningKafkaBroker) -> None:
    """acks -1: the connection's step that reads, appends and waits; the fsync's completion callback;
    the connection's wake, which sends; the send's own checkpoint.  acks 1: the read and the send."""
    assert _steps(broker, legacy_sender, broker.port, -1) <= 4 + SLACK
    assert _steps(broker, legacy_sender, broker.port, 1) <= 2 + SLACK


def test_a_kafka_produce_with_acks_all_costs_its_read_the_completion_and_its_send(broker: RunningKafkaBroker) -> None:
    """acks -1: the reader's step that appends and holds the deferred answer; the fsync's completion
    callback, which queues it; the sender's wake, which sends it; the send's own checkpoint.  Nothing
    starts the flush, nothing takes the answer only to wait for it.  acks 1: the read and the send."""
    assert _steps(broker, kafka_sender, broker.kafka_port, -1) <= 4 + SLACK
    assert _steps(broker, kafka_sender, broker.kafka_port, 1) <= 2 + SLACK
