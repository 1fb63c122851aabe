"""The engine's errors and the one table of each listener (broker/engine/errors.py)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from trikafka.broker.engine.errors import EngineError
from trikafka.broker.handlers import ENGINE_TO_07
from trikafka.broker.kafka.errors import ENGINE_TO_KAFKA, kafka_error
from trikafka.wire.errors import ErrorCode


@pytest.mark.parametrize("table", [ENGINE_TO_07, ENGINE_TO_KAFKA], ids=["0.7", "kafka"])
def test_every_engine_error_has_a_wire_code_on_each_listener(table):
    assert set(table) == set(EngineError)


def test_success_is_success_on_both_listeners():
    assert ENGINE_TO_07[EngineError.NO_ERROR] == ErrorCode.NO_ERROR
    assert kafka_error(EngineError.NO_ERROR) == KafkaError.none


def test_an_engine_error_is_not_a_wire_code():
    # A plain Enum: an engine error cannot be written to a wire without its listener's table.
    assert not isinstance(EngineError.NO_ERROR, int)
    assert EngineError.NOT_LEADER_FOR_PARTITION != ErrorCode.NOT_LEADER_FOR_PARTITION
