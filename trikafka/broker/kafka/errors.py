"""What the engine's errors answer on the Kafka listener (docs/protocol.md §16.3).

The engine speaks the 0.7 listener's codes (section 6, 12.5); this table says
which Apache Kafka code each one is on this listener, and which code a bad
batch (``BatchError``) answers.  A code with no entry answers
``UNKNOWN_SERVER_ERROR``.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import BatchError
from trikafka.wire.errors import ErrorCode as EngineError

ENGINE_TO_KAFKA: dict[EngineError, ErrorCode] = {
    EngineError.NO_ERROR: ErrorCode.none,
    EngineError.OFFSET_OUT_OF_RANGE: ErrorCode.offset_out_of_range,
    EngineError.WRONG_PARTITION: ErrorCode.unknown_topic_or_partition,
    EngineError.UNKNOWN_TOPIC: ErrorCode.unknown_topic_or_partition,
    EngineError.INVALID_TOPIC: ErrorCode.invalid_topic_exception,
    EngineError.MESSAGE_SIZE_TOO_LARGE: ErrorCode.message_too_large,
    EngineError.REQUEST_TIMED_OUT: ErrorCode.request_timed_out,
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_leader_or_follower,
    EngineError.LEADER_NOT_AVAILABLE: ErrorCode.leader_not_available,
    EngineError.FENCED_LEADER_EPOCH: ErrorCode.fenced_leader_epoch,
    EngineError.UNKNOWN_LEADER_EPOCH: ErrorCode.unknown_leader_epoch,
    EngineError.NOT_ENOUGH_REPLICAS: ErrorCode.not_enough_replicas,
    EngineError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.not_enough_replicas_after_append,
    EngineError.INVALID_MESSAGE: ErrorCode.corrupt_message,
}

BATCH_TO_KAFKA: dict[str, ErrorCode] = {
    BatchError.CORRUPT: ErrorCode.corrupt_message,
    BatchError.INVALID: ErrorCode.invalid_record,
    BatchError.TOO_LARGE: ErrorCode.message_too_large,
    BatchError.OUT_OF_ORDER_SEQUENCE: ErrorCode.out_of_order_sequence_number,
    BatchError.INVALID_PRODUCER_EPOCH: ErrorCode.invalid_producer_epoch,
    BatchError.TRANSACTIONAL: ErrorCode.transactional_id_authorization_failed,
    BatchError.TXN_STATE: ErrorCode.invalid_txn_state,
}


def kafka_error(code: EngineError) -> ErrorCode:
    """The Kafka code that an engine code answers on this listener."""
    return ENGINE_TO_KAFKA.get(code, ErrorCode.unknown_server_error)
