"""Errors of the log core.

Each error that a broker turns into a response carries the wire ``error_code``
it maps to (spec §6, §9); the broker decides whether to answer with it or to
close the connection.  ``MessageError`` from ``trikafka.wire`` is raised as is
by ``Log.append`` for a set that fails validation.
"""

from __future__ import annotations

from trikafka.wire.errors import ErrorCode


class LogError(Exception):
    """Base class of every error raised by ``trikafka.log``."""

    error_code: ErrorCode = ErrorCode.UNKNOWN


class OffsetOutOfRangeError(LogError):
    """A read asked for ``offset < S`` or ``offset > E`` (spec §5.2)."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, start_offset: int, visible_end: int):
        super().__init__(f"offset {offset} is outside the log's range [{start_offset}, {visible_end}]")
        self.offset = offset
        self.start_offset = start_offset
        self.visible_end = visible_end


class InvalidTopicError(LogError):
    """A topic name that trikafka refuses (spec §9.7); nothing was created."""

    error_code = ErrorCode.INVALID_TOPIC


class WrongPartitionError(LogError):
    """A partition id outside ``[0, partitions(topic))`` (spec §5.1 step 2)."""

    error_code = ErrorCode.WRONG_PARTITION


class LogFailedError(LogError):
    """The log hit an I/O error and refuses every later write (fail-stop).

    ``reason`` says which operation failed and why.  Reads of data that was
    already visible keep working; the only way forward is a restart, whose
    crash recovery decides what of the unflushed tail survives.
    """

    def __init__(self, reason: str):
        super().__init__(f"log is failed and refuses writes: {reason}")
        self.reason = reason


class LogBusyError(LogError):
    """A flush or roll ticket is in flight; finish it first (one per log)."""


class LogClosedError(LogError):
    """The log (or the manager) was closed."""


class LogLoadError(LogError):
    """The on-disk state cannot be loaded: a bad name or non-contiguous segments.

    Raised at startup; 0.7 refuses to start in the same situations (spec §7.1)
    and so does trikafka, with a message naming the offending path.
    """


class WrongFormatError(LogError):
    """An operation of one record format on a log of the other (docs/protocol.md §16.6); nothing changed."""
