"""Per-log settings (spec §14.1 names in comments; units in the field names)."""

from __future__ import annotations

from dataclasses import dataclass

from .record_format import RECORD_FORMATS

HOUR_MS = 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one log; the broker derives per-topic instances from its config."""

    segment_bytes: int = 1073741824  # log.file.size / topic.log.file.size
    roll_ms: int = 168 * HOUR_MS  # log.roll.hours / topic.log.roll.hours
    flush_interval_messages: int = 500  # log.flush.interval
    flush_interval_ms: int = 3000  # log.default.flush.interval.ms / topic.flush.intervals.ms
    retention_ms: int = 168 * HOUR_MS  # log.retention.hours / topic.log.retention.hours
    retention_bytes: int = -1  # log.retention.size / topic.log.retention.size; < 0 is off
    max_message_size: int = 1000000  # max.message.size: top-level payload bytes
    recovery_chunk_bytes: int = 8 << 20  # trikafka only: the crash-recovery scan's read size (tests shrink it)
    # record.format (docs/protocol.md §16.6): what a new partition of the topic stores, "0.7" or "v2";
    # an existing log keeps the format its directory names.
    record_format: str = "0.7"
    # producer.id.expiration.ms (docs/protocol.md §19.2.1): a producer silent this long, with no open
    # transaction, leaves a Kafka-format log's producer state.
    producer_id_expiration_ms: int = 24 * HOUR_MS

    def __post_init__(self) -> None:
        for name in ("segment_bytes", "roll_ms", "flush_interval_messages", "max_message_size",
                     "recovery_chunk_bytes", "producer_id_expiration_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"LogConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.record_format not in RECORD_FORMATS:
            raise ValueError(f"LogConfig.record_format must be one of {sorted(RECORD_FORMATS)}, "
                             f"got {self.record_format!r}")
        for name in ("flush_interval_ms", "retention_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"LogConfig.{name} must be >= 0, got {getattr(self, name)}")
