"""Error codes (docs/protocol.md §6) and the exceptions of the sans-I/O codec.

Two families, modelled on h11:

* ``ProtocolError`` says *who* broke the framing: ``RemoteProtocolError`` is the
  peer's fault (the broker closes the connection, spec §2);
  ``LocalProtocolError`` is a misuse of this API by our own code.
* ``MessageError`` says a message set itself is unacceptable (bad CRC, magic,
  codec, framing, or size).  Where it is raised from a peer's request the
  broker decides what to do: close a 0.7 connection, or answer an extension
  request with the carried ``error_code``.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Every error code a response may carry (0.7 codes plus trikafka's)."""

    UNKNOWN = -1
    NO_ERROR = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    WRONG_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    # trikafka extensions (spec §9); sent only in extension responses.
    MESSAGE_SIZE_TOO_LARGE = 5
    REQUEST_TIMED_OUT = 6
    INVALID_TOPIC = 7
    UNKNOWN_TOPIC = 8  # METADATA: no partition log of the topic on this broker
    TOPIC_ALREADY_EXISTS = 9  # CREATE_TOPIC: exists with another partition count
    INVALID_PARTITIONS = 10  # CREATE_TOPIC: partition count out of range
    INVALID_CONFIG = 11  # CREATE_TOPIC: a setting is unknown or has a bad value
    # Replication (docs/protocol.md §12.5); numbered from 20 to stay clear of others.
    NOT_LEADER_FOR_PARTITION = 20
    FENCED_LEADER_EPOCH = 21
    UNKNOWN_LEADER_EPOCH = 22
    NOT_ENOUGH_REPLICAS = 23
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 24
    LEADER_NOT_AVAILABLE = 25
    NOT_REPLICA = 26
    WRONG_FORMAT = 27  # any 0.7 request naming a Kafka-format partition (§16.6)

    @classmethod
    def from_wire(cls, value: int) -> "ErrorCode":
        """Map a received int16 to a code; unknown values read as UNKNOWN (§6)."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


# Retry classification (docs/protocol.md §12.5, §12.13): the one place every client asks.
# The partition has moved to another broker, or has no leader right now: refresh the
# metadata (METADATA, §9.4), then send again to the leader it names.
LEADER_CHANGE_CODES = frozenset({
    ErrorCode.NOT_LEADER_FOR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
})
# Worth sending again as it is: the partition list moved (3), or an acks -1 write was
# not committed (23, 24, 6).  An error never means "not written" (§12.6), so a retry
# may duplicate a message: at least once, never silently lost.
RETRIABLE_CODES = LEADER_CHANGE_CODES | frozenset({
    ErrorCode.WRONG_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
})


def is_retriable(code: int) -> bool:
    """Whether a part that failed with ``code`` may succeed if sent again (maybe elsewhere)."""
    return ErrorCode.from_wire(int(code)) in RETRIABLE_CODES


def needs_leader_refresh(code: int) -> bool:
    """Whether ``code`` says the client's idea of the partition's leader is out of date."""
    return ErrorCode.from_wire(int(code)) in LEADER_CHANGE_CODES


class ProtocolError(Exception):
    """Abstract base: the byte stream cannot be understood."""

    def __init__(self, msg: str, error_code: ErrorCode = ErrorCode.UNKNOWN):
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise Local- or RemoteProtocolError")
        super().__init__(msg)
        self.error_code = error_code


class LocalProtocolError(ProtocolError):
    """Our own code asked the codec for something the protocol cannot express."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that violate the protocol; close the connection."""


class MessageError(ValueError):
    """A message set that must not be appended or trusted."""

    error_code: ErrorCode = ErrorCode.INVALID_MESSAGE


class InvalidMessageError(MessageError):
    """Bad CRC, magic, codec, framing or compressed payload (error code 2)."""

    error_code = ErrorCode.INVALID_MESSAGE


class MessageSizeTooLargeError(MessageError):
    """A top-level payload exceeds ``max.message.size`` (error code 5)."""

    error_code = ErrorCode.MESSAGE_SIZE_TOO_LARGE
