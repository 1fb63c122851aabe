"""The engine's errors: what an operation on a partition or a topic ended with.

The engine's own vocabulary, not a wire's: each listener has one table from
these to its wire codes (the 0.7 listener's ``handlers.ENGINE_TO_07``, the
Kafka listener's ``kafka/errors.ENGINE_TO_KAFKA``).  A plain ``Enum``, not an
``IntEnum``, so an engine error can never be written to a wire unmapped.
"""

from __future__ import annotations

import enum


class EngineError(enum.Enum):
    """An engine operation's outcome (``NO_ERROR``: it succeeded)."""

    NO_ERROR = "no error"
    OFFSET_OUT_OF_RANGE = "offset out of range"  # a read below the log start or past its end
    WRONG_PARTITION = "wrong partition"  # no such partition, or no log of it here
    INVALID_FETCH_SIZE = "invalid fetch size"  # a read of a negative byte count
    REQUEST_TIMED_OUT = "request timed out"  # an acknowledgement still pending at its deadline
    INVALID_TOPIC = "invalid topic"  # a name the topic rules reject (§9.7)
    UNKNOWN_TOPIC = "unknown topic"  # a valid name with no topic here
    TOPIC_ALREADY_EXISTS = "topic already exists"  # a creation with another partition count
    INVALID_PARTITIONS = "invalid partitions"  # a partition count out of range
    INVALID_CONFIG = "invalid config"  # a topic setting unknown or of a bad value
    SETTINGS_NOT_KEPT = "settings not kept"  # a topic created whose settings could not be stored
    NOT_LEADER_FOR_PARTITION = "not leader for partition"  # a replicated partition another broker leads
    LEADER_NOT_AVAILABLE = "leader not available"  # a replicated partition with no leader now
    NOT_ENOUGH_REPLICAS = "not enough replicas"  # acks -1 refused: the ISR is below min.insync.replicas
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not enough replicas after append"  # the ISR shrank below it meanwhile
