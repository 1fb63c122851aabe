"""Errors of trikafka's Kafka-protocol client (docs/protocol.md §16.3's error codes).

Connection failures are the shared client's ``BrokerConnectionError`` family;
an error code a broker answers is ``KafkaResponseError``, whose
``error_code`` is ``kio``'s ``ErrorCode`` (Apache Kafka's numbering, which is
not 0.7's of section 6).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.client.errors import ClientError

# The codes after which the client's metadata is stale: it refreshes it and retries (§16.4).
LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                           ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
                           ErrorCode.unknown_leader_epoch})


class KafkaResponseError(ClientError):
    """A broker answered a non-zero error code for ``what`` (a topic, partition or resource)."""

    def __init__(self, error_code: int, what: str, message: str | None = None):
        code = ErrorCode(error_code)
        detail = f": {message}" if message else ""
        super().__init__(f"{what}: {code.name.upper()} ({int(code)}){detail}")
        self.error_code = code
        self.what = what

    @property
    def retriable(self) -> bool:
        """Whether Kafka calls this error retriable (the same request may succeed later)."""
        return bool(self.error_code.retriable)

    @property
    def stale_metadata(self) -> bool:
        """Whether the error means the client's leader for the partition is out of date."""
        return self.error_code in LEADER_ERRORS


class KafkaOffsetOutOfRange(KafkaResponseError):
    """A fetch offset below the log start or above the high watermark (OFFSET_OUT_OF_RANGE, §16.4)."""

    def __init__(self, topic: str, partition: int, offset: int):
        super().__init__(ErrorCode.offset_out_of_range, f"{topic}-{partition} offset {offset}")
        self.topic, self.partition, self.offset = topic, partition, offset


def check(error_code: int, what: str, message: str | None = None) -> None:
    """Raise ``KafkaResponseError`` for a non-zero ``error_code``."""
    if error_code != ErrorCode.none:
        raise KafkaResponseError(error_code, what, message)


class TransactionStateError(ClientError):
    """A transactional producer was asked for something its state does not allow (§19.8): a send
    outside a transaction, a transaction inside another, a transaction before ``init_transactions``."""


class TransactionFatalError(KafkaResponseError):
    """The transactional producer can no longer be used (§19.8): every later call raises this too.

    A new producer with the same transactional id takes over its work.
    """


class ProducerFencedError(TransactionFatalError):
    """A newer producer of the same transactional id holds a later epoch (PRODUCER_FENCED or
    INVALID_PRODUCER_EPOCH, §19.5.4)."""


# The codes after which a transactional producer is unusable (§19.8), each with its exception class.
FATAL_TRANSACTION_ERRORS: dict[ErrorCode, type[TransactionFatalError]] = {
    ErrorCode.producer_fenced: ProducerFencedError,
    ErrorCode.invalid_producer_epoch: ProducerFencedError,
    ErrorCode.transactional_id_authorization_failed: TransactionFatalError,
    ErrorCode.invalid_producer_id_mapping: TransactionFatalError,
    ErrorCode.invalid_transaction_timeout: TransactionFatalError,
    ErrorCode.transaction_coordinator_fenced: TransactionFatalError,
    ErrorCode.unsupported_version: TransactionFatalError,
}
