"""The broker's request table (trikafka/broker/connection.py) against the wire's (RequestType)."""

from __future__ import annotations

from trikafka.broker.connection import HANDLERS
from trikafka.broker.metrics import BrokerMetrics
from trikafka.wire.requests import RequestType


def test_every_request_type_of_the_wire_table_has_one_handler():
    assert set(HANDLERS) == set(RequestType)


def test_every_request_type_has_its_latency_histogram_under_its_table_label():
    metrics = BrokerMetrics()
    assert set(metrics.requests) == {kind.label for kind in RequestType}
    for kind in RequestType:
        assert metrics.request_histogram(kind.api.request_class.__name__) is metrics.requests[kind.label]
