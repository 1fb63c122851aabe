"""The group consumer's errors, public and internal to a rebalance."""

from __future__ import annotations


class RebalanceFailedError(Exception):
    """``rebalance_retries_max`` attempts in a row could not claim the assignment
    (0.7's ``ConsumerRebalanceFailedException``)."""


class ConsumerIdTakenOver(Exception):
    """Another live session registered this consumer id (a newer process with
    the same ``consumer_id``).  This consumer stops; its commits were fenced off."""


class KafkaGroupClash(Exception):
    """The group id belongs to a Kafka consumer group with members (docs/protocol.md §17.7): a 0.7
    consumer refuses to register in it."""

    def __init__(self, group: str, coordinator: int):
        by = f"broker {coordinator}" if coordinator >= 0 else "a broker"
        super().__init__(f"group {group} is a Kafka consumer group coordinated by {by}; a 0.7 consumer "
                         f"cannot join it")
        self.group = group
        self.coordinator = coordinator


class ConsumerTimeout(Exception):
    """No message arrived within ``consumer_timeout_s`` (0.7's ``ConsumerTimeoutException``)."""


class _Conflict(Exception):
    """A rebalance attempt could not claim a partition someone else holds."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path  # the owner node in the way, if one


class _Reregister(Exception):
    """Our ``ids`` node is gone though the session lives: register again."""
