"""Errors of the producer.  All are ``ClientError``s, so one ``except`` covers the client too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from trikafka.client.errors import ClientError
from trikafka.wire import ErrorCode

if TYPE_CHECKING:  # pragma: no cover
    from .results import SendResult


class ProducerError(ClientError):
    """Base of every error the producer raises or reports for a message."""


class ProducerClosedError(ProducerError):
    """``send`` after ``close`` (or outside ``async with``)."""


class NoBrokersAvailableError(ProducerError):
    """No live broker could take the message: none known, or every attempt failed."""


class MessageTooLargeError(ProducerError, ValueError):
    """A payload is larger than ``max_message_size`` (0.7's producer refuses it, §12.2)."""


class QueueFullError(ProducerError):
    """The async queue stayed full for ``enqueue_timeout_s`` (0.7's QueueFullException)."""


class AcksNotSupportedError(ProducerError):
    """``acks`` 1 or -1 against a plain 0.7 broker, which has no PRODUCE_ACKED (§16)."""


class BrokerRejectedError(ProducerError):
    """The broker answered a PRODUCE_ACKED part with an error code (§16.1)."""

    def __init__(self, error_code: ErrorCode, topic: str, broker_id: int, partition: int):
        super().__init__(
            f"broker {broker_id} rejected {topic}-{partition}: {error_code.name} ({int(error_code)})"
        )
        self.error_code = error_code


class DeliveryFailedError(ProducerError):
    """Some messages of a batch (``send_batch``) or of the async queue were not delivered.

    ``results`` holds the failed ``SendResult``s (each with ``.error``);
    ``failed_count`` counts them all even when ``results`` keeps only a sample.
    """

    def __init__(self, msg: str, results: Sequence["SendResult"], failed_count: int | None = None):
        self.results = list(results)
        self.failed_count = len(self.results) if failed_count is None else failed_count
        first = next((r.error for r in self.results if r.error is not None), None)
        super().__init__(f"{msg}: {self.failed_count} message(s) not delivered"
                         + (f"; first error: {first}" if first is not None else ""))


class PartitionerError(ProducerError):
    """The partitioner raised, or returned an index outside ``[0, n)``, for a message's key."""
