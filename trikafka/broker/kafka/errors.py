"""What the engine's errors answer on the Kafka listener (docs/protocol.md §16.3).

The one table from the engine's errors (``broker/engine/errors.py``) to Apache
Kafka's codes on this listener, and which code a bad batch (``BatchError``)
answers.  Every engine error has an entry (``tests/unit/test_broker_engine_errors.py``).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import BatchError

from ..engine.errors import EngineError

ENGINE_TO_KAFKA: dict[EngineError, ErrorCode] = {
    EngineError.NO_ERROR: ErrorCode.none,
    EngineError.OFFSET_OUT_OF_RANGE: ErrorCode.offset_out_of_range,
    EngineError.WRONG_PARTITION: ErrorCode.unknown_topic_or_partition,
    EngineError.INVALID_FETCH_SIZE: ErrorCode.invalid_request,
    EngineError.REQUEST_TIMED_OUT: ErrorCode.request_timed_out,
    EngineError.INVALID_TOPIC: ErrorCode.invalid_topic_exception,
    EngineError.UNKNOWN_TOPIC: ErrorCode.unknown_topic_or_partition,
    EngineError.TOPIC_ALREADY_EXISTS: ErrorCode.topic_already_exists,
    EngineError.INVALID_PARTITIONS: ErrorCode.invalid_partitions,
    EngineError.INVALID_CONFIG: ErrorCode.invalid_config,
    EngineError.SETTINGS_NOT_KEPT: ErrorCode.unknown_server_error,
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_leader_or_follower,
    EngineError.LEADER_NOT_AVAILABLE: ErrorCode.leader_not_available,
    EngineError.NOT_ENOUGH_REPLICAS: ErrorCode.not_enough_replicas,
    EngineError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.not_enough_replicas_after_append,
}

BATCH_TO_KAFKA: dict[str, ErrorCode] = {
    BatchError.CORRUPT: ErrorCode.corrupt_message,
    BatchError.INVALID: ErrorCode.invalid_record,
    BatchError.TOO_LARGE: ErrorCode.message_too_large,
    BatchError.OUT_OF_ORDER_SEQUENCE: ErrorCode.out_of_order_sequence_number,
    BatchError.INVALID_PRODUCER_EPOCH: ErrorCode.invalid_producer_epoch,
    BatchError.TRANSACTIONAL: ErrorCode.transactional_id_authorization_failed,
    BatchError.TXN_STATE: ErrorCode.invalid_txn_state,
    BatchError.COORDINATOR_FENCED: ErrorCode.transaction_coordinator_fenced,
}


def kafka_error(code: EngineError) -> ErrorCode:
    """The Kafka code that an engine error answers on this listener."""
    return ENGINE_TO_KAFKA[code]


def refused_set_error(refusal: Exception) -> ErrorCode:
    """The Kafka code for a set the log refused (``Engine.append``'s ``MessageError`` or
    ``BatchError`` outcome: nothing appended)."""
    return BATCH_TO_KAFKA[refusal.kind] if isinstance(refusal, BatchError) else ErrorCode.corrupt_message
