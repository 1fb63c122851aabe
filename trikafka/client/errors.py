"""Errors raised by trikafka's Trio client.

Connection-level failures are ``ConnectionError`` subclasses so callers can
catch them with the builtin name; broker answers that carry an error code are
``BrokerError`` subclasses with ``.error_code``.
"""

from __future__ import annotations

from trikafka.wire import ErrorCode


class ClientError(Exception):
    """Base of every error the client raises on purpose."""


class BrokerConnectionError(ConnectionError, ClientError):
    """The connection is closed, broke, or lost its framing; it cannot be used again."""


class BrokerProtocolError(BrokerConnectionError):
    """The broker sent bytes that violate the protocol; the connection was closed."""


class BrokerTimeoutError(BrokerConnectionError):
    """No response within the request timeout; the connection was closed (it is out of step)."""


class ExtensionNotSupported(BrokerConnectionError):
    """The broker closed the connection on a trikafka extension request (spec §9.1).

    That is what a plain 0.7 broker does with an unknown request type, so the
    caller should reconnect and fall back to the 0.7 requests (types 0-4).
    """


class BrokerError(ClientError):
    """The broker answered with a non-zero error code."""

    def __init__(self, error_code: ErrorCode, msg: str):
        super().__init__(f"{msg} (error {error_code.name}={int(error_code)})")
        self.error_code = error_code


class OffsetOutOfRange(BrokerError):
    """The fetch offset is before the log start or after its visible end (error 1)."""

    def __init__(self, topic: str, partition: int, offset: int):
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is out of range for {topic}-{partition}",
        )
        self.topic, self.partition, self.offset = topic, partition, offset


class MessageTooLargeForFetch(ClientError):
    """The next message does not fit in the largest fetch size the consumer may use."""

    def __init__(self, topic: str, partition: int, offset: int, needed_bytes: int | None, limit_bytes: int):
        needed = "more" if needed_bytes is None else f"{needed_bytes}"
        super().__init__(
            f"the entry at {topic}-{partition} offset {offset} needs {needed} bytes, "
            f"above the fetch size limit of {limit_bytes} bytes"
        )
        self.topic, self.partition, self.offset = topic, partition, offset
        self.needed_bytes, self.limit_bytes = needed_bytes, limit_bytes
