"""Errors of the producer.  All are ``ClientError``s, so one ``except`` covers the client too."""

from __future__ import annotations

from trikafka.client.errors import ClientError
from trikafka.wire import ErrorCode


class ProducerError(ClientError):
    """Base of every error the producer raises or reports for a message."""


class ProducerClosedError(ProducerError):
    """``send`` after ``close`` (or outside ``async with``)."""


class NoBrokersAvailableError(ProducerError):
    """No live broker could take the message: none known, or every attempt failed."""


class MessageTooLargeError(ProducerError, ValueError):
    """A payload is larger than ``max_message_size`` (0.7's producer refuses it)."""


class QueueFullError(ProducerError):
    """The async queue stayed full for ``enqueue_timeout_s`` (0.7's QueueFullException)."""


class AcksNotSupportedError(ProducerError):
    """``acks`` 1 or -1 against a plain 0.7 broker, which has no PRODUCE_ACKED (docs/protocol.md §9.1)."""


class BrokerRejectedError(ProducerError):
    """The broker answered a PRODUCE_ACKED part with an error code (docs/protocol.md §9.2)."""

    def __init__(self, error_code: ErrorCode, topic: str, broker_id: int, partition: int):
        super().__init__(
            f"broker {broker_id} rejected {topic}-{partition}: {error_code.name} ({int(error_code)})"
        )
        self.error_code = error_code


class PartitionerError(ProducerError):
    """The partitioner raised, or returned an index outside ``[0, n)``, for a message's key."""
