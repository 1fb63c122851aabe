"""Per-topic settings (docs/protocol.md §12.12.1): which keys exist, how each is checked, what they override.

Pure.  The admin CLI checks what it writes with :func:`check_topic_config`;
the broker turns what it reads into :class:`LogOverrides` with
:func:`log_overrides` (same rules, so a value the CLI accepted is one the
broker understands).
"""

from __future__ import annotations

from dataclasses import dataclass

from trikafka.log.cleaner import parse_cleanup_policy
from trikafka.zk.replication_values import (
    TOPIC_CONFIG_DEFAULTS, UNCLEAN_ELECTION, ReplicationValueError, TopicConfig,
)
from trikafka.util.settings import parse_bool

CLEANUP_POLICY = "cleanup.policy"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
DELETE_RETENTION_MS = "delete.retention.ms"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
MAX_MESSAGE_BYTES = "max.message.bytes"  # overrides the broker's max.message.size for the topic's logs
# A Kafka-format topic's settings (docs/protocol.md §16.4, §16.6).
RECORD_FORMAT = "record.format"
FORMAT_07 = "0.7"
FORMAT_V2 = "v2"
RECORD_FORMATS = (FORMAT_07, FORMAT_V2)
MESSAGE_TIMESTAMP_TYPE = "message.timestamp.type"
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
LOG_KEYS = (CLEANUP_POLICY, MIN_COMPACTION_LAG_MS, DELETE_RETENTION_MS, RETENTION_MS, RETENTION_BYTES, SEGMENT_BYTES,
            RECORD_FORMAT, MESSAGE_TIMESTAMP_TYPE, MAX_MESSAGE_BYTES)
REPLICATION_KEYS = tuple(TOPIC_CONFIG_DEFAULTS)

UNCLEAN_WARNING = ("WARNING: unclean.leader.election.enable=true lets a replica outside the ISR become leader "
                   "when no in-sync replica is left: committed (acknowledged) messages may be LOST")


class TopicConfigError(ValueError):
    """A per-topic setting that cannot be stored; the message names the key."""


@dataclass(frozen=True, slots=True)
class LogOverrides:
    """What a topic's settings change on a broker (None: the broker's own setting)."""

    compact: bool | None = None
    delete: bool | None = None
    min_compaction_lag_ms: int | None = None
    delete_retention_ms: int | None = None
    retention_ms: int | None = None
    retention_bytes: int | None = None
    segment_bytes: int | None = None
    record_format: str | None = None
    timestamp_type: str | None = None
    max_message_bytes: int | None = None

    @property
    def changes_log_config(self) -> bool:
        """Whether the topic's ``LogConfig`` (retention, segment size, format) differs from the broker's."""
        return (self.retention_ms is not None or self.retention_bytes is not None or self.segment_bytes is not None
                or self.record_format is not None or self.max_message_bytes is not None)


def parse_config_items(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` (``--config``) to a dict; TopicConfigError on an item without ``=``."""
    config: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TopicConfigError(f"--config takes KEY=VALUE, not {item!r}")
        config[key.strip()] = value.strip()
    return config


def _int(config: dict[str, str], key: str, minimum: int | None) -> int | None:
    if key not in config:
        return None
    try:
        value = int(config[key])
    except ValueError:
        raise TopicConfigError(f"{key}={config[key]!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise TopicConfigError(f"{key}={value}: must be >= {minimum}")
    return value


def log_overrides(config: dict[str, str]) -> LogOverrides:
    """The log settings among ``config`` (other keys ignored); TopicConfigError on a bad value."""
    compact = delete = None
    if CLEANUP_POLICY in config:
        try:
            compact, delete = parse_cleanup_policy(config[CLEANUP_POLICY])
        except ValueError as exc:
            raise TopicConfigError(str(exc)) from None
    return LogOverrides(compact, delete, _int(config, MIN_COMPACTION_LAG_MS, 0),
                        _int(config, DELETE_RETENTION_MS, 0), _int(config, RETENTION_MS, 0),
                        _int(config, RETENTION_BYTES, None), _int(config, SEGMENT_BYTES, 1),
                        _choice(config, RECORD_FORMAT, RECORD_FORMATS),
                        _choice(config, MESSAGE_TIMESTAMP_TYPE, TIMESTAMP_TYPES), _int(config, MAX_MESSAGE_BYTES, 0))


def _choice(config: dict[str, str], key: str, allowed: tuple[str, ...]) -> str | None:
    if key not in config:
        return None
    if config[key] not in allowed:
        raise TopicConfigError(f"{key}={config[key]!r}: expected one of {', '.join(allowed)}")
    return config[key]


def check_topic_config(config: dict[str, str], *, replicated: bool) -> list[str]:
    """Check every key and value a topic would store; the warnings to print.

    Raises TopicConfigError for an unknown key, a bad value, or a replication
    key on a plain (unreplicated) topic.
    """
    for key in config:
        if key in REPLICATION_KEYS:
            if not replicated:
                raise TopicConfigError(f"{key} applies to replicated topics only (create with --replication-factor)")
        elif key not in LOG_KEYS:
            known = ", ".join(LOG_KEYS + (REPLICATION_KEYS if replicated else ()))
            raise TopicConfigError(f"unknown topic config key {key!r} (known: {known})")
    log_overrides(config)
    if replicated:
        try:
            TopicConfig.from_strings({k: v for k, v in config.items() if k in REPLICATION_KEYS})
        except ReplicationValueError as exc:
            raise TopicConfigError(str(exc)) from None
    warnings = []
    if UNCLEAN_ELECTION in config and parse_bool(config[UNCLEAN_ELECTION]):
        warnings.append(UNCLEAN_WARNING)
    return warnings
